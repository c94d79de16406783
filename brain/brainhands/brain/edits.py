"""A pass's picture of its session, and the kernel's changes to it.

Every change the kernel makes -- a task entered, moved, settled or created, a tool call's
job, an answer, a cancel carried out, a signal received -- goes into the commit's draft and
into the picture in the same step (``update``, ``create``), so that the decisions after it
in the same pass see the rows as the commit will leave them. The rules that decide each
change are the kernel's (``brain.decide``); ``brain.dispatch`` (a tool call) and
``brain.submissions`` (a submission's turn, a cancel) make theirs through ``create`` and
``update`` too. Nothing here reads or writes the store: the scheduler does, and runs the
phases.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from brainhands.brain.compensation import Compensations
from brainhands.brain.decide import (
    TOOL_KIND,
    Block,
    Cut,
    Receive,
    Settle,
    WindDown,
    answer,
    entry_changes,
    phase_failed,
    settle_changes,
    transition,
    upgrade,
    wind_down_changes,
)
from brainhands.brain.dispatch import dispatch
from brainhands.brain.documents import Documents, DocumentValues
from brainhands.brain.ids import derive_task_id
from brainhands.brain.phase import RunAgain
from brainhands.brain.registry import TaskKind, TaskRegistry
from brainhands.brain.task import (
    FOLLOW_UP,
    Call,
    Child,
    ChildOutcome,
    Dispatch,
    Next,
    Spawn,
    WaitSignal,
)
from brainhands.shared import metrics
from brainhands.shared.store import (
    DocumentRecord,
    Draft,
    EntryRecord,
    InboxRecord,
    OperationRecord,
    SessionRecord,
    SessionState,
    SubmissionRecord,
    TaskChange,
    TaskOrigin,
    TaskRecord,
    TaskStatus,
    TenantCharge,
    ToolCatalog,
)
from brainhands.shared.topology import Topology

if TYPE_CHECKING:
    from typing_extensions import Unpack

log = logging.getLogger("brainhands.brain")

StartSubmission = Callable[[SubmissionRecord], Child]


def start_from_input(submission: SubmissionRecord) -> Child:
    """Default: a submission's input names the task to start: ``{"kind", "input"}``."""
    data = submission.input
    if not isinstance(data, dict) or "kind" not in data:
        raise ValueError("a submission's input must be {'kind': ..., 'input': ...}")
    return Child(kind=data["kind"], input=data.get("input"), version=data.get("version"))


@dataclass
class RunSummary:
    phases: int = 0
    commits: int = 0
    settled: list[str] = field(default_factory=list)
    next_wake: float | None = None
    cancelled_calls: set[str] = field(default_factory=set)
    """Operation ids of the tool calls this pass asked to stop: Hands should hear of them."""
    foreign: str | None = None
    """The session belongs to Brains of this other compatibility key: nothing was done."""


class SessionEdits:
    """One pass's rows of a session (as its commits leave them), and the changes to them."""

    def __init__(
        self,
        state: SessionState,
        operations: dict[str, OperationRecord],
        *,
        fence: int,
        tasks: TaskRegistry,
        tools: ToolCatalog,
        topology: Topology,
        max_restarts: int,
        start_submission: StartSubmission,
    ) -> None:
        self.session: SessionRecord = state.session
        self.session_id = state.session.id
        self.compat = state.session.compat
        self.version = state.session.version
        self.fence = fence
        self.tasks = tasks
        self.tools = tools
        self.topology = topology
        self.max_restarts = max_restarts
        self.start_submission = start_submission
        self.documents: dict[str, DocumentRecord] = dict(state.documents)
        self.values = Documents(self.documents, tasks.document_kinds)
        self.entries: list[EntryRecord] = list(state.entries)
        self.rows: dict[str, TaskRecord] = {**state.settled, **{t.id: t for t in state.open_tasks}}
        self.operations = dict(operations)
        self.signals: list[InboxRecord] = [r for r in state.inbox if r.kind == "signal"]
        """The session's signals not received yet (none received in this pass)."""
        self.queued: list[SubmissionRecord] | None = None
        """Submissions waiting for their turn (None: not read in this pass)."""
        self.summary = RunSummary()
        self.root_ended = False
        """A root task ended in this pass: the next submission may start."""
        self.wait_entered = False
        """A task began a signal wait since the signals were last read."""

    # The picture ---------------------------------------------------------------------------

    def open_tasks(self) -> list[TaskRecord]:
        return [t for t in self.rows.values() if t.status != "terminal"]

    def kind(self, task: TaskRecord) -> TaskKind | None:
        return self.tasks.resolve(task.kind, task.kind_version)

    def document_bodies(self) -> DocumentValues:
        """The documents' values as a phase starting now reads them."""
        return self.values.snapshot()

    def children(self, task: TaskRecord) -> list[ChildOutcome]:
        out = []
        for child_id in task.wait_for or []:
            row = self.rows.get(child_id)
            if row is not None and row.status == "terminal" and row.outcome is not None:
                out.append(
                    ChildOutcome(row.id, row.kind, row.input, row.outcome, row.result, row.error)
                )
        return out

    def snapshot(self) -> SessionState:
        """The session as this pass left it (for the next pass, if the version still holds)."""
        open_tasks = self.open_tasks()
        waited = {i for t in open_tasks for i in (t.wait_for or [])}
        return SessionState(
            session=dataclasses.replace(
                self.session,
                version=self.version,
                # The entries may start at a checkpoint; their seqs have no gaps.
                entry_count=self.entries[-1].seq if self.entries else self.session.entry_count,
            ),
            entries=list(self.entries),
            documents=dict(self.documents),
            open_tasks=open_tasks,
            settled={
                i: row
                for i in waited
                if (row := self.rows.get(i)) is not None and row.status == "terminal"
            },
        )

    def draft(self) -> Draft:
        """A new draft against the version the last commit left."""
        return Draft(self.session_id, version=self.version, fence=self.fence)

    # Changing rows -------------------------------------------------------------------------

    def update(self, draft: Draft, task: TaskRecord, **changes: Unpack[TaskChange]) -> TaskRecord:
        """Change ``task`` in ``draft`` and adopt the row as the commit will leave it."""
        draft.update_task(task.id, **changes)  # checks the field names
        return self._adopt(_changed(task, {**changes, "updated_at": time.time()}))

    def _adopt(self, row: TaskRecord) -> TaskRecord:
        self.rows[row.id] = row
        if row.status == "terminal":
            self.summary.settled.append(row.id)
        return row

    def create(
        self,
        draft: Draft,
        *,
        task_id: str,
        kind: str,
        kind_version: int,
        input: Any,
        parent_id: str | None,
        status: TaskStatus = "pending",
        phase: str | None = None,
        **origin: Unpack[TaskOrigin],
    ) -> None:
        """Create a task in ``draft`` and keep its row as the commit will leave it."""
        draft.add_task(
            task_id=task_id,
            kind=kind,
            kind_version=kind_version,
            input=input,
            parent_id=parent_id,
            status=status,
            phase=phase,
            **origin,
        )
        self._adopt(TaskRecord.new(session_id=self.session_id, **draft.new_tasks[-1]))

    def new_id(self, draft: Draft) -> str:
        # The commit that creates it and the task's place in it, under the session's uid.
        return derive_task_id(self.session.uid, draft.version + 1, len(draft.new_tasks))

    # The kernel's decisions, carried out ---------------------------------------------------

    def enter(self, draft: Draft, task: TaskRecord) -> None:
        """Record the entry into the task's phase (counted: a crash loop ends in failure)."""
        self.update(draft, task, **entry_changes(task))

    def settle(self, draft: Draft, task: TaskRecord, action: Settle) -> None:
        if action.notify_cancel and task.operation_id:
            self.summary.cancelled_calls.add(task.operation_id)
        self.end(draft, task, action, settle_changes(action))

    def end(self, draft: Draft, task: TaskRecord, action: Settle, changes: TaskChange) -> None:
        """End ``task`` as ``action`` says, with ``changes``: unless it fails or is cancelled
        with effects to undo, which it then compensates first (``brain.compensation``)."""
        # Made for the call, not kept: kept, it and this object would hold each other, and
        # the pass's rows would wait for the collector instead of going with the pass.
        compensations = Compensations(self)
        if task.kind != TOOL_KIND and action.outcome != "succeeded":
            ending = compensations.before_end(draft, task, action)
            if ending is None:
                return  # compensating: it ends once its effects are undone
            changes = {**changes, "error": ending.error}
        ended = self.update(draft, task, **changes)
        compensations.ended(draft, ended)
        self.answer(draft, ended)

    def apply(
        self, draft: Draft, task: TaskRecord, action: Settle | WindDown | Cut | Block | Receive
    ) -> None:
        """Write what the kernel decided for ``task`` (``decide.next_action``), but for the
        actions its caller carries out itself (run a phase, read signals, idle)."""
        if isinstance(action, Settle):
            self.settle(draft, task, action)
        elif isinstance(action, WindDown):
            self.wind_down(draft, task, action)
        elif isinstance(action, Cut):
            self.cut(draft, task, action)
        elif isinstance(action, Block):
            self.block(draft, task, action.reason)
        else:
            self.receive(draft, task, action)

    def wind_down(self, draft: Draft, task: TaskRecord, action: WindDown) -> None:
        log.info(
            "winding down",
            extra={"event": "completing", "task_id": task.id, "cancel": action.cancel},
        )
        self.update(draft, task, **wind_down_changes(action))
        self.cancel_children(draft, action.cancel)

    def cut(self, draft: Draft, task: TaskRecord, action: Cut) -> None:
        """A met join's children still running are asked to stop; the task waits on."""
        fields = {"event": "join_met", "task_id": task.id, "cancel": action.cancel}
        log.info("join met", extra=fields)
        self.cancel_children(draft, action.cancel)

    def cancel_children(self, draft: Draft, child_ids: list[str]) -> None:
        for child_id in child_ids:
            child = self.rows[child_id]
            if not child.cancel_requested:
                self.update(draft, child, cancel_requested=True)
                if child.kind == TOOL_KIND and child.operation_id:  # it may wait for its call
                    self.summary.cancelled_calls.add(child.operation_id)

    def block(self, draft: Draft, task: TaskRecord, reason: str) -> None:
        log.warning(
            "task blocked", extra={"event": "blocked", "task_id": task.id, "reason": reason}
        )
        self.update(draft, task, blocked_reason=reason)

    def receive(self, draft: Draft, task: TaskRecord, action: Receive) -> None:
        """End a signal wait: the signal (or its timeout) is the task's, its request applied
        in the same commit, and the phase after the wait is ready."""
        if action.inbox_id is not None:
            draft.mark_applied(action.inbox_id)
            self.signals = [r for r in self.signals if r.id != action.inbox_id]
        if action.submission_id is not None:
            draft.update_submission(action.submission_id, status="running", task_id=task.id)
            self.queued = [s for s in self.queued or [] if s.id != action.submission_id]
        self.update(
            draft,
            task,
            status="pending",
            signal=action.signal,
            wait_signal=None,
            wait_exclusive=False,
            wake_at=None,
        )
        if action.signal["name"] == FOLLOW_UP and action.signal["timed_out"]:
            return  # the agent loop's look for follow-ups found none: every turn ends so
        log.info(
            "signal received",
            extra={
                "event": "signal_received",
                "task_id": task.id,
                "signal": action.signal["name"],
                "signal_id": action.signal["signal_id"],
                "timed_out": action.signal["timed_out"],
            },
        )

    def answer(self, draft: Draft, task: TaskRecord) -> None:
        """A root task ended: its submission, and those that joined it, are answered."""
        if task.submission_id is None:
            return
        self.root_ended = True
        ending = answer(task)
        draft.update_submission(task.submission_id, **ending)
        draft.answer_joined(task.id, **ending)

    # A phase's result ----------------------------------------------------------------------

    def record(
        self,
        draft: Draft,
        task: TaskRecord,
        result: Next | RunAgain | BaseException,
        docs: dict[str, Any],
        appended: list[tuple[str, Any]],
    ) -> None:
        """Put a finished phase's result (or its failure) into ``draft``."""
        self.summary.phases += 1
        metrics.labelled(metrics.PHASES_RUN, task.kind).inc()
        if (kind := self.kind(task)) and not isinstance(result, BaseException | RunAgain):
            result, docs = self.values.changes(kind.document_names, docs, result)
        if isinstance(result, BaseException):
            log.warning(
                "phase failed",
                extra={
                    "event": "phase_failed",
                    "task_id": task.id,
                    "phase": task.phase,
                    "error": repr(result),
                },
            )
        # The row as it stands now: decisions taken while the phase ran (a cancel request
        # from a parent winding down) are kept.
        current = self.rows[task.id]
        if isinstance(result, RunAgain):
            self.update(draft, current, status="sleeping", wake_at=time.time() + result.seconds)
        elif isinstance(result, BaseException):
            failed = phase_failed(current, result, max_restarts=self.max_restarts)
            if isinstance(failed, Settle):
                self.settle(draft, current, failed)
            else:
                self.update(draft, current, **failed)
        else:
            self._apply(draft, current, result, docs, appended)

    def _apply(
        self,
        draft: Draft,
        task: TaskRecord,
        result: Next,
        docs: dict[str, Any],
        appended: list[tuple[str, Any]],
    ) -> None:
        now = time.time()
        for entry_kind, body in appended:
            if isinstance(body, TenantCharge):
                draft.charge_tenant(body)
            else:
                self.append_entry(draft, entry_kind, body, now)
        self.values.write(draft, docs)
        spawned: list[str] = []
        if isinstance(result, Dispatch):
            result = Spawn(
                [Call(result.tool, result.arguments, result.operation_id)],
                then=result.then,
                state=result.state,
            )
        if isinstance(result, Spawn):
            for child in result.children:
                if isinstance(child, Call):
                    spawned.append(dispatch(self, draft, task, child))
                else:
                    spawned.append(self.spawn(draft, child, parent=task.id))
        self.wait_entered |= isinstance(result, WaitSignal)
        changes = transition(result, now=time.time(), spawned=spawned)
        if changes.get("status") == "terminal":
            outcome = changes.get("outcome") or "failed"
            ending = Settle(outcome, changes.get("result"), changes.get("error"))
            self.end(draft, task, ending, changes)
        else:
            self.update(draft, task, **changes)

    def append_entry(self, draft: Draft, kind: str, body: Any, now: float | None = None) -> None:
        """Append an entry in ``draft``, numbered now as the commit will number it (gap-free
        after the last one): a light phase run before the commit already reads it."""
        draft.append_entry(kind, body)
        seq = self.entries[-1].seq + 1 if self.entries else 1
        self.entries.append(EntryRecord(seq, kind, body, time.time() if now is None else now))

    def spawn(
        self,
        draft: Draft,
        child: Child,
        *,
        parent: str | None,
        submission_id: str | None = None,
    ) -> str:
        kind = (
            self.tasks.resolve(child.kind, child.version)
            if child.version
            else self.tasks.newest(child.kind)
        )
        version = child.version or (kind.version if kind else 1)
        task_id = self.new_id(draft)
        phase = kind.first_phase if kind else None
        self.create(
            draft,
            task_id=task_id,
            kind=child.kind,
            kind_version=version,
            input=child.input,
            parent_id=parent,
            phase=phase,
            submission_id=submission_id,
        )
        return task_id

    # Versions ----------------------------------------------------------------------------

    def upgrade_versions(self, draft: Draft) -> None:
        """Tasks of an old version this build can migrate are upgraded before they run."""
        for task in self.open_tasks():
            if task.kind == TOOL_KIND or self.kind(task) is not None:
                continue
            path = self.tasks.upgrade_path(task.kind, task.kind_version)
            if not path:
                continue
            self.update(draft, task, **upgrade(task, path))
            log.info(
                "task upgraded",
                extra={
                    "event": "upgraded",
                    "task_id": task.id,
                    "to_version": task.kind_version + len(path),
                },
            )


def _changed(task: TaskRecord, changes: Mapping[str, Any]) -> TaskRecord:
    """``task`` with ``changes`` to fields checked already: what ``dataclasses.replace``
    gives, without building the record again through ``__init__`` (1.4 us instead of 8, at
    every decision of every pass)."""
    row = object.__new__(TaskRecord)
    row.__dict__.update(vars(task), **changes)
    return row
