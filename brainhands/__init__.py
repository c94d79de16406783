"""The ``brainhands`` command: the one module that knows the Brain, the Hands and shared."""
