"""What a session's own history costs a Brain pass: CPU and latency per model turn, for
sessions of 10 to 10,000 entries, with a context policy (bounded reload) and without.

For each size N (``--sizes``) a PostgreSQL schema of the run's holds two sessions, their N
entries written by bulk SQL as the agent loop leaves them (a user message, the model's
answer, ...):

- ``bounded``: with a checkpoint every ``--checkpoint-every`` entries, as compaction
  leaves them (a summary and the latest messages), served by an agent whose
  ``ContextPolicy`` compacts again when its prompt passes ``--budget`` tokens;
- ``whole``: no checkpoint, an agent with no policy: every turn reads and sends every entry
  (for reference: what the bounded reload saves).

Then R turns (``--turns``, after ``--warmup`` unmeasured) on each: a message is submitted
(not measured), then the Brain's work for the turn is timed, as a worker does it: the
claim of the session (fence and rows in one statement), and ``SessionRunner`` passes until
the turn is answered (the user entry, the model request to a scripted model, its answer;
a compaction when it is due). The Brain's CPU is this process's (``time.process_time``),
the database's excluded; latency is wall time, the database's included. The sizes
alternate turn by turn, so that a change in the machine's load falls on all alike.

The target: the bounded sessions' median CPU and latency per turn at every size within 20%
of the 10-entry session's. ``--finished N`` first writes N finished one-call sessions into
the schema (``bench/history_fill.py``'s bulk SQL, then ``VACUUM ANALYZE``): the same turns,
in a store that holds a history of others.

    .venv/bin/python -m bench.history_entries [--sizes 10 100 1000 10000] [--turns 40]
        [--finished N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import insert, select, update

from bench._services import (
    add_service_urls,
    asyncpg_dsn,
    drop_schemas,
    new_parser,
    open_store,
    run_names,
)
from bench._stats import machine, percentile, print_table
from bench.history_fill import prefill as history_prefill
from brainhands.brain.agent import Agent, AgentRegistry, agent_kinds, start_agent_or_task
from brainhands.brain.context import CHECKPOINT, SUMMARY_PREFIX, ContextPolicy
from brainhands.brain.models.scripted import ScriptedModel
from brainhands.brain.registry import TaskRegistry
from brainhands.brain.scheduler import SessionRunner
from brainhands.shared.store import Store
from brainhands.shared.store import schema as tables
from brainhands.shared.store.catalog import ToolCatalog
from brainhands.shared.topology import Topology
from tests.helpers.submitting import submit_input

BOUND = 1.2
ms = 1000.0
TOPOLOGY = Topology("history_entries")
TEXT = "Please fetch the parcel from the post office and sign for it. " * 2
ANSWER = "Noted: the parcel will be fetched."


@dataclass
class Lane:
    """One session and what its turns cost."""

    size: int
    agent: str
    session_id: str
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    passes: int = 0
    loaded: int = 0
    """Entries the last claim read."""


def model_entry() -> dict[str, Any]:
    message = {"role": "assistant", "content": ANSWER}
    return {"raw": {"choices": [{"message": message}]}, "model": "scripted", "message": message}


TAIL = 6
"""Entries after the latest checkpoint, in every prefilled session that has one: all sizes
start their turns from the same context."""


def entries_of(size: int, checkpoint_every: int | None, now: float) -> list[dict[str, Any]]:
    """``size`` entries as the agent loop leaves them: turns of a user message and an
    answer, with a checkpoint every ``checkpoint_every`` entries (None: none), the latest
    ``TAIL`` entries before the end."""
    rows: list[dict[str, Any]] = []
    recent: list[dict[str, Any]] = []
    for seq in range(1, size + 1):
        if checkpoint_every and (size - seq) % checkpoint_every == TAIL:
            messages = [{"role": "user", "content": SUMMARY_PREFIX + "Parcels so far."}, *recent]
            kind, body = CHECKPOINT, {"messages": messages, "covers": seq - 1}
        elif seq % 2:
            kind, body = "user", {"text": TEXT}
            recent = [{"role": "user", "content": TEXT}]
        else:
            kind, body = "model", model_entry()
            recent = [*recent, body["message"]][-2:]
        rows.append({"seq": seq, "kind": kind, "body": body, "created_at": now})
    return rows


async def prefill(store: Store, lane: Lane, checkpoint_every: int | None) -> None:
    await store.create_session(lane.session_id, compat="v1")
    rows = entries_of(lane.size, checkpoint_every, time.time())
    async with store.backend.engine.begin() as conn:
        for start in range(0, len(rows), 1000):
            batch = [{"session_id": lane.session_id, **r} for r in rows[start : start + 1000]]
            await conn.execute(insert(tables.entry), batch)
        await conn.execute(
            update(tables.session)
            .where(tables.session.c.id == lane.session_id)
            .values(entry_count=lane.size)
        )


async def turn(store: Store, registry: TaskRegistry, lane: Lane, n: int, measured: bool) -> None:
    """One turn of ``lane``'s session: submit (unmeasured), then claim and pass until the
    answer (measured)."""
    request_id = f"t{n}"
    await submit_input(
        store,
        TOPOLOGY,
        session_id=lane.session_id,
        request_id=request_id,
        input={"agent": lane.agent, "text": TEXT},
        compat="v1",
    )
    # The fence alone: loading the whole session here would leave the garbage of its
    # history for the collector to sweep within the measured turn.
    async with store.backend.engine.connect() as conn:
        fence = (
            await conn.execute(
                select(tables.session.c.fence).where(tables.session.c.id == lane.session_id)
            )
        ).scalar_one()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(10):
        fence += 1
        claimed = await store.claim_session(lane.session_id, fence)
        lane.loaded = len(claimed.state.entries)
        await SessionRunner(
            store=store,
            tasks=registry,
            tools=ToolCatalog(store),
            topology=TOPOLOGY,
            session_id=lane.session_id,
            fence=fence,
            start_submission=start_agent_or_task,
        ).run(claimed)
        lane.passes += measured
        record = await store.submissions.get(lane.session_id, request_id)
        if record.status != "queued" and record.status != "running":
            break
    else:
        raise RuntimeError(f"{lane.session_id}: turn {n} not answered after 10 passes")
    if record.status != "answered":
        raise RuntimeError(f"{lane.session_id}: turn {n} {record.status}: {record.error}")
    if measured:
        lane.cpu.append(time.process_time() - cpu)
        lane.wall.append(time.perf_counter() - wall)


def agents_for(budget: int, scripts: Path) -> AgentRegistry:
    (scripts / "answer.json").write_text(json.dumps({"turns": [{"text": ANSWER}]}))
    (scripts / "summary.json").write_text(json.dumps({"turns": [{"text": "Parcels so far."}]}))
    model = ScriptedModel(scripts / "answer.json")
    agents = AgentRegistry()
    policy = ContextPolicy(
        max_prompt_tokens=budget, summary_model=ScriptedModel(scripts / "summary.json")
    )
    agents.add(Agent(name="bounded", system="You fetch parcels.", model=model, context=policy))
    agents.add(Agent(name="whole", system="You fetch parcels.", model=model))
    return agents


async def bench(args: argparse.Namespace, schema: str) -> list[Lane]:
    store = await open_store(args.database_url, schema)
    lanes: list[Lane] = []
    try:
        if args.finished:
            db = await asyncpg.connect(
                asyncpg_dsn(args.database_url), server_settings={"search_path": schema}
            )
            try:
                print(f"prefill: {args.finished:,} finished sessions", flush=True)
                fill = await history_prefill(db, Topology("entries"), args.finished)
                print(f"prefill took {fill.total:.1f} s", flush=True)
            finally:
                await db.close()
        with tempfile.TemporaryDirectory(prefix="brainhands-bench-entries-") as tmp:
            registry = agent_kinds(agents_for(args.budget, Path(tmp)), ToolCatalog(store))
            for size in args.sizes:
                for agent, every in (("bounded", args.checkpoint_every), ("whole", None)):
                    lane = Lane(size, agent, f"{agent}-{size}")
                    await prefill(store, lane, every)
                    lanes.append(lane)
            print(f"prefilled {len(lanes)} sessions; {args.turns} turns each", flush=True)
            for n in range(args.warmup + args.turns):
                for lane in lanes if n % 2 else lanes[::-1]:
                    await turn(store, registry, lane, n, measured=n >= args.warmup)
    finally:
        await store.close()
    return lanes


def report(args: argparse.Namespace, lanes: Sequence[Lane]) -> None:
    base = {lane.agent: lane for lane in lanes if lane.size == min(args.sizes) and lane.agent}
    rows: list[list[object]] = []
    for lane in lanes:
        first = base[lane.agent]
        cpu, wall = statistics.median(lane.cpu), statistics.median(lane.wall)
        ratio = max(cpu / statistics.median(first.cpu), wall / statistics.median(first.wall))
        verdict = ("PASS" if ratio <= BOUND else "NOT MET") if lane.agent == "bounded" else "-"
        rows.append(
            [
                lane.agent,
                f"{lane.size:,}",
                lane.loaded,
                f"{lane.passes / len(lane.cpu):.2f}",
                f"{cpu * ms:.2f}",
                f"{wall * ms:.2f}",
                f"{percentile(lane.wall, 90) * ms:.2f}",
                f"{ratio:.2f}x",
                verdict,
            ]
        )
    print()
    print(
        f"{args.turns} measured turns per session (after {args.warmup}); PostgreSQL; "
        f"bounded: ContextPolicy(max_prompt_tokens={args.budget}), a checkpoint every "
        f"{args.checkpoint_every} prefilled entries"
    )
    headers = ["session", "entries", "entries read", "passes/turn", "Brain CPU ms p50"]
    headers += ["latency ms p50", "latency ms p90", f"vs {min(args.sizes)}", f"within {BOUND}x"]
    print_table(headers, rows, align="<>>>>>>>>")
    print(
        "vs: the larger of the CPU and latency ratios to the same agent's smallest session; "
        "the whole-history sessions (no policy: every entry read and sent) are for reference."
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 10_000])
    parser.add_argument("--turns", type=int, default=40, help="measured turns per session")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured turns per session")
    parser.add_argument("--budget", type=int, default=1500, help="prompt budget (tokens)")
    parser.add_argument("--checkpoint-every", type=int, default=20, help="prefilled entries")
    parser.add_argument(
        "--finished", type=int, default=0, help="finished sessions written into the store first"
    )
    add_service_urls(parser, "postgres")
    args = parser.parse_args(argv)
    if min(args.sizes) < 1 or args.turns < 1 or min(args.warmup, args.finished) < 0:
        parser.error("sizes and turns must be positive, --warmup and --finished not negative")
    if args.checkpoint_every < 3:
        parser.error("--checkpoint-every must be at least 3")
    return args


async def main(args: argparse.Namespace) -> None:
    _, _, schema = run_names("entries")
    print(f"history_entries bench on {machine()}; schema {schema}", flush=True)
    try:
        lanes = await bench(args, schema)
    finally:
        await drop_schemas(args.database_url, schema)
    report(args, lanes)
    print(f"({machine()})")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(main(parse_args()))
