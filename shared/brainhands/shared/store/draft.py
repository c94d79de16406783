"""A draft: the changes one commit will apply to one session, collected before any I/O.

A draft is built by code that runs outside any transaction (a task phase, the agent loop);
``Store.commit`` then applies all of it atomically or none of it.

One commit often moves a task several times (entered, its light phase's result, entered
again): the draft folds those changes into one write per task -- into the row it inserts
when the task is new in the same commit, else into one ``UPDATE`` -- so a commit costs one
statement per task it touches, not one per change.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Required, TypedDict, cast

import jsonpatch

from brainhands.shared.store.records import (
    JSON,
    DocumentRecord,
    JoinPolicy,
    SubmissionStatus,
    TaskOutcome,
    TaskStatus,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

_SUBMISSION_COLUMNS = frozenset({"status", "answer", "error", "task_id"})


class TaskProgress(TypedDict, total=False):
    """The fields of a task that record how it is getting on, each typed as its
    ``TaskRecord`` field: set when it is created, changed as it runs."""

    state: JSON
    wake_at: float | None
    wait_for: list[str] | None
    join_policy: JoinPolicy | None
    outcome: TaskOutcome | None
    result: JSON
    error: JSON
    attempt: int
    restarts: int
    cancel_requested: bool
    blocked_reason: str | None
    wait_signal: str | None
    wait_exclusive: bool
    signal: JSON


class TaskChange(TaskProgress, total=False):
    """The fields of a task one commit may change: what the kernel's rules return, the
    draft writes and a pass's picture adopts."""

    kind_version: int
    input: JSON
    status: TaskStatus
    phase: str | None


class TaskOrigin(TaskProgress, total=False):
    """What a new task may start with besides its kind, input, status and phase: its
    progress, and the submission or the tool call it stands for."""

    submission_id: str | None
    operation_id: str | None


class NewTask(TaskOrigin, total=False):
    """A task a commit creates: its row, but for the session and the timestamps the commit
    adds (fields left out take the column's default)."""

    id: Required[str]
    parent_id: Required[str | None]
    kind: Required[str]
    kind_version: Required[int]
    input: Required[JSON]
    status: Required[TaskStatus]
    phase: Required[str | None]


class SubmissionChange(TypedDict, total=False):
    """The fields of a submission one commit may change."""

    status: SubmissionStatus
    answer: JSON
    error: str | None
    task_id: str | None


def new_id() -> str:
    """A fresh random identifier for rows whose id carries no meaning."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class NewEntry:
    kind: str
    body: JSON


COMPACT_AFTER = 64
"""Increments a document may have after its baseline: the write past them rewrites the
baseline too, so a read folds this many patches at most."""


@dataclass(frozen=True)
class DocumentWrite:
    name: str
    body: JSON
    """The document's value after the write."""
    expected_version: int | None
    """None creates the document; otherwise the version the writer read."""
    patch: JSON = None
    """The increment: the RFC 6902 JSON Patch from the value read to ``body`` (None: one
    that replaces the whole value)."""
    rebase: bool = True
    """Whether the write rewrites the baseline (the whole value, kept at its version)."""
    kind_version: int | None = None
    """The version of the document's kind ``body`` is written at (None: untyped)."""

    @property
    def version(self) -> int:
        return 1 if self.expected_version is None else self.expected_version + 1

    @property
    def increment(self) -> JSON:
        """The patch the write appends to the document's history."""
        if self.patch is None:
            return [{"op": "replace", "path": "", "value": self.body}]
        return self.patch


@dataclass(frozen=True)
class TaskUpdate:
    task_id: str
    changes: TaskChange
    expected_status: str | None


@dataclass(frozen=True)
class SubmissionUpdate:
    submission_id: str
    changes: SubmissionChange


@dataclass(frozen=True)
class OutboxMessage:
    routing_key: str
    body: bytes
    headers: dict[str, str] | None = None


@dataclass(frozen=True)
class TenantCharge:
    """What one commit spends of its session's tenant's budget (``tenant_budgets``)."""

    tokens: int = 0
    cost: float = 0.0
    tool_calls: int = 0

    def __add__(self, other: TenantCharge) -> TenantCharge:
        return TenantCharge(
            self.tokens + other.tokens, self.cost + other.cost, self.tool_calls + other.tool_calls
        )


@dataclass(frozen=True)
class JoinedAnswer:
    """End every running submission that joined root task ``task_id`` with ``changes``."""

    task_id: str
    changes: SubmissionChange


@dataclass
class Draft:
    """Changes for one session, guarded at commit by ``version`` and ``fence``."""

    session_id: str
    version: int
    fence: int
    entries: list[NewEntry] = field(default_factory=list)
    documents: list[DocumentWrite] = field(default_factory=list)
    new_tasks: list[NewTask] = field(default_factory=list)
    task_updates: list[TaskUpdate] = field(default_factory=list)
    new_submissions: list[dict[str, Any]] = field(default_factory=list)
    submission_updates: list[SubmissionUpdate] = field(default_factory=list)
    joined_answers: list[JoinedAnswer] = field(default_factory=list)
    outbox: list[OutboxMessage] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)
    applied_inbox: list[int] = field(default_factory=list)
    """Ids of inbox requests this commit carries out (marked applied in it)."""
    charge: TenantCharge | None = None
    """What this commit spends of its tenant's budget: added to the tenant's usage in the
    same transaction (None: nothing to count, as for every tenant without a budget)."""
    claims_fence: bool = False
    """The holder's first commit after a deferred claim (``SessionClaim.defer``): its guard
    claims the fence (below ``fence``, raised to it) instead of matching it."""
    # By task id, where ``update_task`` finds this draft's earlier writes of a task: its row
    # in ``new_tasks``, its latest place in ``task_updates`` (a pass updates its tasks at
    # every decision, so these are looked up often).
    _created: dict[str, NewTask] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _updated_at: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def has_changes(self) -> bool:
        """Whether committing this draft would change anything."""
        return any(
            (
                self.entries,
                self.documents,
                self.new_tasks,
                self.task_updates,
                self.new_submissions,
                self.submission_updates,
                self.joined_answers,
                self.outbox,
                self.blobs,
                self.applied_inbox,
                self.charge,
            )
        )

    def append_entry(self, kind: str, body: JSON) -> None:
        """Append an immutable entry; its ``seq`` is assigned gap-free at commit."""
        self.entries.append(NewEntry(kind, body))

    def put_document(
        self,
        name: str,
        body: JSON,
        *,
        expected_version: int | None,
        previous: DocumentRecord | None = None,
        kind_version: int | None = None,
    ) -> DocumentRecord:
        """Create (``expected_version=None``) or replace a document read at that version,
        as ``previous`` (its record read then, if the writer has it): the write appends the
        JSON Patch from ``previous`` to ``body`` (without it, a patch replacing the whole
        value). It rewrites the baseline too when the write has no ``previous``, changes the
        kind version (``kind_version``: the one ``body`` is written at) or is the one past
        ``COMPACT_AFTER`` increments. Returns the document as the commit leaves it."""
        version = 1 if expected_version is None else expected_version + 1
        patch = None
        baseline = version
        if previous is not None and expected_version is not None:
            patch = jsonpatch.make_patch(previous.body, body).patch
            if (
                previous.baseline is not None
                and previous.kind_version == kind_version
                and version - previous.baseline <= COMPACT_AFTER
            ):
                baseline = previous.baseline
        write = DocumentWrite(
            name, body, expected_version, patch, baseline == version, kind_version
        )
        self.documents.append(write)
        return DocumentRecord(name, version, body, kind_version, baseline)

    def add_task(
        self,
        *,
        kind: str,
        kind_version: int,
        input: JSON,
        task_id: str | None = None,
        parent_id: str | None = None,
        status: TaskStatus = "pending",
        phase: str | None = None,
        **origin: Unpack[TaskOrigin],
    ) -> str:
        """Create a task in this commit and return its id."""
        task_id = task_id or new_id()
        row: NewTask = {
            "id": task_id,
            "parent_id": parent_id,
            "kind": kind,
            "kind_version": kind_version,
            "input": input,
            "status": status,
            "phase": phase,
            **origin,
        }
        self.new_tasks.append(row)
        self._created[task_id] = row
        return task_id

    def update_task(
        self, task_id: str, *, expected_status: str | None = None, **changes: Unpack[TaskChange]
    ) -> None:
        """Change task fields; with ``expected_status`` the commit fails if it moved on.

        Folded into this draft's earlier write of the task when that write leaves the task in
        ``expected_status`` (or none is expected), so the outcome is the same either way.
        """
        row = self._created.get(task_id)
        if row is not None and expected_status in (None, row["status"]):
            row.update(cast("NewTask", changes))  # each field of a change is one of the row's
            return
        at = self._updated_at.get(task_id)
        if at is not None:
            earlier = self.task_updates[at]
            status = earlier.changes.get("status", earlier.expected_status)
            if expected_status in (None, status):
                merged: TaskChange = {**earlier.changes, **changes}
                self.task_updates[at] = TaskUpdate(task_id, merged, earlier.expected_status)
                return
        self._updated_at[task_id] = len(self.task_updates)
        self.task_updates.append(TaskUpdate(task_id, changes, expected_status))

    def add_submission(
        self,
        *,
        request_id: str,
        input: JSON,
        status: str = "queued",
        submission_id: str | None = None,
    ) -> str:
        """Record accepted input; ``(session, request_id)`` is unique."""
        submission_id = submission_id or new_id()
        self.new_submissions.append(
            {"id": submission_id, "request_id": request_id, "input": input, "status": status}
        )
        return submission_id

    def update_submission(self, submission_id: str, **changes: Unpack[SubmissionChange]) -> None:
        """Change a submission's status, answer or error."""
        unknown = set(changes) - _SUBMISSION_COLUMNS
        if unknown:
            raise ValueError(f"unknown submission fields: {sorted(unknown)}")
        self.submission_updates.append(SubmissionUpdate(submission_id, changes))

    def answer_joined(self, root_id: str, /, **changes: Unpack[SubmissionChange]) -> None:
        """End the submissions that joined root task ``root_id`` (follow-ups its loop took
        in) as it ends: their status, answer or error."""
        unknown = set(changes) - _SUBMISSION_COLUMNS
        if unknown:
            raise ValueError(f"unknown submission fields: {sorted(unknown)}")
        self.joined_answers.append(JoinedAnswer(root_id, changes))

    def charge_tenant(self, charge: TenantCharge) -> None:
        """Count ``charge`` against the session's tenant's budget, in this commit."""
        self.charge = charge if self.charge is None else self.charge + charge

    def mark_applied(self, inbox_id: int) -> None:
        """Mark an inbox request as carried out by this commit."""
        self.applied_inbox.append(inbox_id)

    def add_outbox(
        self, routing_key: str, body: bytes, headers: dict[str, str] | None = None
    ) -> None:
        """Queue a message that the relay publishes once this commit is durable."""
        self.outbox.append(OutboxMessage(routing_key, body, headers))

    def add_blob(self, data: bytes) -> str:
        """Store ``data`` (a value too large to go inline) once, in this commit; return the
        id the rows and messages that need it refer to it by."""
        blob_id = new_id()
        self.blobs[blob_id] = data
        return blob_id
