"""``python -m brainhands.hands --pool P --tools MODULE``: a Hands worker, in an image that
has the Hands and the core only."""

from brainhands.shared.command import add_hands_arguments, role_main

raise SystemExit(role_main("hands", add_hands_arguments))
