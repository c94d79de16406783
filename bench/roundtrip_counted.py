"""``python -m brainhands``, with its AMQP publishes and their confirms counted.

``bench.roundtrip`` starts its Brain and Hands processes as ``python -m bench.roundtrip_counted
brain ...`` (same arguments) when it counts what a call costs: the counters
(``bench/roundtrip_counts.py``, ``amqp_counting``) join the process's ``/metrics``. Nothing
else changes: the command is brainhands' own, run as its ``__main__``.
"""

from __future__ import annotations

import runpy

from bench.roundtrip_counts import amqp_counting

if __name__ == "__main__":
    amqp_counting()
    runpy.run_module("brainhands", run_name="__main__", alter_sys=True)
