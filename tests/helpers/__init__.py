"""Shared test helpers: real services, polling, process control."""
