"""The scheduler: advances one session's tasks while its lease is held.

It reads the session once, then loops: decide for every open task (``brain.decide``), run
the phases that are ready concurrently (outside any transaction, ``brain.phase``), and
commit each result as it comes -- commits are serialized, each guarded by the session
version and the lease's fence. The loop ends when nothing is runnable and nothing new has
arrived (a tool outcome, a signal: ``brain.arrivals`` reads what came during the pass).

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

from brainhands.brain.arrivals import Arrivals
from brainhands.brain.decide import (
    Expire,
    Facts,
    Idle,
    Run,
    may_join,
    next_action,
)
from brainhands.brain.edits import RunSummary, SessionEdits, StartSubmission, start_from_input
from brainhands.brain.phase import PhaseDone, PhaseRunner, RunAgain
from brainhands.brain.registry import TaskRegistry
from brainhands.brain.submissions import carry_out_cancels, start_next_submission
from brainhands.brain.task import FOLLOW_UP, Next
from brainhands.shared.live import LivePublisher
from brainhands.shared.store import (
    ClaimedSession,
    CommitReceipt,
    Draft,
    SessionState,
    Store,
    SubmissionRecord,
    TaskRecord,
    ToolCatalog,
)
from brainhands.shared.topology import Topology

log = logging.getLogger("brainhands.brain")

MAX_DECISION_ROUNDS = 100
"""Rounds of decisions one commit may take before the rules are deemed not to converge."""


class SessionRunner:
    """One pass over a session, for the holder of its lease token ``fence`` (``claims_fence``:
    its first commit claims the fence, whose claim was deferred: ``Store.claim_session``)."""

    def __init__(
        self,
        *,
        store: Store,
        tasks: TaskRegistry,
        tools: ToolCatalog,
        topology: Topology,
        session_id: str,
        fence: int,
        claims_fence: bool = False,
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
        self.claims_fence = claims_fence
        self.max_restarts = max_restarts
        self.start_submission = start_submission
        self.compats = compats
        self.phases = PhaseRunner(session_id, tools, declaration_grace, live)
        self.compat = ""
        self.summary = RunSummary()
        self._edits: SessionEdits | None = None
        """The pass's rows and changes, once the session is read."""
        self._arrivals: Arrivals | None = None
        self._entered: set[str] = set()
        self._timed_out: list[TaskRecord] = []
        """Signal waits whose timeout is due (exclusive ones must send it first)."""

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
        self._arrivals = Arrivals(self.store, edits)
        if reads:
            await self.arrivals.anything_new()
        running: dict[str, asyncio.Task[PhaseDone]] = {}
        try:
            draft = edits.draft()
            cancels = carry_out_cancels(edits, draft, state)
            queued = [
                s
                for s in state.open_submissions
                if s.status == "queued" and s.request_id not in cancels
            ]
            edits.queued = queued or None
            start_next_submission(edits, draft)
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
                elif not progressed and not await self.arrivals.anything_new():
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

    @property
    def arrivals(self) -> Arrivals:
        """What reaches the session during the pass (once ``run`` has read the session)."""
        assert self._arrivals is not None, "the session is read first"
        return self._arrivals

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
                await self.arrivals.for_new_wait(draft)
            decided, idle_until = self._decide(draft, running, ready)
            progressed |= decided
            if self._timed_out:
                await self.arrivals.for_timeouts(draft, self._timed_out)
                self._timed_out.clear()
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
                elif isinstance(action, Expire):
                    self._timed_out.append(task)
                    continue
                else:
                    edits.apply(draft, task, action)
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
            signals_read=self.arrivals.signals_read,
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

    async def _next_turn(self, draft: Draft) -> bool:
        """At the end of a pass in which a root task ended: start the next submission."""
        edits = self.edits
        if not edits.root_ended:
            return False
        edits.root_ended = False
        await self.arrivals.for_next_turn(draft)
        return start_next_submission(edits, draft)

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
        sent_at = time.monotonic()
        draft.claims_fence = self.claims_fence
        receipt = await self.store.commit(draft)
        self.claims_fence = False
        self.edits.version = receipt.version
        self.summary.commits += 1
        self.arrivals.note_dispatched(draft, sent_at)
        return receipt
