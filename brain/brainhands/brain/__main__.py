"""``python -m brainhands.brain --compat V --agents MODULE``: a Brain worker (and sweeper
candidate), in an image that has the Brain and the core only."""

from brainhands.shared.command import add_brain_arguments, role_main

raise SystemExit(role_main("brain", add_brain_arguments))
