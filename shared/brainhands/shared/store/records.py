"""What the store hands back when it is read: plain frozen records, one per row kind."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeVar

# The final statuses are the core's (``statuses``); the records name them for the store.
from brainhands.shared.statuses import FINAL_OPERATION_STATUSES as FINAL_OPERATION_STATUSES
from brainhands.shared.statuses import FINAL_SUBMISSION_STATUSES as FINAL_SUBMISSION_STATUSES
from brainhands.shared.statuses import OPEN_SUBMISSION_STATUSES as OPEN_SUBMISSION_STATUSES
from brainhands.shared.statuses import OperationStatus as OperationStatus
from brainhands.shared.statuses import SubmissionStatus as SubmissionStatus
from brainhands.shared.tenancy import DEFAULT_TENANT

JSON = Any
R = TypeVar("R")
TaskStatus = Literal["pending", "running", "waiting", "sleeping", "completing", "terminal"]
TaskOutcome = Literal["succeeded", "failed", "cancelled"]
JoinPolicy = str
"""How a wait for children ends, as stored: ``all_settled``, ``fail_fast``, ``quorum:<k>``
or ``first:<k>`` (``brain.task.JoinPolicy`` and ``brain.decide.evaluate_join``)."""


@dataclass(frozen=True)
class SessionRecord:
    id: str
    uid: str
    compat: str
    version: int
    fence: int
    status: str
    entry_count: int
    created_at: float
    updated_at: float
    tenant: str = DEFAULT_TENANT


@dataclass(frozen=True)
class EntryRecord:
    seq: int
    kind: str
    body: JSON
    created_at: float


@dataclass(frozen=True)
class DocumentRecord:
    """A document's latest value (its baseline with the increments after it folded in)."""

    name: str
    version: int
    body: JSON
    kind_version: int | None = None
    """The version of its kind ``body`` was written at (None: an untyped document)."""
    baseline: int | None = None
    """The version whose value the store keeps whole; the increments after it are folded on
    each read (None: not known, as for a record made by a writer: its next write rewrites
    the baseline)."""


@dataclass(frozen=True)
class DocumentIncrement:
    """One write of a document: the RFC 6902 JSON Patch from the value before it."""

    version: int
    patch: JSON
    kind_version: int | None
    at: float


@dataclass(frozen=True)
class DocumentHistory:
    """A document as its readers show it: its latest value and its writes, oldest first."""

    document: DocumentRecord
    history: list[DocumentIncrement]


@dataclass(frozen=True)
class TaskRecord:
    id: str
    session_id: str
    parent_id: str | None
    kind: str
    kind_version: int
    input: JSON
    state: JSON
    submission_id: str | None
    status: TaskStatus
    phase: str | None
    wake_at: float | None
    wait_for: list[str] | None
    join_policy: JoinPolicy | None
    operation_id: str | None
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
    created_at: float
    updated_at: float

    @classmethod
    def new(
        cls,
        *,
        id: str,
        session_id: str,
        kind: str,
        kind_version: int,
        input: JSON,
        status: TaskStatus = "pending",
        **fields: Any,
    ) -> TaskRecord:
        """A task as a commit that creates it leaves it (unset fields at their defaults)."""
        now = time.time()
        defaults: dict[str, Any] = {
            "parent_id": None,
            "state": None,
            "submission_id": None,
            "phase": None,
            "wake_at": None,
            "wait_for": None,
            "join_policy": None,
            "operation_id": None,
            "outcome": None,
            "result": None,
            "error": None,
            "attempt": 0,
            "restarts": 0,
            "cancel_requested": False,
            "blocked_reason": None,
            "wait_signal": None,
            "wait_exclusive": False,
            "signal": None,
            "created_at": now,
            "updated_at": now,
        }
        return cls(
            id=id,
            session_id=session_id,
            kind=kind,
            kind_version=kind_version,
            input=input,
            status=status,
            **{**defaults, **fields},
        )


@dataclass(frozen=True)
class SubmissionRecord:
    id: str
    session_id: str
    request_id: str
    status: SubmissionStatus
    input: JSON
    answer: JSON
    error: str | None
    created_at: float
    updated_at: float
    task_id: str | None = None
    """The root task whose end answers it: the one it started, or the loop it joined."""
    principal: str | None = None
    """Who submitted it, as its credential says (``key:<id>`` for an API key)."""
    callback_url: str | None = None
    """Where its end is posted, signed (``brain.callbacks``)."""
    callback_attempts: int = 0
    callback_next_at: float | None = None
    callback_done_at: float | None = None
    callback_error: str | None = None


@dataclass(frozen=True)
class InboxRecord:
    """A request to a session, written by a client and applied once by the Brain that next
    runs the session: ``kind`` ``cancel`` (``key``: the request id to cancel) or ``signal``
    (``key``: the signal's id, ``name`` what waits receive it, ``body`` its payload; kept
    until a task waits for ``name``)."""

    id: int
    session_id: str
    kind: str
    key: str
    body: JSON
    created_at: float
    applied_at: float | None
    name: str | None = None


@dataclass(frozen=True)
class SessionState:
    """Everything a Brain needs to rebuild a session after a restart."""

    session: SessionRecord
    entries: list[EntryRecord] = field(default_factory=list)
    documents: dict[str, DocumentRecord] = field(default_factory=dict)
    open_tasks: list[TaskRecord] = field(default_factory=list)
    open_submissions: list[SubmissionRecord] = field(default_factory=list)
    settled: dict[str, TaskRecord] = field(default_factory=dict)
    """Terminal tasks that open tasks wait for (their outcomes are what the waits read)."""
    inbox: list[InboxRecord] = field(default_factory=list)
    """Requests not applied yet, oldest first (read with the open submissions)."""


@dataclass(frozen=True)
class ClaimedSession:
    """What a Brain reads as it takes a session: its state, and the operations of the tool
    calls its tasks wait for."""

    state: SessionState
    operations: dict[str, OperationRecord] = field(default_factory=dict)


@dataclass(frozen=True)
class CommitReceipt:
    """What a successful commit made durable."""

    session_id: str
    version: int
    entry_seqs: list[int]
    outbox: tuple[OutboxRow, ...] = ()
    """The outbox rows it wrote, for the writer's relay to publish at once."""


@dataclass(frozen=True)
class OutboxRow:
    """A message waiting in the outbox, as a relay publishes it."""

    id: int
    routing_key: str
    body: bytes
    headers: dict[str, str] | None


@dataclass(frozen=True)
class OperationRecord:
    operation_id: str
    session_id: str
    task_id: str | None
    tool: str
    pool: str
    arguments: JSON
    arguments_blob_id: str | None
    """Where the arguments are when they were too large to go inline (``arguments`` is then
    empty)."""
    status: OperationStatus
    attempts: int
    interruptions: int
    unsettled_claims: int | None
    """Claims of the row since its holders last settled it (scheduled a retry, marked a
    start, recorded an outcome); None on rows of earlier builds (``claims.OperationClaim``)."""
    fence: int
    handle: str | None
    """What the tool noted of the work its call started elsewhere (``ToolContext.note_handle``)."""
    result: JSON
    """Read back from its blob where the Brain reads operations (``operations_by_ids_sync``);
    None in Hands' own reads of a result stored as a blob."""
    error: JSON
    blob_id: str | None
    next_attempt_at: float | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    updated_at: float


_NAMES: dict[type, frozenset[str]] = {}


def known(record: type[R], row: Mapping[str, Any]) -> R:
    """A ``record`` of the columns of ``row`` it has. A read that returns whole rows (the
    JSON of PostgreSQL's one-statement read) returns a column a later migration added too:
    during a rolling upgrade, a build that does not know it yet reads the row as it knows
    it rather than failing on it."""
    names = _NAMES.get(record)
    if names is None:
        names = _NAMES[record] = frozenset(f.name for f in fields(record))  # type: ignore[arg-type]
    return record(**{k: v for k, v in row.items() if k in names})
