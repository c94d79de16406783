"""What the Brain's kernel costs per phase, and how fast 1,000 due timers fire.

1. **Phase overhead.** A task kind of ten phases that do no I/O (each returns ``Goto`` to
   the next, the last ``Finish``) runs as 200 tasks (``--tasks``), one after another,
   each in its own session through ``SessionRunner`` in this process (its fence claimed
   first, as a Brain would). Each phase function records ``time.perf_counter()`` when it
   starts; the overhead of a phase is the time between consecutive starts, as the phases
   see it -- one commit of the ``Goto`` plus everything the scheduler does around it.
   Next to it, in the same run and on the same store, taking turns in rounds so noise
   hits all alike:

   * ``store.commit``: a ``Draft`` with the same one task update a ``Goto`` commits
     (sequential): the floor of one commit through the store;
   * bare asyncpg: the same two statements (session guard, task update) in one
     transaction with prepared statements, and one ``UPDATE`` in autocommit, for reference.

   The time the scheduler spends inside ``store.commit`` is recorded too (the benchmark
   wraps the store instance's ``commit``), which splits each phase into "commit" and
   "scheduler around it". The target is a phase overhead of at most 2x one ``store.commit``
   at the median. ``--profile`` also runs the chain under cProfile and prints the top
   functions.

2. **1,000 due timers.** N real Brain worker processes (``python -m brainhands brain
   --compat bench --tasks bench.kernel_tasks``) and 1,000 sessions, each submitted one
   ``bench.nap`` task that sleeps until the same moment T, a few seconds ahead (sized from
   a pilot batch of 50 sessions unless ``--lead`` says). The workers put every session to
   sleep before T (a relay in this process publishes the submissions' wake-ups at once);
   from T on, their in-memory timers (and the sweeper, period 1 s) wake the sessions.
   Reported: seconds from T until the last task finished, and per session ``finish - T``
   (the task row's ``updated_at``, stamped by the commit of the ``wake`` phase's
   ``Finish``) and ``wake phase start - T``; and, from the workers' JSON logs, how many
   passes from T on ran the phase and how many found nothing to do (duplicate wake-ups),
   with the consumer-slot time each kind took.

Each run uses fresh PostgreSQL schemas and a fresh namespace, all deleted at the end. Part 1
is in ``bench/kernel_phases.py``, part 2 in ``bench/kernel_timers.py``.

    .venv/bin/python -m bench.kernel [--tasks T] [--commits C] [--sessions S] [--workers N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Sequence

from bench._services import add_service_urls, new_parser, run_names
from bench._stats import machine
from bench.kernel_phases import bench_phases, report_phases
from bench.kernel_timers import bench_timers, report_timers


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument("--tasks", type=int, default=200, help="ten-phase tasks (part 1)")
    parser.add_argument("--commits", type=int, default=1000, help="commits per reference (part 1)")
    parser.add_argument("--rounds", type=int, default=4, help="turns taken (part 1)")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="TASKS",
        help="also run TASKS chain tasks under cProfile and print the top functions",
    )
    parser.add_argument("--sessions", type=int, default=1000, help="sleeping sessions (part 2)")
    parser.add_argument("--workers", type=int, default=2, help="Brain processes (part 2)")
    parser.add_argument(
        "--concurrency", type=int, default=0, help="each Brain's concurrency (default: its own)"
    )
    parser.add_argument(
        "--lead",
        type=float,
        default=0.0,
        help="seconds from the first submission to T (default: sized from a pilot batch)",
    )
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds after T to finish")
    parser.add_argument("--logs", help="keep the Brain processes' logs in this directory")
    parser.add_argument(
        "--only", choices=["phases", "timers"], help="run one part only (default: both)"
    )
    add_service_urls(parser, "postgres", "rabbitmq", "redis")
    args = parser.parse_args(argv)
    if min(args.tasks, args.commits, args.rounds, args.sessions, args.workers) < 1:
        parser.error("--tasks, --commits, --rounds, --sessions and --workers must be positive")
    if args.lead and args.lead < 2:
        parser.error("--lead must be at least 2 seconds")
    return args


async def main(args: argparse.Namespace) -> None:
    _, namespace, schema = run_names("kernel")
    print(f"kernel bench on {machine()}", flush=True)
    if args.only in (None, "phases"):
        report_phases(await bench_phases(args, namespace, f"{schema}_phases"))
        print(f"({machine()})")
        print()
    if args.only in (None, "timers"):
        report_timers(await bench_timers(args, namespace, f"{schema}_timers"))
        print(f"({machine()})")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parse_args()))
