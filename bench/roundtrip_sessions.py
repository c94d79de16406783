"""Parts 1 and 2 of ``bench.roundtrip``: sessions through our Brain and Hands, and where
each one's tool call spent its time.

A session submits ``{"agent": "pinger", ...}`` (``bench/roundtrip_agents.py``): one model
turn that calls the no-op ``ping`` tool, one that answers. ``timelines`` puts each call's
steps together from the store (entries, outbox, operation and task rows) and the workers'
JSON logs; ``brain_passes`` counts what the Brains did for the sessions.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import asyncpg

from bench._services import Workers, log_events
from bench.roundtrip_agents import AGENT, COMPAT
from bench.roundtrip_tools import POOL
from brainhands.shared.store import FINAL_SUBMISSION_STATUSES, Store
from brainhands.shared.store.schema import metadata
from brainhands.shared.topology import Topology
from tests.helpers.submitting import submit_input

FINAL = tuple(sorted(FINAL_SUBMISSION_STATUSES))
POLL = 0.2
"""Seconds between a burst's polls for its answered sessions. The burst's time comes from
the store's timestamps, not from when a poll saw it end."""


async def analyze(db: asyncpg.Connection) -> None:
    """ANALYZE the store's tables, as autovacuum has on a store that has run a while: in a
    fresh schema the planner still takes its tables for empty and may scan them whole."""
    await db.execute(f"ANALYZE {', '.join(t.name for t in metadata.sorted_tables)}")


@dataclass
class Timeline:
    """One session's tool call, as the store and the logs saw it (epoch seconds)."""

    session_id: str
    model_at: float
    """The ``model`` entry's commit: the tool call's intent and job are durable."""
    applied_at: float
    """The ``tool_result`` entry's commit: the result is applied."""
    job_sent: float | None = None
    result_sent: float | None = None
    started: float | None = None
    outcome: float | None = None
    woken: float | None = None
    dispatch_done: float | None = None
    """When the Brain pass that committed the call let go of the session."""
    claim_at: float | None = None
    """The fence claim's statement (the operation row's ``created_at``)."""

    @property
    def latency(self) -> float:
        return self.applied_at - self.model_at


STEPS: list[tuple[str, str, str]] = [
    ("tools commit -> job confirmed + marked sent (Brain's relay)", "model_at", "job_sent"),
    (
        "-> fence claim statement (Hands received the job; operation lease in Redis)",
        "job_sent",
        "claim_at",
    ),
    ("-> started (the claim's upsert; one UPDATE, RETURNING the row)", "claim_at", "started"),
    ("-> outcome recorded (no-op tool + outcome txn)", "started", "outcome"),
    ("-> result confirmed + marked sent (Hands' relay)", "outcome", "result_sent"),
    ("-> Brain woken by the result", "result_sent", "woken"),
    (
        "-> result applied (session lease, claim + reads, light phases; the commit that "
        "settles the call and appends tool_result)",
        "woken",
        "applied_at",
    ),
]


def session_ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(n)]


async def submit(store: Store, topology: Topology, session_id: str, agent: str = AGENT) -> None:
    await submit_input(
        store,
        topology,
        session_id=session_id,
        request_id="r1",
        input={"agent": agent, "text": "ping, then say so"},
        compat=COMPAT,
    )


async def burst_sessions(
    store: Store,
    db: asyncpg.Connection,
    topology: Topology,
    workers: Workers,
    ids: Sequence[str],
    within: float,
    agent: str = AGENT,
    *,
    poll: float = POLL,
    one_by_one: bool = False,
) -> float:
    """Submit all sessions (to ``agent``) at once, or ``one_by_one`` (each once the previous
    one is answered); return seconds from the first submission until the last one was
    answered. Submitted through ``store`` (the client's work, counted), watched through
    ``db`` every ``poll`` seconds (the harness's polls: the observer's connection, whose
    statements the counts leave out)."""
    started = time.time()
    if one_by_one:
        for session_id in ids:
            await burst_sessions(
                store, db, topology, workers, [session_id], within, agent, poll=poll
            )
        return time.time() - started
    await asyncio.gather(*(submit(store, topology, session_id, agent) for session_id in ids))
    deadline = time.monotonic() + within
    pending = set(ids)
    while True:
        # Only the sessions not yet seen final, joined to the ids rather than tested with
        # `= ANY(ids)`, which the server rechecks per row against the whole list (tens of
        # ms a poll at 1,000 ids, taken from the workers being measured).
        done = await db.fetch(
            "SELECT s.session_id FROM submission s JOIN unnest($1::text[]) AS p(id) "
            "ON s.session_id = p.id WHERE s.status = ANY($2::text[])",
            list(pending),
            list(FINAL),
        )
        pending.difference_update(row["session_id"] for row in done)
        if not pending:
            break
        workers.check_alive()
        if time.monotonic() > deadline:
            answered = len(ids) - len(pending)
            raise RuntimeError(f"{answered} of {len(ids)} sessions answered within {within}s")
        await asyncio.sleep(poll)
    rows = await db.fetch(
        "SELECT status, updated_at FROM submission WHERE session_id = ANY($1::text[])", list(ids)
    )
    failed = [r for r in rows if r["status"] != "answered"]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(ids)} sessions not answered")
    return float(max(r["updated_at"] for r in rows) - started)


async def timelines(
    db: asyncpg.Connection, ids: Sequence[str], workers: Workers, topology: Topology
) -> list[Timeline]:
    """Each session's tool call, from the store (entries, outbox) and the workers' logs."""
    entries = await db.fetch(
        "SELECT session_id, seq, kind, created_at FROM entry "
        "WHERE session_id = ANY($1::text[]) ORDER BY session_id, seq",
        list(ids),
    )
    model: dict[str, float] = {}
    applied: dict[str, float] = {}
    for e in entries:
        if e["kind"] == "model":
            model.setdefault(e["session_id"], e["created_at"])
        elif e["kind"] == "tool_result":
            applied.setdefault(e["session_id"], e["created_at"])
    missing = set(ids) - (model.keys() & applied.keys())
    if missing:
        raise RuntimeError(f"{len(missing)} sessions lack a model or tool_result entry")
    out = {sid: Timeline(sid, model[sid], applied[sid]) for sid in ids}

    outbox = await db.fetch(
        "SELECT session_id, routing_key, created_at, sent_at FROM outbox "
        "WHERE session_id = ANY($1::text[]) ORDER BY id",
        list(ids),
    )
    jobs, results = topology.hands_queue(POOL), topology.results_queue(COMPAT)
    for row in outbox:
        t = out[row["session_id"]]
        if row["routing_key"] == jobs and t.job_sent is None:
            t.job_sent = row["sent_at"]
        elif row["routing_key"] == results and row["created_at"] > t.model_at:
            t.result_sent = t.result_sent or row["sent_at"]

    operations = await db.fetch(
        "SELECT session_id, created_at FROM operation WHERE session_id = ANY($1::text[])",
        list(ids),
    )
    for row in operations:
        out[row["session_id"]].claim_at = row["created_at"]
    _read_hands_logs(out, workers)
    _read_brain_logs(out, workers)
    return list(out.values())


def _read_hands_logs(out: dict[str, Timeline], workers: Workers) -> None:
    """When each session's call started and its outcome was recorded, by the Hands' logs."""
    hands = {"started", "outcome"}  # received and claimed are DEBUG lines
    for path in workers.paths("hands"):
        for e in log_events(path):
            seen = out.get(e.get("session_id", ""))
            if seen is not None and e.get("event") in hands and getattr(seen, e["event"]) is None:
                setattr(seen, e["event"], e["ts"])


def _read_brain_logs(out: dict[str, Timeline], workers: Workers) -> None:
    """When a Brain was woken by each session's result and ended its pass, by its logs."""
    for path in workers.paths("brain"):
        for e in log_events(path):
            seen = out.get(e.get("session_id", ""))
            if seen is None:
                continue
            # The line that ends a delivery says when the delivery was taken.
            received = e.get("received_at")
            if e.get("by") == "tool_result" and received is not None and received >= seen.model_at:
                seen.woken = min(received, seen.woken or received)
            if e.get("event") == "advanced" and e["ts"] >= seen.model_at:
                seen.dispatch_done = min(e["ts"], seen.dispatch_done or e["ts"])


@dataclass
class Passes:
    """What the Brains did for a set of sessions, from their logs."""

    woken: dict[str, int] = field(default_factory=dict)
    """Deliveries by message type (``wake``: submissions, sweeper, timers)."""
    applied: int = 0
    """Tool results acknowledged without a pass: the Brain had applied them already."""
    idle: int = 0
    """Passes that ran no phase (a duplicate trigger)."""
    busy: int = 0
    """Deliveries that found the session held by another pass, after waiting for it."""
    swept: int = 0
    """Wake-ups the sweeper sent while these sessions ran (all sessions of the namespace)."""


def brain_passes(workers: Workers, ids: Sequence[str]) -> Passes:
    wanted = set(ids)
    out = Passes()
    times: list[float] = []
    events = [e for path in workers.paths("brain") for e in log_events(path)]
    for e in events:
        if e.get("session_id") not in wanted:
            continue
        times.append(e["ts"])
        if "by" in e:  # the one line that ends each delivery
            by = str(e["by"])
            out.woken[by] = out.woken.get(by, 0) + 1
        if e.get("event") == "advanced" and not e.get("phases"):
            out.idle += 1
        elif e.get("event") == "busy":
            out.busy += 1
        elif e.get("event") == "already_applied":
            out.applied += 1
    if times:
        first, last = min(times), max(times)
        out.swept = sum(
            int(e.get("session_woken", 0))
            for e in events
            if e.get("event") == "swept" and first <= e["ts"] <= last
        )
    return out


def step_samples(runs: Sequence[Timeline], start: str, end: str) -> list[float]:
    samples = []
    for t in runs:
        a, b = getattr(t, start), getattr(t, end)
        if a is not None and b is not None:
            samples.append(b - a)
    return samples


def cpu_per_session(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
    return {role: (after[role] - before.get(role, 0.0)) / n for role in after}


serial_sessions = functools.partial(burst_sessions, poll=0.02, one_by_one=True)
"""``burst_sessions`` one by one, watched every 20 ms (the serial round trips)."""
