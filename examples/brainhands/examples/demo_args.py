"""The options of ``brainhands demo`` (kept apart so ``--help`` imports nothing heavy)."""

from __future__ import annotations

from typing import Any


def add_arguments(parser: Any) -> None:
    parser.add_argument("--recipients", type=int, default=5, help="customers to notify")
    parser.add_argument("--brains", type=int, default=2, help="Brain worker processes")
    parser.add_argument("--hands", type=int, default=3, help="Hands worker processes")
    parser.add_argument(
        "--approve",
        action="store_true",
        help="the batch of sends waits for approval; the demo approves it through the client",
    )
    parser.add_argument("--no-chaos", dest="chaos", action="store_false", help="kill nothing")
    parser.add_argument(
        "--kill-interval",
        type=float,
        nargs=2,
        default=(0.2, 0.6),
        metavar=("MIN", "MAX"),
        help="seconds between kills (default 0.2 0.6)",
    )
    parser.add_argument("--store-url", help="session store (default: a SQLite file)")
    parser.add_argument("--timeout", type=float, default=110.0, help="give up after (seconds)")
    parser.add_argument("--seed", type=int, help="seed of the chaos monkey")
