"""The cost of a tool call in ``bench.roundtrip``, counted: durable steps and CPU per call,
beside DBOS's per step in the same run, and the store capacity those figures give.

Columns: a one-call session (submission, two model turns, one tool call) serially and in
the burst, a call of the fan-out burst (a session's work over its ``FANOUT`` calls), and
DBOS's one-step workflow serially and started directly at once, and a step of its fan-out
workflows. Rows: the counts of ``bench/roundtrip_counts.py`` and the CPU per call of each
process (Brain and Hands: ``Workers.cpu``; the store and Redis: the run's own servers;
RabbitMQ: every ``beam.smp`` of the machine, the shared broker, so others' load is in it).

**Store capacity**: tool calls a second one PostgreSQL core carries at the store CPU per
call measured here (1 / CPU seconds per call), beside DBOS's measured per step and the
sizing figure DBOS publishes (1,000 actions/s per 4 vCPUs, 250 per core): a store for N
Hands doing R calls/s each needs N x R / capacity cores.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from bench._stats import print_table
from bench.roundtrip_agents import FANOUT
from bench.roundtrip_counts import Counts, Meter
from bench.roundtrip_dbos import DbosResult
from bench.roundtrip_servers import DATABASE, OBSERVER

DBOS_PUBLISHED_PER_CORE = 1000 / 4
"""DBOS's published sizing figure: 1,000 actions/s per 4 vCPUs of PostgreSQL."""
ms = 1000.0
COUNT_ROWS = [
    ("store write transactions (xids)", "xids", "{:.2f}"),
    ("store statements", "statements", "{:.1f}"),
    ("broker messages published", "published", "{:.2f}"),
    ("  of them confirmed", "confirmed", "{:.2f}"),
    ("Redis commands", "redis", "{:.1f}"),
]
SHARED = "RabbitMQ (shared)"
CPU_ROWS = ["Brain", "Hands", "DBOS app", "store (PostgreSQL)", "Redis", SHARED]


@contextlib.asynccontextmanager
async def new_meter(args: argparse.Namespace) -> AsyncIterator[Meter]:
    """A meter of the run's own servers (``args.servers``)."""
    s = args.servers
    meter = Meter(s.admin_dsn, DATABASE, s.postmaster_pid, s.redis_url, OBSERVER, s.redis_pid)
    async with meter:
        yield meter


class Column:
    """One column: counts per call, and the CPU seconds per call of each process."""

    def __init__(self, title: str, counts: Counts | None, cpu: dict[str, float]) -> None:
        self.title = title
        self.counts = counts
        self.cpu = cpu


def ours(title: str, counts: Counts | None, cpu: dict[str, float], calls: int, per: int) -> Column:
    """A brainhands part of ``calls`` tool calls, whose ``cpu`` is per session of ``per``."""
    per_call = counts.per(calls) if counts else None
    by = {k: v / per for k, v in cpu.items()}
    used = {
        "Brain": by.get("brain", 0.0),
        "Hands": by.get("hands", 0.0),
        SHARED: by.get("RabbitMQ", 0.0),
    }
    if per_call is not None:
        used |= {"store (PostgreSQL)": per_call.store_cpu, "Redis": per_call.redis_cpu}
    return Column(title, per_call, used)


def theirs(title: str, part: dict[str, float] | None) -> Column:
    if not part:
        return Column(title, None, {})
    n = int(part["n"])
    fields = {k: v for k, v in part.items() if k in Counts.__dataclass_fields__}
    counts = Counts(**fields).per(n)
    cpu = {"DBOS app": part["app_cpu"] / n, "store (PostgreSQL)": counts.store_cpu}
    return Column(title, counts, cpu)


def columns(r: Any) -> list[Column]:
    """The table's columns from ``bench.roundtrip``'s ``Results``."""
    cols = [
        ours("session, serial", r.serial_counts, r.serial_cpu, len(r.serial), 1),
        ours("session, burst", r.burst_counts, r.burst_cpu, len(r.burst), 1),
    ]
    if r.fanout_sessions:
        calls = r.fanout_sessions * FANOUT
        cols.append(ours("per fan-out call", r.fanout_counts, r.fanout_cpu, calls, FANOUT))
    d: DbosResult | None = r.dbos
    if d is not None and d.counts:
        cols += [
            theirs("DBOS 1-step wf, serial", d.counts.get("serial")),
            theirs("DBOS 1-step wf, burst", d.counts.get("burst")),
            theirs("DBOS per fan-out step", d.counts.get("fanout")),
        ]
    return cols


def print_costs(r: Any) -> None:
    """The table of counts and CPU per call, then the store-capacity line."""
    cols = columns(r)
    print()
    if all(c.counts is None for c in cols):
        print("steps per call: not counted (--no-counts, or --before only)")
        return
    print("steps and CPU per call, counted (the run's own PostgreSQL and Redis; AMQP in the")
    print("publishing processes):")
    rows: list[Sequence[object]] = []
    for label, attr, fmt in COUNT_ROWS:
        rows.append(
            [label, *(fmt.format(getattr(c.counts, attr)) if c.counts else "-" for c in cols)]
        )
    for name in CPU_ROWS:
        if any(name in c.cpu for c in cols):
            cells = [f"{c.cpu[name] * ms:.2f}" if name in c.cpu else "-" for c in cols]
            rows.append([f"CPU ms: {name}", *cells])
    # The shared broker's CPU moves with others' load: the total is of what is ours alone.
    totals = [f"{sum(v for k, v in c.cpu.items() if k != SHARED) * ms:.2f}" for c in cols]
    rows.append(["CPU ms: total but RabbitMQ", *totals])
    print_table(["per call", *(c.title for c in cols)], rows, align="<" + ">" * len(cols))
    print(
        "A session's counts include its submission, both model turns and the harness's relay "
        "(the wake-up); the fan-out column spreads a session over its calls. Background polls "
        "(sweepers, relays; DBOS's queue thread) are counted while a part runs; the harness's "
        "own polls are not. Transactions that wrote nothing take no xid and are not counted."
    )
    print_capacity(cols)


def print_capacity(cols: Sequence[Column]) -> None:
    """Tool calls a second per PostgreSQL core at each column's store CPU per call."""
    parts = []
    for c in cols:
        cpu = c.cpu.get("store (PostgreSQL)")
        if cpu:
            parts.append(f"{c.title} {1 / cpu:,.0f}/s ({cpu * ms:.2f} ms)")
    print(
        "store capacity, tool calls per second per PostgreSQL core (1 / store CPU per call): "
        + "; ".join(parts)
        + f". DBOS publishes {DBOS_PUBLISHED_PER_CORE:,.0f} actions/s per core (1,000 per 4 "
        "vCPUs) as its sizing figure. A store for N Hands at R calls/s each needs "
        "N x R / capacity cores (at the burst column's figure, with headroom for the "
        "sweepers' and the API's reads)."
    )
