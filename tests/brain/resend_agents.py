"""Agents for the model-call kill test (``test_model_call_kill``): one that names no model,
so the Brain's ``BRAINHANDS_MODEL_*`` settings choose its adapter (the Responses API in the
background, or chat completions) and point it at the test's loopback ``ModelServer``."""

from __future__ import annotations

from brainhands.brain.agent import Agent, AgentRegistry

agents = AgentRegistry()
agents.add(Agent(name="patient", system="You answer once you have thought it over."))
