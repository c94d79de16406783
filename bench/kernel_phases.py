"""Part 1 of ``bench.kernel``: the phase overhead.

A task kind of ten phases that do no I/O runs as T tasks, one after another, each in its own
session through ``SessionRunner`` in this process; next to it, taking turns in rounds, one
``store.commit`` of the same change a ``Goto`` commits, and the same statements on bare
asyncpg. See ``bench/kernel.py`` for the whole story.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import io
import pstats
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from bench._rounds import rotated, shares, timed
from bench._services import asyncpg_dsn, drop_schemas, open_store
from bench._stats import percentile, print_table
from bench.commit import PG_GUARD
from bench.kernel_tasks import COMPAT
from brainhands.brain.decide import transition
from brainhands.brain.registry import TaskKind, TaskRegistry
from brainhands.brain.scheduler import SessionRunner
from brainhands.brain.task import Finish, Goto, Next, PhaseContext, TaskView
from brainhands.shared.store import Draft, Store
from brainhands.shared.store.catalog import ToolCatalog
from brainhands.shared.store.records import CommitReceipt
from brainhands.shared.topology import Topology

TARGET_PHASE_RATIO = 2.0
CHAIN_KIND = "bench.chain"
CHAIN_PHASES = 10
ms = 1000.0


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
                tools=ToolCatalog(self.store),
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

    async def step(self) -> None:
        """One commit."""
        raise NotImplementedError

    async def close(self) -> None:
        return None


class StoreCommit(Committer):
    label = "store.commit, 1 task update (floor)"

    async def step(self) -> None:
        draft = Draft(self.session_id, version=self.version, fence=self.fence)
        draft.update_task(self.task_id, **GOTO_CHANGES)
        self.version = (await self.store.commit(draft)).version


class AsyncpgCommitter(Committer):
    """A committer on a connection of its own, with the statements it prepared."""

    def __init__(self, store: Store, conn: asyncpg.Connection) -> None:
        super().__init__(store)
        self.conn = conn

    async def prepare(self) -> None:
        self.task = await self.conn.prepare(PG_TASK_GOTO)

    async def close(self) -> None:
        await self.conn.close()


class AsyncpgTransaction(AsyncpgCommitter):
    label = "bare asyncpg: same 2 statements in 1 tx"

    async def prepare(self) -> None:
        self.guard = await self.conn.prepare(PG_GUARD)
        await super().prepare()

    async def step(self) -> None:
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


class AsyncpgUpdate(AsyncpgCommitter):
    label = "bare asyncpg: 1 UPDATE, autocommit"

    async def step(self) -> None:
        now = time.time()
        await self.task.fetch(
            "null", "running", "p1", None, "null", None, 1, now, self.task_id, self.session_id
        )
        if self.task.get_statusmsg() != "UPDATE 1":
            raise RuntimeError("task update matched no row")


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
            await committer.step()

    async def commit_stint(committer: Committer, share: int) -> None:
        committer.elapsed += await timed(committer.step, share, committer.samples)

    rounds_shares = zip(shares(tasks, rounds), shares(commits, rounds), strict=True)
    for r, (task_share, commit_share) in enumerate(rounds_shares):
        sessions = await chain.prepare(task_share)
        stints: list[Callable[[], Awaitable[None]]] = [functools.partial(chain.run, sessions)]
        stints += [functools.partial(commit_stint, c, commit_share) for c in committers]
        for stint in rotated(stints, r):
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


async def bench_phases(args: argparse.Namespace, namespace: str, db_schema: str) -> PhaseResult:
    dsn = asyncpg_dsn(args.database_url)
    print(
        f"1. phase overhead: {args.tasks} tasks of {CHAIN_PHASES} phases, {args.commits} "
        f"commits per reference; PostgreSQL schema {db_schema}",
        flush=True,
    )
    try:
        store = await open_store(args.database_url, db_schema)
        try:
            clock = Clock()
            time_commits(store, clock)
            chain = Chain(store, chain_registry(clock), Topology(namespace), clock)
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
        await drop_schemas(args.database_url, db_schema)
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
