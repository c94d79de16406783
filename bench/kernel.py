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

Each run uses fresh PostgreSQL schemas and a fresh namespace, all deleted at the end.

    .venv/bin/python -m bench.kernel [--tasks T] [--commits C] [--sessions S] [--workers N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika
import asyncpg
from sqlalchemy import func, select

from bench._stats import percentile, print_table
from bench.commit import PG_GUARD
from bench.kernel_tasks import NAP_KIND
from brain.client import submit_input
from brain.decide import transition
from brain.registry import TaskKind, TaskRegistry
from brain.scheduler import SessionRunner
from brain.task import Finish, Goto, Next, PhaseContext, TaskView
from shared.broker import Broker
from shared.config import normalize_database_url
from shared.lease import connect_redis
from shared.relay import OutboxRelay
from shared.store import Draft, Store
from shared.store import schema as tables
from shared.store.engine import read_transaction
from shared.store.records import CommitReceipt
from shared.tools import ToolRegistry
from shared.topology import Topology

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
TARGET_PHASE_RATIO = 2.0
COMPAT = "bench"
CHAIN_KIND = "bench.chain"
CHAIN_PHASES = 10
PILOT_SESSIONS = 50
ms = 1000.0


# 1. Phase overhead ------------------------------------------------------------------------


@dataclass
class Clock:
    """What the chain's phases and the wrapped ``store.commit`` saw."""

    starts: dict[str, list[float]] = field(default_factory=dict)
    """perf_counter() at the start of each phase, per task."""
    commits: dict[str, list[float]] = field(default_factory=dict)
    """Seconds inside ``store.commit``, per session, while the chain runs."""
    recording: bool = False


def chain_phase(clock: Clock, n: int) -> Callable[[TaskView, dict[str, Any], PhaseContext], Any]:
    nxt = None if n == CHAIN_PHASES - 1 else f"p{n + 1}"
    perf = time.perf_counter

    async def phase(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        started = perf()
        clock.starts.setdefault(task.id, []).append(started)
        return Goto(nxt) if nxt else Finish({"phases": CHAIN_PHASES})

    return phase


def chain_registry(clock: Clock) -> TaskRegistry:
    kind = TaskKind(CHAIN_KIND)
    for n in range(CHAIN_PHASES):
        kind.phase(f"p{n}")(chain_phase(clock, n))
    registry = TaskRegistry()
    registry.add(kind)
    return registry


def time_commits(store: Store, clock: Clock) -> None:
    """Wrap this store instance's ``commit`` to record its duration while the chain runs."""
    inner = store.commit
    perf = time.perf_counter

    async def commit(draft: Draft) -> CommitReceipt:
        if not clock.recording:
            return await inner(draft)
        t0 = perf()
        receipt = await inner(draft)
        clock.commits.setdefault(draft.session_id, []).append(perf() - t0)
        return receipt

    store.commit = commit  # type: ignore[method-assign]


@dataclass
class Chain:
    """T ten-phase tasks, each run in its own session by one ``SessionRunner`` pass."""

    store: Store
    registry: TaskRegistry
    topology: Topology
    clock: Clock
    label: str = "phase -> next phase"
    made: int = 0
    passes: list[float] = field(default_factory=list)
    """Seconds of each whole pass (load, enter commit, ten phases, let go)."""
    task_of: dict[str, str] = field(default_factory=dict)
    """Session id -> task id."""

    async def prepare(self, count: int) -> list[tuple[str, int]]:
        """``count`` sessions with one pending chain task, each claimed for a fresh token."""
        out = []
        for _ in range(count):
            session_id = f"chain-{self.made:05d}"
            self.made += 1
            await self.store.create_session(session_id, compat=COMPAT)
            await self.store.claim_session_fence(session_id, 1)
            draft = Draft(session_id, version=0, fence=1)
            self.task_of[session_id] = draft.add_task(
                kind=CHAIN_KIND, kind_version=1, input={}, phase="p0"
            )
            await self.store.commit(draft)
            # The Brain's lease: a new token, claimed in the store before the pass.
            out.append((session_id, await self.store.claim_session_fence(session_id, 2)))
        return out

    async def run(self, sessions: Sequence[tuple[str, int]]) -> None:
        perf = time.perf_counter
        for session_id, fence in sessions:
            runner = SessionRunner(
                store=self.store,
                tasks=self.registry,
                tools=ToolRegistry(),
                topology=self.topology,
                session_id=session_id,
                fence=fence,
            )
            self.clock.recording = True
            t0 = perf()
            summary = await runner.run()
            self.passes.append(perf() - t0)
            self.clock.recording = False
            if summary.phases != CHAIN_PHASES or self.task_of[session_id] not in summary.settled:
                raise RuntimeError(f"{session_id}: {summary}")

    def intervals(self) -> tuple[list[float], list[float], list[float]]:
        """Per phase -> next phase: the interval, its commit, and the rest (interval - commit).

        A pass commits the entry into p0, then one ``Goto`` after each of p0..p8, then the
        ``Finish``: the interval pN -> pN+1 holds exactly the ``Goto`` commit number N+1.
        """
        gaps: list[float] = []
        commits: list[float] = []
        rest: list[float] = []
        for session_id, task_id in self.task_of.items():
            starts = self.clock.starts[task_id]
            timed = self.clock.commits[session_id]
            if len(starts) != CHAIN_PHASES or len(timed) != CHAIN_PHASES + 1:
                raise RuntimeError(f"{session_id}: {len(starts)} phases, {len(timed)} commits")
            for n in range(CHAIN_PHASES - 1):
                gap = starts[n + 1] - starts[n]
                gaps.append(gap)
                commits.append(timed[n + 1])
                rest.append(gap - timed[n + 1])
        return gaps, commits, rest


GOTO_CHANGES = transition(Goto("p1"), now=0.0, spawned=[])
"""What a ``Goto`` changes in the task row: the commit each phase of the chain makes."""

PG_TASK_GOTO = (
    "UPDATE task SET state = $1, status = $2, phase = $3, wake_at = $4, wait_for = $5, "
    "join_policy = $6, attempt = $7, updated_at = $8 WHERE id = $9 AND session_id = $10"
)


class Committer:
    """One way of committing a ``Goto``-shaped change, on its own session."""

    label: str

    def __init__(self, store: Store) -> None:
        self.store = store
        self.samples: list[float] = []
        self.elapsed = 0.0
        self.version = 0
        self.session_id = ""
        self.task_id = ""
        self.fence = 0

    async def setup(self, name: str) -> None:
        self.session_id = f"floor-{name}"
        await self.store.create_session(self.session_id, compat=COMPAT)
        self.fence = await self.store.claim_session_fence(self.session_id, 1)
        draft = Draft(self.session_id, version=0, fence=self.fence)
        self.task_id = draft.add_task(
            kind=CHAIN_KIND, kind_version=1, input={}, status="running", phase="p0"
        )
        self.version = (await self.store.commit(draft)).version

    async def commit(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class StoreCommit(Committer):
    label = "store.commit, 1 task update (floor)"

    async def commit(self) -> None:
        draft = Draft(self.session_id, version=self.version, fence=self.fence)
        draft.update_task(self.task_id, **GOTO_CHANGES)
        self.version = (await self.store.commit(draft)).version


class AsyncpgTransaction(Committer):
    label = "bare asyncpg: same 2 statements in 1 tx"

    def __init__(self, store: Store, conn: asyncpg.Connection) -> None:
        super().__init__(store)
        self.conn = conn

    async def prepare(self) -> None:
        self.guard = await self.conn.prepare(PG_GUARD)
        self.task = await self.conn.prepare(PG_TASK_GOTO)

    async def commit(self) -> None:
        now = time.time()
        sid = self.session_id
        await self.conn.execute("BEGIN")
        try:
            if await self.guard.fetchval(1, 0, now, sid, self.version, self.fence) is None:
                raise RuntimeError("guard failed")
            await self.task.fetch(
                "null", "running", "p1", None, "null", None, 1, now, self.task_id, sid
            )
            if self.task.get_statusmsg() != "UPDATE 1":
                raise RuntimeError("task update matched no row")
        except BaseException:
            await self.conn.execute("ROLLBACK")
            raise
        await self.conn.execute("COMMIT")
        self.version += 1

    async def close(self) -> None:
        await self.conn.close()


class AsyncpgUpdate(Committer):
    label = "bare asyncpg: 1 UPDATE, autocommit"

    def __init__(self, store: Store, conn: asyncpg.Connection) -> None:
        super().__init__(store)
        self.conn = conn

    async def prepare(self) -> None:
        self.task = await self.conn.prepare(PG_TASK_GOTO)

    async def commit(self) -> None:
        now = time.time()
        await self.task.fetch(
            "null", "running", "p1", None, "null", None, 1, now, self.task_id, self.session_id
        )
        if self.task.get_statusmsg() != "UPDATE 1":
            raise RuntimeError("task update matched no row")

    async def close(self) -> None:
        await self.conn.close()


@dataclass
class PhaseResult:
    chain: Chain
    committers: list[Committer]
    profile: str | None = None


async def take_turns(
    chain: Chain, committers: Sequence[Committer], tasks: int, commits: int, rounds: int
) -> None:
    """Warm up, then rounds in which the chain and every committer each do their share."""
    await chain.run(await chain.prepare(5))
    chain.passes.clear()
    chain.clock.starts.clear()
    chain.clock.commits.clear()
    chain.task_of.clear()
    for committer in committers:
        for _ in range(50):
            await committer.commit()
    perf = time.perf_counter

    async def commit_stint(committer: Committer, share: int) -> None:
        samples = committer.samples
        started = perf()
        for _ in range(share):
            t0 = perf()
            await committer.commit()
            samples.append(perf() - t0)
        committer.elapsed += perf() - started

    for r in range(rounds):
        task_share = tasks // rounds + (1 if r < tasks % rounds else 0)
        commit_share = commits // rounds + (1 if r < commits % rounds else 0)
        sessions = await chain.prepare(task_share)
        stints: list[Callable[[], Awaitable[None]]] = [lambda s=sessions: chain.run(s)]
        stints += [lambda c=c, n=commit_share: commit_stint(c, n) for c in committers]
        shift = r % len(stints)
        for stint in [*stints[shift:], *stints[:shift]]:
            gc.collect()
            await stint()


async def profile_chain(chain: Chain, tasks: int) -> str:
    """Run ``tasks`` more chains under cProfile; the top functions by own and total time."""
    sessions = await chain.prepare(tasks)
    passes = len(chain.passes)
    profiler = cProfile.Profile()
    profiler.enable()
    await chain.run(sessions)
    profiler.disable()
    del chain.passes[passes:]  # the table is built from the unprofiled runs only
    for session_id, _ in sessions:
        del chain.task_of[session_id]
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    out.write(f"cProfile of {tasks} more chain tasks ({tasks * CHAIN_PHASES} phases)\n")
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(45)
    return out.getvalue()


async def bench_phases(args: argparse.Namespace, tag: str) -> PhaseResult:
    store_url = normalize_database_url(args.database_url)
    dsn = "postgresql://" + store_url.split("://", 1)[1]
    db_schema = f"bench_kernel_{tag}_phases"
    print(
        f"1. phase overhead: {args.tasks} tasks of {CHAIN_PHASES} phases, {args.commits} "
        f"commits per reference; PostgreSQL schema {db_schema}",
        flush=True,
    )
    try:
        store = await Store.open(store_url, upgrade=True, db_schema=db_schema)
        try:
            clock = Clock()
            time_commits(store, clock)
            chain = Chain(store, chain_registry(clock), Topology(f"benchkernel_{tag}"), clock)
            settings = {"search_path": db_schema}
            ours = StoreCommit(store)
            tx = AsyncpgTransaction(store, await asyncpg.connect(dsn, server_settings=settings))
            one = AsyncpgUpdate(store, await asyncpg.connect(dsn, server_settings=settings))
            committers: list[Committer] = [ours, tx, one]
            try:
                for name, committer in zip(("store", "tx", "one"), committers, strict=True):
                    await committer.setup(name)
                await tx.prepare()
                await one.prepare()
                await take_turns(chain, committers, args.tasks, args.commits, args.rounds)
                profile = await profile_chain(chain, args.profile) if args.profile else None
            finally:
                for committer in committers:
                    await committer.close()
        finally:
            await store.close()
    finally:
        await drop_schema(dsn, db_schema)
    return PhaseResult(chain, committers, profile)


def report_phases(result: PhaseResult) -> None:
    chain = result.chain
    gaps, commits, rest = chain.intervals()
    floor = result.committers[0]
    floor_p50 = percentile(floor.samples, 50)

    def row(label: str, samples: Sequence[float], rate: str) -> list[object]:
        p50 = percentile(samples, 50)
        return [
            label,
            len(samples),
            rate,
            f"{p50 * ms:.3f}",
            f"{percentile(samples, 99) * ms:.3f}",
            f"{p50 / floor_p50:.2f}x",
        ]

    phases = CHAIN_PHASES * len(chain.passes)
    rows = [
        row(f"{chain.label} (per-phase overhead)", gaps, f"{len(gaps) / sum(gaps):,.0f}"),
        row("  of which store.commit of the Goto", commits, "-"),
        row("  of which the scheduler around it", rest, "-"),
        row(
            f"whole pass: load + enter + {CHAIN_PHASES} phases",
            chain.passes,
            f"{phases / sum(chain.passes):,.0f}",
        ),
    ]
    for committer in result.committers:
        rate = f"{len(committer.samples) / committer.elapsed:,.0f}"
        rows.append(row(committer.label, committer.samples, rate))
    print()
    print_table(
        ["measure", "samples", "per second", "p50 ms", "p99 ms", "p50 vs store.commit"],
        rows,
        align="<>>>>>",
    )
    print()
    print(
        f"'per second': phases/s for the phase rows (1 / mean interval; for the whole pass "
        f"{CHAIN_PHASES} phases / mean pass), commits/s for the others; "
        f"{len(chain.passes)} tasks run one after another"
    )
    ratio = percentile(gaps, 50) / floor_p50
    met = "MET" if ratio <= TARGET_PHASE_RATIO else "NOT MET"
    print(
        f"per-phase overhead p50 is {ratio:.2f}x one store.commit p50 "
        f"(target <= {TARGET_PHASE_RATIO:.0f}x): {met}"
    )
    if result.profile:
        print()
        print(result.profile)


# 2. 1,000 due timers ----------------------------------------------------------------------


@dataclass
class Workers:
    """The Brain worker processes of one run."""

    env: dict[str, str]
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)

    def start(self, count: int) -> None:
        for i in range(count):
            path = self.logs / f"brain-{i}.log"
            with open(path, "wb") as out:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "brainhands",
                        "brain",
                        "--compat",
                        COMPAT,
                        "--tasks",
                        "bench.kernel_tasks",
                    ],
                    cwd=ROOT,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            self.procs.append(proc)
            self.paths.append(path)

    async def wait_consuming(self, within: float = 60) -> None:
        deadline = time.monotonic() + within
        for proc, path in zip(self.procs, self.paths, strict=True):
            while not any(e.get("event") == "consuming" for e in log_events(path)):
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = "\n".join(path.read_text(errors="replace").splitlines()[-20:])
                    raise RuntimeError(f"brain {proc.pid} did not start consuming:\n{tail}")
                await asyncio.sleep(0.05)

    def check_alive(self) -> None:
        for proc, path in zip(self.procs, self.paths, strict=True):
            if proc.poll() is not None:
                tail = "\n".join(path.read_text(errors="replace").splitlines()[-20:])
                raise RuntimeError(f"brain {proc.pid} exited with {proc.returncode}:\n{tail}")

    def stop(self) -> None:
        """SIGTERM every worker (they drain), and kill the ones still there after a while."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def log_events(path: Path) -> list[dict[str, Any]]:
    events = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict):
                events.append(event)
    return events


@dataclass
class AfterT:
    """What the workers' logs say happened from T until the last task finished."""

    woken: int = 0
    busy: int = 0
    sweeper: int = 0
    """Wake-ups the sweeper sent from T on (until the workers stopped)."""
    armed: int = 0
    """Passes before T that ended with a timer for T (each arms one in-memory timer)."""
    swept_before: int = 0
    """Wake-ups the sweeper sent before T."""
    useful: list[float] = field(default_factory=list)
    """Seconds from delivery to done of each pass that ran a phase."""
    idle: list[float] = field(default_factory=list)
    """The same for passes that found nothing to run (duplicate wake-ups)."""


@dataclass
class TimerResult:
    workers: int
    sessions: int
    lead: float
    asleep_after: float
    """Seconds from the first submission until every task slept."""
    t: float
    finish: list[float]
    """Per session: the ``Finish`` commit's time minus T."""
    woke: list[float]
    """Per session: the start of its ``wake`` phase minus T."""
    events: AfterT = field(default_factory=AfterT)


async def count_naps(store: Store, prefix: str, status: str) -> int:
    t = tables.task
    async with read_transaction(store.engine) as conn:
        found = await conn.execute(
            select(func.count()).where(
                t.c.kind == NAP_KIND, t.c.session_id.like(f"{prefix}-%"), t.c.status == status
            )
        )
        return int(found.scalar_one())


async def submit_naps(
    store: Store, topology: Topology, prefix: str, sessions: int, until: float
) -> None:
    gate = asyncio.Semaphore(16)

    async def one(n: int) -> None:
        async with gate:
            await submit_input(
                store,
                topology,
                session_id=f"{prefix}-{n:05d}",
                request_id="nap",
                input={"kind": NAP_KIND, "input": {"until": until}},
                compat=COMPAT,
            )

    await asyncio.gather(*(one(n) for n in range(sessions)))


async def wait_for_naps(
    store: Store, workers: Workers, prefix: str, sessions: int, status: str, deadline: float
) -> int:
    """Poll until ``sessions`` nap tasks of ``prefix`` are in ``status``; the count at the
    deadline if they are not."""
    while (count := await count_naps(store, prefix, status)) < sessions:
        workers.check_alive()
        if time.time() > deadline:
            return count
        await asyncio.sleep(0.1)
    return count


async def auto_lead(store: Store, topology: Topology, workers: Workers, sessions: int) -> float:
    """Time a pilot batch from submission to sleep, and give the real batch twice its pace
    (plus 5 s) to fall asleep before T. The pilot's timers fire at once; it finishes first."""
    pilot = min(PILOT_SESSIONS, sessions)
    start = time.time()
    await submit_naps(store, topology, "pilot", pilot, start)
    if await wait_for_naps(store, workers, "pilot", pilot, "terminal", start + 60) < pilot:
        raise RuntimeError(f"the pilot's {pilot} sessions did not finish within 60 s")
    # Each pilot session went to sleep and woke: half the time is a fair estimate of sleep.
    pace = (time.time() - start) / 2 / pilot
    lead = max(5.0, 2 * pace * sessions + 5.0)
    print(
        f"  pilot: {pilot} sessions submitted, asleep and finished in "
        f"{time.time() - start:.1f} s; T set {lead:.0f} s after the first submission",
        flush=True,
    )
    return lead


def after_t_events(paths: Sequence[Path], t: float, until: float) -> AfterT:
    out = AfterT()
    for path in paths:
        delivered: dict[str, list[float]] = {}
        for e in log_events(path):
            ts, event, session_id = e.get("ts"), e.get("event"), e.get("session_id")
            if not isinstance(ts, int | float):
                continue
            wake = e.get("next_wake")
            if event == "advanced" and ts < t and isinstance(wake, float) and abs(wake - t) < 1e-3:
                out.armed += 1
            if event == "woken" and isinstance(session_id, str):
                delivered.setdefault(session_id, []).append(ts)
                out.woken += t <= ts <= until
            elif event in ("advanced", "busy") and isinstance(session_id, str):
                started = delivered.get(session_id, [])
                since = started.pop(0) if started else None
                if since is None or not t <= since <= until:
                    continue
                if event == "busy":
                    out.busy += 1
                else:
                    (out.useful if e.get("phases") else out.idle).append(ts - since)
            elif event == "swept":
                sent = int(e.get("session_woken", 0))
                if ts >= t:
                    out.sweeper += sent
                else:
                    out.swept_before += sent
    return out


async def bench_timers(args: argparse.Namespace, tag: str) -> TimerResult:
    namespace = f"benchkernel_{tag}"
    db_schema = f"bench_kernel_{tag}_timers"
    store_url = normalize_database_url(args.database_url)
    dsn = "postgresql://" + store_url.split("://", 1)[1]
    print(
        f"2. due timers: {args.sessions} sessions, {args.workers} Brain worker process(es); "
        f"namespace {namespace}, PostgreSQL schema {db_schema}",
        flush=True,
    )
    topology = Topology(namespace)
    workers: Workers | None = None
    try:
        store = await Store.open(store_url, upgrade=True, db_schema=db_schema)
        try:
            broker = await Broker.connect(args.rabbitmq_url, topology, connection_name=namespace)
            try:
                await topology.declare_brain(broker.channel, COMPAT)
                relay = OutboxRelay(store, broker, poll_interval=0.2)
                store.add_commit_listener(relay.wake)
                relay_stop = asyncio.Event()
                relay_task = asyncio.create_task(relay.run(relay_stop))
                with tempfile.TemporaryDirectory(prefix="brainhands-bench-kernel-") as tmp:
                    logs = Path(args.logs or tmp)
                    workers = Workers(worker_env(args, namespace, db_schema, store_url), logs)
                    try:
                        workers.start(args.workers)
                        await workers.wait_consuming()
                        result = await measure_timers(args, store, topology, workers)
                    finally:
                        relay_stop.set()
                        await relay_task
                        workers.stop()
                    # Read the logs once the workers are gone: a sweep logs when it ends.
                    result.events = after_t_events(
                        workers.paths, result.t, result.t + max(result.finish)
                    )
                    return result
            finally:
                await broker.close()
        finally:
            await store.close()
    finally:
        if workers is not None:
            workers.stop()
        await cleanup(args, namespace, dsn, db_schema)


async def measure_timers(
    args: argparse.Namespace, store: Store, topology: Topology, workers: Workers
) -> TimerResult:
    sessions = args.sessions
    lead = args.lead or await auto_lead(store, topology, workers, sessions)
    start = time.time()
    t = start + lead
    await submit_naps(store, topology, "nap", sessions, t)
    print(f"  {sessions} submitted in {time.time() - start:.1f} s", flush=True)
    asleep = await wait_for_naps(store, workers, "nap", sessions, "sleeping", t - 0.5)
    if asleep < sessions:
        raise RuntimeError(
            f"only {asleep} of {sessions} tasks were asleep half a second before T; "
            f"give them more time with --lead (T was {lead:.0f} s after the first submission)"
        )
    asleep_after = time.time() - start
    print(f"  all {sessions} asleep {asleep_after:.1f} s after the first submission", flush=True)
    done = await wait_for_naps(store, workers, "nap", sessions, "terminal", t + args.timeout)
    if done < sessions:
        raise RuntimeError(f"{done} of {sessions} finished within {args.timeout} s of T")
    tk = tables.task
    async with read_transaction(store.engine) as conn:
        rows = (
            await conn.execute(
                select(tk.c.updated_at, tk.c.result, tk.c.outcome).where(
                    tk.c.kind == NAP_KIND, tk.c.session_id.like("nap-%")
                )
            )
        ).all()
    failed = [r for r in rows if r.outcome != "succeeded"]
    if failed or len(rows) != sessions:
        raise RuntimeError(f"{len(rows)} nap tasks, {len(failed)} not succeeded")
    return TimerResult(
        workers=args.workers,
        sessions=sessions,
        lead=lead,
        asleep_after=asleep_after,
        t=t,
        finish=[r.updated_at - t for r in rows],
        woke=[r.result["woke_at"] - t for r in rows],
    )


def worker_env(
    args: argparse.Namespace, namespace: str, db_schema: str, database_url: str
) -> dict[str, str]:
    env = {
        **os.environ,
        "BRAINHANDS_DATABASE_URL": database_url,
        "BRAINHANDS_DATABASE_SCHEMA": db_schema,
        "BRAINHANDS_RABBITMQ_URL": args.rabbitmq_url,
        "BRAINHANDS_REDIS_URL": args.redis_url,
        "BRAINHANDS_NAMESPACE": namespace,
        "BRAINHANDS_SWEEPER_PERIOD": "1",
        "BRAINHANDS_SHUTDOWN_GRACE": "5",
    }
    if args.concurrency:
        env["BRAINHANDS_CONCURRENCY"] = str(args.concurrency)
    return env


def report_timers(result: TimerResult) -> None:
    fin, woke = result.finish, result.woke
    rows: list[list[object]] = [
        [
            result.workers,
            result.sessions,
            f"{max(fin):.2f}",
            f"{min(fin):.3f}",
            f"{percentile(fin, 50):.2f}",
            f"{percentile(fin, 99):.2f}",
            f"{percentile(woke, 50):.2f}",
            f"{percentile(woke, 99):.2f}",
            f"{result.sessions / max(fin):,.0f}",
        ]
    ]
    print()
    print_table(
        [
            "workers",
            "sessions",
            "T -> last finish s",
            "T -> first s",
            "finish-T p50 s",
            "p99 s",
            "wake start-T p50 s",
            "p99 s",
            "sessions/s",
        ],
        rows,
        align=">" * 9,
    )
    print()
    e = result.events
    print(
        f"T was {result.lead:.0f} s after the first submission; all slept after "
        f"{result.asleep_after:.1f} s. Before T the sweeper sent {e.swept_before} wake-ups "
        f"and {e.armed} passes armed an in-memory timer for T ({result.sessions} sessions). "
        f"From T until the last finish {e.woken} wake-ups were delivered ({e.busy} found the "
        f"session busy); sweeps that ended after T sent {e.sweeper}."
    )
    useful, idle = sum(e.useful), sum(e.idle)
    if e.useful or e.idle:
        print_table(
            [
                "passes, T to last finish",
                "count",
                "delivery -> done p50 ms",
                "p99 ms",
                "slot-seconds",
            ],
            [
                [
                    label,
                    len(samples),
                    f"{percentile(samples, 50) * ms:.0f}" if samples else "-",
                    f"{percentile(samples, 99) * ms:.0f}" if samples else "-",
                    f"{sum(samples):.1f}",
                ]
                for label, samples in (("ran the wake phase", e.useful), ("found nothing", e.idle))
            ],
            align="<>>>>",
        )
        print(
            f"{idle / (useful + idle):.0%} of the consumer slots' busy time went to passes "
            f"that found nothing to do (slot-seconds: sum over passes of delivery -> done; "
            f"each worker has BRAINHANDS_CONCURRENCY slots)"
        )


# Set-up and clean-up -----------------------------------------------------------------------


async def drop_schema(dsn: str, db_schema: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{db_schema}" CASCADE')
    finally:
        await conn.close()


async def cleanup(args: argparse.Namespace, namespace: str, dsn: str, db_schema: str) -> None:
    """Delete the namespace's queues, exchanges and Redis keys, and the schema; each part
    even when another fails."""
    topology = Topology(namespace)

    async def rabbitmq() -> None:
        connection = await aio_pika.connect(args.rabbitmq_url)
        async with connection:
            channel = await connection.channel()
            for queue in (topology.brain_queue(COMPAT), topology.parking_queue):
                await channel.queue_delete(queue)
            await channel.exchange_delete(topology.exchange)
            await channel.exchange_delete(topology.dead_letter_exchange)

    async def redis() -> None:
        client = connect_redis(args.redis_url)
        try:
            keys = [k async for k in client.scan_iter(match=f"{namespace}:*", count=1000)]
            for start in range(0, len(keys), 1000):
                await client.delete(*keys[start : start + 1000])
        finally:
            await client.aclose()

    async def postgresql() -> None:
        await drop_schema(dsn, db_schema)

    for what, step in (("RabbitMQ", rabbitmq), ("Redis", redis), ("PostgreSQL", postgresql)):
        try:
            await step()
        except Exception as exc:
            print(f"cleanup of {what} failed: {exc!r}", file=sys.stderr)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
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
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BRAINHANDS_BENCH_POSTGRES_URL", DEFAULT_PG_URL),
        help="PostgreSQL to use (default: $BRAINHANDS_BENCH_POSTGRES_URL or %(default)s)",
    )
    parser.add_argument(
        "--rabbitmq-url",
        default=os.environ.get("BRAINHANDS_BENCH_RABBITMQ_URL", DEFAULT_RABBITMQ_URL),
        help="RabbitMQ to use (default: $BRAINHANDS_BENCH_RABBITMQ_URL or %(default)s)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BRAINHANDS_BENCH_REDIS_URL", DEFAULT_REDIS_URL),
        help="Redis to use (default: $BRAINHANDS_BENCH_REDIS_URL or %(default)s)",
    )
    args = parser.parse_args(argv)
    if min(args.tasks, args.commits, args.rounds, args.sessions, args.workers) < 1:
        parser.error("--tasks, --commits, --rounds, --sessions and --workers must be positive")
    if args.lead and args.lead < 2:
        parser.error("--lead must be at least 2 seconds")
    return args


def machine() -> str:
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} CPU core(s), load average {one:.1f} (1 min), {five:.1f} (5 min)"


async def main(args: argparse.Namespace) -> None:
    tag = uuid.uuid4().hex[:10]
    print(f"kernel bench on {machine()}", flush=True)
    if args.only in (None, "phases"):
        report_phases(await bench_phases(args, tag))
        print(f"({machine()})")
        print()
    if args.only in (None, "timers"):
        report_timers(await bench_timers(args, tag))
        print(f"({machine()})")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parse_args()))
