"""A pass's picture of its session, and the kernel's changes to it.

Every change the kernel makes -- a task entered, moved, settled or created, a tool call's
job, an answer, a cancel carried out, a signal received -- goes into the commit's draft and
into the picture in the same step (``update``, ``create``), so that the decisions after it
in the same pass see the rows as the commit will leave them. Nothing here reads or writes
the store: the scheduler does, and runs the phases.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from brainhands.brain.decide import (
    TOOL_KIND,
    Receive,
    Settle,
    WindDown,
    failed_phase_error,
    settle_changes,
    transition,
    wind_down_changes,
)
from brainhands.brain.ids import derive_operation_id, derive_task_id
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
from brainhands.shared.calls import ToolCallIntent
from brainhands.shared.errors import UnknownToolError
from brainhands.shared.messages import MAX_INLINE_JSON, encode
from brainhands.shared.store import Draft, SubmissionRecord, TaskRecord
from brainhands.shared.store.declarations import ToolCatalog
from brainhands.shared.store.draft import SubmissionChange, TaskChange
from brainhands.shared.store.records import (
    DocumentRecord,
    EntryRecord,
    InboxRecord,
    OperationRecord,
    SessionRecord,
    SessionState,
    SubmissionStatus,
    TaskStatus,
)
from brainhands.shared.topology import Topology
from brainhands.shared.tracing import current_carrier

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
    cancelled_calls: list[str] = field(default_factory=list)
    """Operation ids of tool calls cancelled in this pass: Hands should hear of them."""
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

    def document_bodies(self) -> dict[str, Any]:
        return {name: doc.body for name, doc in self.documents.items()}

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
                self.session, version=self.version, entry_count=len(self.entries)
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

    def _create(
        self,
        draft: Draft,
        *,
        task_id: str,
        kind: str,
        kind_version: int,
        input: Any,
        status: TaskStatus = "pending",
        **fields: Any,
    ) -> None:
        """Create a task in ``draft`` and keep its row as the commit will leave it."""
        draft.add_task(
            task_id=task_id,
            kind=kind,
            kind_version=kind_version,
            input=input,
            status=status,
            **fields,
        )
        self._adopt(
            TaskRecord.new(
                id=task_id,
                session_id=self.session_id,
                kind=kind,
                kind_version=kind_version,
                input=input,
                status=status,
                **fields,
            )
        )

    def _new_id(self, draft: Draft) -> str:
        # The commit that creates it and the task's place in it, under the session's uid.
        return derive_task_id(self.session.uid, draft.version + 1, len(draft.new_tasks))

    # The kernel's decisions, carried out ---------------------------------------------------

    def enter(self, draft: Draft, task: TaskRecord) -> None:
        """Record the entry into the task's phase (counted: a crash loop ends in failure)."""
        self.update(
            draft,
            task,
            status="running",
            attempt=task.attempt + 1 if task.status == "running" else 1,
            restarts=task.restarts + (task.status == "running"),
        )

    def settle(self, draft: Draft, task: TaskRecord, action: Settle) -> None:
        if action.notify_cancel and task.operation_id:
            self.summary.cancelled_calls.append(task.operation_id)
        self.answer(draft, self.update(draft, task, **settle_changes(action)))

    def wind_down(self, draft: Draft, task: TaskRecord, action: WindDown) -> None:
        log.info(
            "winding down",
            extra={"event": "completing", "task_id": task.id, "cancel": action.cancel},
        )
        self.update(draft, task, **wind_down_changes(action))
        for child_id in action.cancel:
            child = self.rows[child_id]
            if not child.cancel_requested:
                self.update(draft, child, cancel_requested=True)

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

    def fail(self, draft: Draft, task: TaskRecord, error: dict[str, Any]) -> None:
        """Settle ``task`` failed with ``error`` (and answer its submission, for a root)."""
        self.answer(
            draft, self.update(draft, task, **settle_changes(Settle("failed", error=error)))
        )

    def answer(self, draft: Draft, task: TaskRecord) -> None:
        """A root task ended: its submission, and those that joined it, are answered."""
        if task.submission_id is None:
            return
        self.root_ended = True
        if task.outcome == "succeeded":
            ending: SubmissionChange = {"status": "answered", "answer": task.result}
        else:
            status: SubmissionStatus = "cancelled" if task.outcome == "cancelled" else "failed"
            ending = {"status": status, "error": str(task.error)}
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
        metrics.PHASES_RUN.labels(task.kind).inc()
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
            if current.attempt >= self.max_restarts:
                self.fail(draft, current, failed_phase_error(current, result))
            else:
                self.update(draft, current, attempt=current.attempt + 1)
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
        kind = self.kind(task)
        assert kind is not None
        now = time.time()
        for entry_kind, body in appended:
            # Numbered now, as the commit will number them (gap-free after the last one):
            # a light phase run before the commit already reads them.
            draft.append_entry(entry_kind, body)
            seq = self.entries[-1].seq + 1 if self.entries else 1
            self.entries.append(EntryRecord(seq, entry_kind, body, now))
        for name in kind.documents:
            current = self.documents.get(name)
            if docs.get(name) != (current.body if current is not None else None):
                draft.put_document(
                    name, docs[name], expected_version=current.version if current else None
                )
                self.documents[name] = DocumentRecord(
                    name, (current.version if current else 0) + 1, docs[name]
                )
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
                    spawned.append(self._call(draft, task, child))
                else:
                    spawned.append(self._spawn(draft, child, parent=task.id))
        self.wait_entered |= isinstance(result, WaitSignal)
        changes = transition(result, now=time.time(), spawned=spawned)
        updated = self.update(draft, task, **changes)
        if updated.status == "terminal":
            self.answer(draft, updated)

    def _spawn(
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
        task_id = self._new_id(draft)
        phase = kind.first_phase if kind else None
        self._create(
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

    def _call(self, draft: Draft, task: TaskRecord, call: Call) -> str:
        task_id = self._new_id(draft)
        operation_id = derive_operation_id(self.session.uid, task_id, call.operation_id)
        try:
            pool = self.tools.get(call.tool).pool
        except UnknownToolError as exc:
            # Recorded as a failed call the phase will see; nothing is sent.
            error = {"status": "failed", "error": {"type": "UnknownToolError", "message": str(exc)}}
            self._create(
                draft,
                task_id=task_id,
                kind=TOOL_KIND,
                kind_version=1,
                input={"tool": call.tool, "arguments": call.arguments},
                parent_id=task.id,
                status="terminal",
                outcome="failed",
                error=error,
                operation_id=operation_id,
            )
            return task_id
        # Arguments too large to go inline are stored once, in this commit, and the task and
        # the job both refer to them.
        arguments, blob_id = call.arguments, None
        encoded = json.dumps(call.arguments).encode()
        if len(encoded) > MAX_INLINE_JSON:
            arguments, blob_id = {}, draft.add_blob(encoded)
        intent = ToolCallIntent(
            operation_id, self.session_id, task_id, call.tool, pool, arguments, blob_id
        )
        self._create(
            draft,
            task_id=task_id,
            kind=TOOL_KIND,
            kind_version=1,
            input=intent.task_input(),
            parent_id=task.id,
            status="waiting",
            operation_id=operation_id,
        )
        job = intent.job(compat=self.compat, trace=current_carrier())
        draft.add_outbox(self.topology.hands_queue(pool), encode(job))
        return task_id

    # Submissions, cancels, versions --------------------------------------------------------

    def start_next_submission(self, draft: Draft) -> bool:
        """Start the oldest submission waiting for its turn, if no root task is open: a
        session runs one submission's task at a time (later ones wait, or join it as
        follow-ups)."""
        if not self.queued or any(t.parent_id is None for t in self.open_tasks()):
            return False
        submission = self.queued.pop(0)
        try:
            child = self.start_submission(submission)
            root = self._spawn(draft, child, parent=None, submission_id=submission.id)
        except Exception as exc:  # bad input is the submitter's problem, reported to it
            draft.update_submission(submission.id, status="failed", error=str(exc))
            self.root_ended = True  # the next one may start
            return True
        draft.update_submission(submission.id, status="running", task_id=root)
        return True

    def cancels(self, draft: Draft, state: SessionState) -> set[str]:
        """Carry out the inbox's cancel requests in ``draft`` (each marked applied in it);
        return the request ids of the queued submissions they end before they start.

        A running submission's root task gets ``cancel_requested`` (the kernel winds it
        down); one that has not started ends ``cancelled``; one already ended, or unknown,
        leaves the request applied with nothing to do.
        """
        ended: set[str] = set()
        by_request = {s.request_id: s for s in state.open_submissions}
        for request in state.inbox:
            if request.kind != "cancel":
                continue  # a kind this build does not know: left for one that does
            draft.mark_applied(request.id)
            submission = by_request.get(request.key)
            if submission is None:
                continue
            # A follow-up that joined a loop is that loop's (its text shapes the work now).
            root = next(
                (
                    t
                    for t in self.open_tasks()
                    if t.submission_id == submission.id or t.id == submission.task_id
                ),
                None,
            )
            if root is None:
                draft.update_submission(submission.id, status="cancelled", error="cancelled")
                ended.add(submission.request_id)
            elif not root.cancel_requested:
                self.update(draft, root, cancel_requested=True)
            log.info(
                "cancel requested",
                extra={
                    "event": "cancel_requested",
                    "session_id": self.session_id,
                    "request_id": request.key,
                    "started": root is not None,
                },
            )
        return ended

    def upgrade_versions(self, draft: Draft) -> None:
        """Tasks of an old version this build can migrate are upgraded before they run."""
        for task in self.open_tasks():
            if task.kind == TOOL_KIND or self.kind(task) is not None:
                continue
            path = self.tasks.upgrade_path(task.kind, task.kind_version)
            if not path:
                continue
            input_, state = task.input, task.state
            for step in path:
                input_, state = step(input_, state)
            self.update(
                draft,
                task,
                kind_version=task.kind_version + len(path),
                input=input_,
                state=state,
                blocked_reason=None,
            )
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
