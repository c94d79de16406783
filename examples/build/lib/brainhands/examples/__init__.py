"""Example applications built on the brainhands public API."""
