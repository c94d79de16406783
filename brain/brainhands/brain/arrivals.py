"""What reached a session in the middle of a pass, without a commit of the pass's own.

A pass reads its session once. While it runs, tool outcomes come in (Hands record them),
signals are sent and submissions queued (clients write them). ``Arrivals`` reads those into
the pass's picture (``SessionEdits``) when a decision depends on them:

- before the pass lets go of the session (``anything_new``): an outcome or a signal that came
  meanwhile would otherwise wait for a wake-up that may be queued behind this pass's lease,
  or lost. The outcomes of calls whose jobs this pass committed less than
  ``LEASE_WAIT_MARGIN`` ago are not read: each came after that commit, so its result event's
  wake-up waits for this lease until later than the pass lets go (a lost event is the
  sweeper's, as it is for a call whose outcome comes after the look);
- when a task begins a signal wait (``for_new_wait``): a signal sent before the wait is
  received at once, and a follow-up wait takes the submissions waiting their turn;
- when a root task ended (``for_next_turn``): the next submission may start.

A read made less than ``LEASE_WAIT_MARGIN`` ago -- the claim's own read of the inbox and the
waiting submissions included -- serves the next wait and the next turn: what came after it
has a wake-up of its own, which waits for this lease longer than that, and the holder reads
the signals again before it lets go.
"""

from __future__ import annotations

import time

from brainhands.brain.decide import TOOL_KIND, exclusive_signal_reused
from brainhands.brain.edits import SessionEdits
from brainhands.brain.task import FOLLOW_UP
from brainhands.shared.store import Draft, Store, SubmissionRecord, TaskRecord

LEASE_WAIT_MARGIN = 1.0
"""Seconds past the lease's time a pass waits for a busy session before it leaves the session
to the holder (which looks again for what came meanwhile before it lets go)."""


class Arrivals:
    """Reads what reached the session of ``edits`` during one pass."""

    def __init__(self, store: Store, edits: SessionEdits) -> None:
        """Made as the pass begins, right after the claim (or load) that read the waiting
        submissions and the inbox (the signals among them)."""
        self.store = store
        self.edits = edits
        claimed_at = time.monotonic()
        self.signals_read_at: float | None = None
        """When (monotonic) the signals were last read from the store, if in this pass."""
        self.claim_read_at = claimed_at
        """When (monotonic) the claim read the inbox: fresh enough for a wait for a while."""
        self.queued_read_at = claimed_at
        """When (monotonic) the waiting submissions were last read."""
        self.dispatched: dict[str, float] = {}
        """The operations whose jobs this pass committed, and when (monotonic) each commit
        was sent."""

    def note_dispatched(self, draft: Draft, sent_at: float) -> None:
        """``draft``, sent at ``sent_at``, has committed: note the calls it dispatched."""
        for row in draft.new_tasks:
            operation_id = row.get("operation_id")
            if operation_id is not None and row["status"] == "waiting":
                self.dispatched[operation_id] = sent_at

    @property
    def signals_read(self) -> bool:
        """Whether this pass read the signals from the store."""
        return self.signals_read_at is not None

    async def anything_new(self) -> bool:
        """Fetch the rows open tasks wait for; return whether anything new arrived."""
        edits = self.edits
        open_tasks = edits.open_tasks()
        waited = {i for t in open_tasks for i in (t.wait_for or [])} - set(edits.rows)
        # A call dispatched a moment ago has its result's wake-up to come (see above).
        fresh_since = time.monotonic() - LEASE_WAIT_MARGIN
        op_ids = [
            t.operation_id
            for t in open_tasks
            if t.kind == TOOL_KIND
            and t.operation_id
            and t.status == "waiting"
            and self.dispatched.get(t.operation_id, fresh_since) <= fresh_since
        ]
        fresh, ops = await self.store.rows(sorted(waited), op_ids)
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
        await self.read_signals(edits.draft())
        return any(r.name in waited and r.id not in known for r in edits.signals)

    async def for_new_wait(self, draft: Draft) -> None:
        """A task began a signal wait: read the signals (and the waiting submissions, for a
        follow-up wait) unless this pass read them less than ``LEASE_WAIT_MARGIN`` ago."""
        now = time.monotonic()
        reads = [self.signals_read_at or self.claim_read_at]
        if self._follow_up_waited():
            reads.append(self.queued_read_at)
        if not all(now - r < LEASE_WAIT_MARGIN for r in reads):
            await self.read_signals(draft)

    async def read_signals(self, draft: Draft) -> None:
        """Read the session's signals not received yet (nor in ``draft``), and, when a task
        waits for a follow-up, the submissions waiting for their turn (one hop)."""
        edits = self.edits
        self.signals_read_at = time.monotonic()
        received = set(draft.applied_inbox)
        follow_up = self._follow_up_waited()
        fresh, queued = await self.store.arrivals(edits.session_id, queued=follow_up)
        edits.signals = [r for r in fresh if r.kind == "signal" and r.id not in received]
        if follow_up:
            self._keep_queued(draft, queued)

    async def for_timeouts(self, draft: Draft, timed_out: list[TaskRecord]) -> None:
        """Read the session's signals again for the waits whose timeout is due, after
        sending each exclusive one's timeout as its one signal (unless a sender was first:
        then that is the one). A wait whose exclusive signal was received before fails."""
        edits = self.edits
        for task in timed_out:
            assert task.wait_signal is not None
            if not task.wait_exclusive:
                continue
            await self.store.inbox.send_signal(
                session_id=edits.session_id,
                name=task.wait_signal,
                signal_id=task.wait_signal,
                payload=None,
                wake=None,
                timed_out=True,
            )
        await self.read_signals(draft)
        names = {r.name for r in edits.signals}
        for task in timed_out:
            if task.wait_exclusive and task.wait_signal not in names:
                # Its one signal was received before (by an earlier wait of this name).
                edits.settle(draft, task, exclusive_signal_reused(task))

    async def for_next_turn(self, draft: Draft) -> None:
        """A root task ended: read the submissions waiting for their turn, unless this pass
        read them less than ``LEASE_WAIT_MARGIN`` ago."""
        if time.monotonic() - self.queued_read_at >= LEASE_WAIT_MARGIN:
            _, queued = await self.store.arrivals(self.edits.session_id, queued=True)
            self._keep_queued(draft, queued)

    def _follow_up_waited(self) -> bool:
        return any(t.wait_signal == FOLLOW_UP for t in self.edits.open_tasks())

    def _keep_queued(self, draft: Draft, queued: list[SubmissionRecord]) -> None:
        taken = {u.submission_id for u in draft.submission_updates}
        self.edits.queued = [s for s in queued if s.id not in taken]
        self.queued_read_at = time.monotonic()
