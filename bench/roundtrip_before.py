"""``bench.roundtrip --before REF``: the same run measures the Brains and Hands of commit REF,
then this tree's, and sets them side by side.

Why: a change that should not change behaviour (a restructuring) must leave a round trip's
latency, throughput and CPU per session where they were; measured in one run, on one machine
under the same load, the two are comparable, which runs on different days are not. The
physical floor (no brainhands code at all) is measured in both passes too: how far it moves
between them is the run's own drift, the yardstick for the other ratios.

``check_code`` makes sure a pass's workers import the tree they are meant to run (``bench``'s
agents and tools included); ``compare`` prints the table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING

from bench._services import SERVICE_PROCESSES, module_origins
from bench._stats import print_table
from bench.roundtrip_agents import FANOUT

if TYPE_CHECKING:
    from bench.roundtrip import Results

WORKER_MODULES = (
    "brainhands.__main__",
    "brainhands.shared.store",
    "brainhands.brain.worker",
    "brainhands.hands.worker",
    "bench.roundtrip_agents",
    "bench.roundtrip_tools",
)
"""What the Brain and Hands processes run: their command, the store, the workers, and the
agents and tools they serve."""
WORKERS = "Brain + Hands"
CPU_TOLERANCE = 0.05
"""CPU per session may move this much (either way) for a change to count as neutral."""
ms = 1000.0


def check_code(env: dict[str, str], tree: Path) -> None:
    """Fail unless workers started from ``tree`` with ``env`` import ``tree``'s code; say
    where their store comes from."""
    origins = module_origins(env, tree, WORKER_MODULES)
    root = tree.resolve()
    strays = {m: o for m, o in origins.items() if not Path(o).resolve().is_relative_to(root)}
    if strays:
        raise RuntimeError(f"workers started from {tree} would import other code: {strays}")
    store = origins["brainhands.shared.store"]
    print(f"the workers run the code of {tree} (brainhands.shared.store: {store})", flush=True)


def cpu_parts(used: dict[str, float]) -> list[tuple[str, float]]:
    """CPU seconds per session: the Brains, the Hands, both, the services, everything."""
    brain, hands = used.get("brain", 0.0), used.get("hands", 0.0)
    services = sum(used.get(s, 0.0) for s in SERVICE_PROCESSES)
    return [
        ("Brain", brain),
        ("Hands", hands),
        (WORKERS, brain + hands),
        ("services", services),
        ("all", brain + hands + services),
    ]


def ratio(was: float, now: float) -> str:
    return f"{now / was:.3f}x" if was else "-"


def within(was: float, now: float) -> str:
    if not was:
        return "-"
    return "yes" if abs(now / was - 1) <= CPU_TOLERANCE else "NO"


def workloads(r: Results) -> list[tuple[str, dict[str, float]]]:
    done = [("serial 1B+1H", r.serial_cpu), ("burst 2B+2H", r.burst_cpu)]
    return done + ([("fan-out 2B+2H", r.fanout_cpu)] if r.fanout_sessions else [])


def workers_cpu(r: Results, workload: int) -> float:
    """CPU seconds per session of the Brains and Hands together in one workload of ``r``."""
    return dict(cpu_parts(workloads(r)[workload][1]))[WORKERS]


def cpu_table(rounds: Sequence[Results]) -> list[tuple[str, list[tuple[str, float]]]]:
    """Per workload, each part's CPU per session: the median over ``rounds``."""
    per_round = [[(label, cpu_parts(used)) for label, used in workloads(r)] for r in rounds]
    table = []
    for w, (label, parts) in enumerate(per_round[0]):
        medians = [
            (part, median(r[w][1][p][1] for r in per_round)) for p, (part, _) in enumerate(parts)
        ]
        table.append((label, medians))
    return table


def compare(ref: str, was: Sequence[Results], now: Sequence[Results]) -> None:
    """Print ``was`` (the workers of ``ref``) and ``now`` (this tree's) side by side, each the
    median of its rounds, with now / was, and whether each CPU per session stayed within
    ``CPU_TOLERANCE``; then the Brains' and Hands' CPU ratio of every round, paired in the
    order they ran."""

    def mid(measure: Callable[[Results], float]) -> tuple[float, float]:
        return median(measure(r) for r in was), median(measure(r) for r in now)

    rows: list[Sequence[object]] = [
        timed("round trip p50 ms, 1 Brain + 1 Hands (serial)", *mid(lambda r: r.serial_p50)),
        rated("throughput sessions/s, 2 Brains + 2 Hands", *mid(lambda r: r.burst_rate)),
    ]
    if now[0].fanout_sessions:
        label = f"fan-out tool calls/s, {FANOUT} per model turn"
        rows.append(rated(label, *mid(lambda r: r.fanout_rate)))
    rows += [
        timed("floor p50 ms (no brainhands code: drift)", *mid(lambda r: r.floor_p50)),
        rated("floor throughput round trips/s (drift)", *mid(lambda r: r.floor_rate)),
        timed("floor CPU ms per round trip (drift)", *mid(lambda r: r.floor_cpu)),
    ]
    pairs = [
        (label, before, after)
        for (label, before), (_, after) in zip(cpu_table(was), cpu_table(now), strict=True)
    ]
    for label, before, after in pairs:
        for (part, a), (_, b) in zip(before, after, strict=True):
            rows.append([f"CPU ms per session, {label}: {part}", *shown(a, b), within(a, b)])
    print()
    print(
        f"before ({ref}) -> after (this tree), same run, median of {len(now)} round(s) each "
        "(the passes alternate: before, after, after, before, ...); ratio: after / before"
    )
    print_table(
        ["measure", f"before ({ref})", "after", "ratio", f"CPU within {CPU_TOLERANCE:.0%}"],
        rows,
        align="<>>>>",
    )
    print(
        "services: every process of PostgreSQL, RabbitMQ and Redis on this machine while a part "
        "ran, other clients' included; a backend that exits during a part takes its CPU "
        "along (it can come out negative). The floor runs no brainhands code: its ratios "
        "are the run's drift between the passes."
    )
    for w, (label, before, after) in enumerate(pairs):
        a, b = dict(before)[WORKERS], dict(after)[WORKERS]
        met = "MET" if within(a, b) == "yes" else "NOT MET"
        rounds = ", ".join(
            ratio(workers_cpu(x, w), workers_cpu(y, w)) for x, y in zip(was, now, strict=True)
        )
        print(
            f"CPU per session ({label}) of the Brains and Hands within {CPU_TOLERANCE:.0%} of "
            f"{ref}'s: {a * ms:.2f} -> {b * ms:.2f} ms = {ratio(a, b)}: {met} (by round: "
            f"{rounds})"
        )


def timed(label: str, was: float, now: float) -> list[object]:
    """A row of ``compare``'s table for a measure in seconds, shown in ms."""
    return [label, *shown(was, now), "-"]


def rated(label: str, was: float, now: float) -> list[object]:
    """A row of ``compare``'s table for a rate (per second)."""
    return [label, f"{was:,.1f}", f"{now:,.1f}", ratio(was, now), "-"]


def shown(was: float, now: float) -> list[str]:
    return [f"{was * ms:.2f}", f"{now * ms:.2f}", ratio(was, now)]
