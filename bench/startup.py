"""How long a Brain and a Hands process take to become ready: from the spawn to the first
line it logs (the interpreter and brainhands' imports, settings read), to each service
reached, and to consuming (its queues declared, its tools or agents declared).

    python -m bench.startup [--rounds 5]

Each round starts one Brain (the demo's agents) and one Hands (the demo's tools) on a
fresh namespace and schema (migrated before, so no round pays the migration), and stops
them once they consume. A second table times the import of each role's entry module alone
(``python -c 'import ...'``, the interpreter's own start subtracted), with the modules
that cost the most.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._services import (
    ROOT,
    Workers,
    add_service_urls,
    clean_namespace,
    log_events,
    new_parser,
    open_store,
    run_names,
    stop_on_sigterm,
    worker_env,
)
from brainhands.shared.topology import Topology

ROLES = {
    "brain": (
        "brain",
        "--compat",
        "v1",
        "--agents",
        "brainhands.examples.notify.agent",
        "--tasks",
        "brainhands.examples.notify.tasks",
    ),
    "hands": ("hands", "--pool", "email", "--tools", "brainhands.examples.notify.tools"),
}
MILESTONES = ("first log line", "consuming")


async def one_round(args: object) -> dict[str, dict[str, float]]:
    """Seconds from each role's spawn to each milestone, in one round."""
    _, namespace, schema = run_names("startup")
    store = await open_store(args.database_url, schema)  # type: ignore[attr-defined]
    await store.close()
    seen: dict[str, dict[str, float]] = {}
    try:
        with (
            tempfile.TemporaryDirectory() as logs,
            Workers(
                worker_env(args, namespace, schema),
                Path(logs),  # type: ignore[arg-type]
            ) as workers,
        ):
            started = {}
            for role, argv in ROLES.items():
                started[role] = time.time()
                workers.start(*argv)
            await workers.wait_consuming(within=120)
            for worker in workers.procs:
                events = log_events(worker.log)
                spawn = started[worker.role]
                consuming = next(e["ts"] for e in events if e.get("event") == "consuming")
                seen[worker.role] = {
                    "first log line": events[0]["ts"] - spawn,
                    "consuming": consuming - spawn,
                }
    finally:
        topology = Topology(namespace)
        queues = [topology.hands_queue("email"), *topology.brain_queues("v1")]
        await clean_namespace(args, namespace, queues, [schema])  # type: ignore[arg-type]
    return seen


def import_seconds(module: str) -> tuple[float, list[tuple[float, str]]]:
    """Wall seconds to import ``module`` in a fresh interpreter, less the interpreter's own
    start; and the five costliest modules by ``-X importtime`` (cumulative seconds)."""

    def wall(*argv: str) -> tuple[float, str]:
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, check=True
        )
        return time.perf_counter() - began, done.stderr

    bare, _ = wall("-c", "pass")
    took, report = wall("-X", "importtime", "-c", f"import {module}")
    costs = []
    for line in report.splitlines()[1:]:
        _, _, cumulative, name = (part.strip() for part in line.replace("|", ":", 2).split(":", 3))
        if name.strip().startswith(("brainhands", "sqlalchemy", "aio_pika", "redis", "pydantic")):
            costs.append((int(cumulative) / 1e6, name.strip()))
    top = sorted(costs, reverse=True)[:5]
    return took - bare, top


async def main() -> None:
    parser = new_parser(__doc__)
    add_service_urls(parser, "postgres", "rabbitmq", "redis")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    stop_on_sigterm()
    rounds = [await one_round(args) for _ in range(args.rounds)]

    print(f"\nseconds from spawn, median of {args.rounds} rounds (min-max)")
    print(f"{'role':8}" + "".join(f"{m:>24}" for m in MILESTONES))
    for role in ROLES:
        cells = []
        for milestone in MILESTONES:
            values = [r[role][milestone] for r in rounds]
            med = statistics.median(values)
            cells.append(f"{med:8.2f} ({min(values):.2f}-{max(values):.2f})")
        print(f"{role:8}" + "".join(f"{c:>24}" for c in cells))

    print("\nimport of the entry module alone (interpreter start subtracted)")
    for role in ROLES:
        took, top = import_seconds(f"brainhands.{role}.main")
        print(f"{role:8}{took:8.2f} s   costliest: " + ", ".join(f"{n} {s:.2f}" for s, n in top))


if __name__ == "__main__":
    asyncio.run(main())
