"""The scheduler: advances one session's tasks while its lease is held.

It reads the session once, then loops: decide for every open task (``brain.decide``), run
the phases that are ready concurrently (outside any transaction, ``brain.phase``), and
commit each result as it comes -- commits are serialized, each guarded by the session
version and the lease's fence. The loop ends when nothing is runnable and no new tool
outcome has arrived.

Every commit carries the kernel's consequences of its own changes: before a draft is
committed, the decisions it makes possible (settling a tool task whose outcome is in,
entering a parent whose join is now satisfied, a child spawned ready to run) are taken on
the rows as the draft leaves them (``brain.edits``) and added to it, until nothing more
follows. A settled tool call and the entry of the phase that applies it are one commit, as
are a spawn and the entry of the child it starts; entries are still durable before their
phase runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from brainhands.brain.decide import (
    TOOL_KIND,
    Block,
    Expire,
    Facts,
    Idle,
    Receive,
    Run,
    Settle,
    WindDown,
    may_join,
    next_action,
)
from brainhands.brain.edits import RunSummary, SessionEdits, StartSubmission, start_from_input
from brainhands.brain.phase import PhaseDone, PhaseRunner, RunAgain
from brainhands.brain.registry import TaskRegistry
from brainhands.brain.task import FOLLOW_UP, Next
from brainhands.shared.live import LivePublisher
from brainhands.shared.store import Draft, Store, SubmissionRecord, TaskRecord
from brainhands.shared.store.declarations import ToolCatalog
from brainhands.shared.store.inbox import send_signal
from brainhands.shared.store.load import arrivals
from brainhands.shared.store.queries import tasks_and_operations
from brainhands.shared.store.records import ClaimedSession, CommitReceipt, SessionState
from brainhands.shared.topology import Topology

log = logging.getLogger("brainhands.brain")

LEASE_WAIT_MARGIN = 1.0
"""Seconds past the lease's time a pass waits for a busy session before it leaves the session
to the holder (which looks again for what came meanwhile before it lets go)."""

MAX_DECISION_ROUNDS = 100
"""Rounds of decisions one commit may take before the rules are deemed not to converge."""


class SessionRunner:
    """One pass over a session, for the holder of its lease token ``fence``."""

    def __init__(
        self,
        *,
        store: Store,
        tasks: TaskRegistry,
        tools: ToolCatalog,
        topology: Topology,
        session_id: str,
        fence: int,
        max_restarts: int = 5,
        declaration_grace: float = 30.0,
        start_submission: StartSubmission = start_from_input,
        compats: frozenset[str] | None = None,
        live: LivePublisher | None = None,
    ) -> None:
        self.store = store
        self.tasks = tasks
        self.tools = tools
        self.topology = topology
        self.session_id = session_id
        self.fence = fence
        self.max_restarts = max_restarts
        self.start_submission = start_submission
        self.compats = compats
        self.phases = PhaseRunner(session_id, tools, declaration_grace, live)
        self.compat = ""
        self.summary = RunSummary()
        self._edits: SessionEdits | None = None
        """The pass's rows and changes, once the session is read."""
        self._entered: set[str] = set()
        self._timed_out: list[TaskRecord] = []
        """Exclusive signal waits whose timeout must be sent before they can go on."""
        self._signals_read_at: float | None = None
        """When (monotonic) the signals were last read from the store, if in this pass."""
        self._queued_read_at: float | None = None
        """When (monotonic) the waiting submissions were last read, if in this pass."""

    async def run(self, claimed: ClaimedSession | None = None) -> RunSummary:
        """Advance the session until nothing is runnable; return what was done.

        ``claimed`` is what the fence claim read (``Store.claim_session``); without it the
        session is loaded here.
        """
        if claimed is None:
            claimed = ClaimedSession(await self.store.load(self.session_id))
            reads = True
        else:
            reads = False
        state = claimed.state
        self.compat = state.session.compat
        if self.compats is not None and self.compat not in self.compats:
            # Another build's session: touch nothing (this build may not read its state).
            self.summary.foreign = self.compat
            return self.summary
        self._edits = edits = SessionEdits(
            state,
            claimed.operations,
            fence=self.fence,
            tasks=self.tasks,
            tools=self.tools,
            topology=self.topology,
            max_restarts=self.max_restarts,
            start_submission=self.start_submission,
        )
        self.summary = edits.summary
        if reads:
            await self._read_waits()
        running: dict[str, asyncio.Task[PhaseDone]] = {}
        try:
            draft = edits.draft()
            cancels = edits.cancels(draft, state)
            queued = [
                s
                for s in state.open_submissions
                if s.status == "queued" and s.request_id not in cancels
            ]
            edits.queued = queued or None
            self._queued_read_at = time.monotonic() if claimed.submissions_read else None
            edits.start_next_submission(draft)
            edits.upgrade_versions(draft)
            while True:
                progressed, idle_until = await self._decide_and_commit(draft, running)
                if running:
                    done, _ = await asyncio.wait(
                        running.values(), return_when=asyncio.FIRST_COMPLETED
                    )
                    for finished in done:
                        task, result, docs, appended = finished.result()
                        running.pop(task.id)
                        await self._after_phase(task, result, docs, appended, running)
                elif not progressed and not await self._read_waits():
                    if await self._next_turn(draft):
                        continue
                    # Nothing runnable, and no tool outcome arrived meanwhile (its wake-up
                    # may be waiting on our lease): let go.
                    self.summary.next_wake = idle_until
                    return self.summary
                draft = edits.draft()
        finally:
            for pending in running.values():
                pending.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)

    def snapshot(self) -> SessionState:
        """The session as this pass left it (for the next pass, if the version still holds)."""
        return self.edits.snapshot()

    @property
    def edits(self) -> SessionEdits:
        """The pass's rows and the changes to them (once ``run`` has read the session)."""
        assert self._edits is not None, "the session is read first"
        return self._edits

    # Deciding ------------------------------------------------------------------------------

    async def _decide_and_commit(
        self, draft: Draft, running: dict[str, asyncio.Task[PhaseDone]]
    ) -> tuple[bool, float | None]:
        """Add the kernel's decisions to ``draft``, commit it (if it changes anything), then
        start the phases that are ready; return whether anything changed, and the next timer.

        No phase starts before the commit that records its entry (or the result of the phase
        before it) is durable -- except light phases: they run right here, and their entry
        and result go into ``draft`` together, with whatever follows from them.
        """
        edits = self.edits
        progressed = False
        ready: list[str] = []
        while True:
            if edits.wait_entered:
                # A signal sent before the wait is received at once (the claim may not have
                # read the inbox: a pass for a tool result does not).
                edits.wait_entered = False
                if not self._arrivals_fresh():
                    await self._read_signals(draft)
            decided, idle_until = self._decide(draft, running, ready)
            progressed |= decided
            if self._timed_out:
                await self._send_timeouts(draft)
                continue
            light = [i for i in ready if self._is_light(edits.rows[i])]
            if not light:
                break
            for task_id in light:
                ready.remove(task_id)
                self._entered.add(task_id)
                edits.record(draft, *(await self._run_phase(edits.rows[task_id])))
        if draft.has_changes():
            receipt = await self._commit(draft)
            provisional = [e.seq for e in edits.entries[len(edits.entries) - len(draft.entries) :]]
            if receipt.entry_seqs != provisional:
                raise RuntimeError(
                    f"session {self.session_id}: entries numbered {receipt.entry_seqs}, "
                    f"expected {provisional}"
                )
        self._entered.update(ready)
        for task_id in ready:
            running[task_id] = asyncio.create_task(
                self._run_phase(edits.rows[task_id]), name=f"phase:{task_id}"
            )
        return progressed or draft.has_changes(), idle_until

    def _is_light(self, task: TaskRecord) -> bool:
        kind = self.edits.kind(task)
        return kind is not None and task.phase in kind.light

    def _decide(
        self, draft: Draft, running: dict[str, asyncio.Task[PhaseDone]], ready: list[str]
    ) -> tuple[bool, float | None]:
        """Decide for every open task until no decision changes anything more.

        Kernel changes go into ``draft`` (and into the pass's rows at once, so that the next
        decisions see them). Tasks whose phase is ready to run (entered in ``draft`` or
        earlier in this pass) are added to ``ready``; returns whether anything was decided,
        and the next timer.
        """
        edits = self.edits
        now = time.time()
        progressed = False
        for _ in range(MAX_DECISION_ROUNDS):
            changed = False
            wakes: list[float] = []
            for task_id in [t.id for t in edits.open_tasks()]:
                task = edits.rows[task_id]  # as updated by earlier decisions
                if task.id in running or task.id in ready or task.status == "terminal":
                    continue
                action = next_action(self._facts(task, now))
                if isinstance(action, Idle):
                    if action.until is not None:
                        wakes.append(action.until)
                    continue
                progressed = True
                if isinstance(action, Run):
                    ready.append(task.id)
                    if task.id in self._entered and task.status == "running":
                        continue  # entered earlier in this pass: its next phase is ready
                    edits.enter(draft, task)
                elif isinstance(action, Settle):
                    edits.settle(draft, task, action)
                elif isinstance(action, WindDown):
                    edits.wind_down(draft, task, action)
                elif isinstance(action, Block):
                    edits.block(draft, task, action.reason)
                elif isinstance(action, Receive):
                    edits.receive(draft, task, action)
                elif isinstance(action, Expire):
                    self._timed_out.append(task)
                    continue
                changed = True
            if not changed:
                return progressed, (min(wakes) if wakes else None)
        raise RuntimeError(
            f"session {self.session_id}: decisions still changing after "
            f"{MAX_DECISION_ROUNDS} rounds"
        )

    def _facts(self, task: TaskRecord, now: float) -> Facts:
        edits = self.edits
        waited = [edits.rows[i] for i in (task.wait_for or []) if i in edits.rows]
        return Facts(
            task=task,
            now=now,
            has_handler=edits.kind(task) is not None,
            max_restarts=self.max_restarts,
            waited=waited,
            operation=edits.operations.get(task.operation_id) if task.operation_id else None,
            entered_here=task.id in self._entered,
            signals=edits.signals if task.wait_signal is not None else [],
            signals_read=self._signals_read_at is not None,
            follow_ups=self._follow_ups(task) if task.wait_signal == FOLLOW_UP else [],
        )

    def _follow_ups(self, task: TaskRecord) -> list[tuple[SubmissionRecord, Any]]:
        out = []
        for submission in self.edits.queued or []:
            try:
                child = self.start_submission(submission)
            except Exception:
                continue
            if child.kind == task.kind and may_join(child.input, task.input):
                out.append((submission, child.input))
        return out

    # Reading what arrived ------------------------------------------------------------------

    async def _read_waits(self) -> bool:
        """Fetch the rows open tasks wait for; return whether anything new arrived."""
        edits = self.edits
        open_tasks = edits.open_tasks()
        waited = {i for t in open_tasks for i in (t.wait_for or [])} - set(edits.rows)
        op_ids = [
            t.operation_id
            for t in open_tasks
            if t.kind == TOOL_KIND and t.operation_id and t.status == "waiting"
        ]
        fresh, ops = await tasks_and_operations(self.store.engine, sorted(waited), op_ids)
        changed = bool(fresh) or any(
            ops[i].status != (edits.operations[i].status if i in edits.operations else None)
            for i in ops
        )
        edits.rows.update(fresh)
        edits.operations.update(ops)
        return changed or await self._signal_arrived()

    async def _signal_arrived(self) -> bool:
        """Whether a signal some open task waits for came in (its wake-up may be waiting
        on our lease, or have been dropped): read when a task waits for one."""
        edits = self.edits
        waited = {t.wait_signal for t in edits.open_tasks() if t.wait_signal is not None}
        if not waited:
            return False
        known = {r.id for r in edits.signals}
        await self._read_signals(edits.draft())
        return any(r.name in waited and r.id not in known for r in edits.signals)

    async def _read_signals(self, draft: Draft) -> None:
        """Read the session's signals not received yet (nor in ``draft``), and, when a task
        waits for a follow-up, the submissions waiting for their turn (one hop)."""
        edits = self.edits
        self._signals_read_at = time.monotonic()
        received = set(draft.applied_inbox)
        follow_up = any(t.wait_signal == FOLLOW_UP for t in edits.open_tasks())
        fresh, queued = await arrivals(self.store.engine, self.session_id, queued=follow_up)
        edits.signals = [r for r in fresh if r.kind == "signal" and r.id not in received]
        if follow_up:
            self._keep_queued(draft, queued)

    def _arrivals_fresh(self) -> bool:
        """Whether this pass read what a new wait looks at (the signals, and the waiting
        submissions if a task waits for a follow-up) less than ``LEASE_WAIT_MARGIN`` ago.

        Then a new wait takes what that read found (less what was received since): what
        came after it has a wake-up of its own, which waits for this lease longer than
        that, and the holder reads the signals again before it lets go -- the rule of
        ``_next_turn``. One read serves every wait a pass enters, e.g. the follow-up
        look between each model turn."""
        now = time.monotonic()
        reads = [self._signals_read_at]
        if any(t.wait_signal == FOLLOW_UP for t in self.edits.open_tasks()):
            reads.append(self._queued_read_at)
        return all(r is not None and now - r < LEASE_WAIT_MARGIN for r in reads)

    def _keep_queued(self, draft: Draft, queued: list[SubmissionRecord]) -> None:
        taken = {u.submission_id for u in draft.submission_updates}
        self.edits.queued = [s for s in queued if s.id not in taken]
        self._queued_read_at = time.monotonic()

    async def _send_timeouts(self, draft: Draft) -> None:
        """Read the session's signals again for the waits whose timeout is due, after
        sending each exclusive one's timeout as its one signal (unless a sender was first:
        then that is the one)."""
        edits = self.edits
        for task in self._timed_out:
            assert task.wait_signal is not None
            if not task.wait_exclusive:
                continue
            await send_signal(
                self.store,
                session_id=self.session_id,
                name=task.wait_signal,
                signal_id=task.wait_signal,
                payload=None,
                wake=None,
                timed_out=True,
            )
        await self._read_signals(draft)
        names = {r.name for r in edits.signals}
        for task in self._timed_out:
            if task.wait_exclusive and task.wait_signal not in names:
                # Its one signal was received before (by an earlier wait of this name).
                error = {
                    "reason": "exclusive signal reused",
                    "message": f"exclusive signal {task.wait_signal!r} was received before: "
                    "an exclusive name can be waited for once",
                }
                edits.fail(draft, task, error)
        self._timed_out.clear()

    async def _next_turn(self, draft: Draft) -> bool:
        """At the end of a pass in which a root task ended: start the next submission.

        The waiting ones are read again unless this pass read them less than
        ``LEASE_WAIT_MARGIN`` ago: a submission that came after that read has a wake-up of
        its own, which waits for this lease longer than that, and gets the next pass."""
        edits = self.edits
        if not edits.root_ended:
            return False
        edits.root_ended = False
        read_at = self._queued_read_at
        if read_at is None or time.monotonic() - read_at >= LEASE_WAIT_MARGIN:
            _, queued = await arrivals(self.store.engine, self.session_id, queued=True)
            self._keep_queued(draft, queued)
        return edits.start_next_submission(draft)

    # Running phases and committing ---------------------------------------------------------

    async def _run_phase(self, task: TaskRecord) -> PhaseDone:
        edits = self.edits
        kind = edits.kind(task)
        assert kind is not None
        return await self.phases.run(
            task,
            kind,
            compat=self.compat,
            documents=edits.document_bodies(),
            children=edits.children(task),
            entries=edits.entries,
        )

    async def _after_phase(
        self,
        task: TaskRecord,
        result: Next | RunAgain | BaseException,
        docs: dict[str, Any],
        appended: list[tuple[str, Any]],
        running: dict[str, asyncio.Task[PhaseDone]],
    ) -> None:
        draft = self.edits.draft()
        self.edits.record(draft, task, result, docs, appended)
        await self._decide_and_commit(draft, running)

    async def _commit(self, draft: Draft) -> CommitReceipt:
        """Commit ``draft``, built against the current version (its rows are adopted)."""
        receipt = await self.store.commit(draft)
        self.edits.version = receipt.version
        self.summary.commits += 1
        return receipt
