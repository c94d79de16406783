"""What a task phase sees and what it returns.

A phase is ``async def phase(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next``.
It runs outside any transaction and never commits: whatever it returns, together with the
changes it made to ``docs`` (the session documents its task kind declares), is applied by
the scheduler in one commit. Recovery re-enters a phase from its start, so a phase must be
safe to run again until its result is committed: external effects belong in tools
(``Dispatch``), whose operation ids make them recognizable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from brainhands.brain.ids import CHOSEN_OPERATION_ID_MAX
from brainhands.shared.store import EntryRecord, TenantCharge
from brainhands.shared.vocabulary import DECISION_SIGNAL, SIGNAL_NAME_MAX

__all__: tuple[str, ...] = (
    "Call",
    "Child",
    "ChildOutcome",
    "Dispatch",
    "Fail",
    "Finish",
    "First",
    "Goto",
    "JoinPolicy",
    "Next",
    "PhaseContext",
    "Quorum",
    "ReceivedSignal",
    "Sleep",
    "Spawn",
    "TaskView",
    "WaitSignal",
)
"""The phase vocabulary: what ``brainhands.brain`` (and ``brainhands``) export from here."""


@dataclass(frozen=True)
class Quorum:
    """A join that waits until ``k`` children succeeded; then the others are asked to stop,
    and the next phase runs once every child has ended (it sees which succeeded). It fails
    as soon as ``k`` successes can no longer come."""

    k: int

    def __str__(self) -> str:
        return f"quorum:{self.k}"


@dataclass(frozen=True)
class First:
    """A join that waits until ``k`` children ended, however they ended; then the others
    are asked to stop, and the next phase runs once every child has ended."""

    k: int

    def __str__(self) -> str:
        return f"first:{self.k}"


JoinPolicy = Literal["all_settled", "fail_fast"] | Quorum | First
"""How a wait for children ends: ``all_settled`` when every one has; ``fail_fast`` at the
first that failed (the others asked to stop, the wait failed); ``Quorum(k)``; ``First(k)``."""
Outcome = Literal["succeeded", "failed", "cancelled"]


@dataclass(frozen=True)
class ChildOutcome:
    """How a task this one waited for ended."""

    task_id: str
    kind: str
    input: Any
    outcome: Outcome
    result: Any
    error: Any


@dataclass(frozen=True)
class ReceivedSignal:
    """What a ``WaitSignal`` received: a signal's payload, or its timeout."""

    name: str
    payload: Any
    signal_id: str | None
    """The id its sender gave it (None when the wait timed out)."""
    timed_out: bool = False
    received_at: float = 0.0

    @classmethod
    def from_row(cls, row: Any) -> ReceivedSignal | None:
        return None if row is None else cls(**row)


@dataclass(frozen=True)
class TaskView:
    """A task as its phase sees it: read-only."""

    id: str
    kind: str
    version: int
    session_id: str
    parent_id: str | None
    input: Any
    state: Any
    """What the previous phase handed on (``Goto(..., state=...)``)."""
    phase: str
    attempt: int
    """How many times this phase has been entered (1 the first time; more after crashes)."""
    children: list[ChildOutcome] = field(default_factory=list)
    """Outcomes of the tasks the last wait was for, in the order they were spawned."""
    signal: ReceivedSignal | None = None
    """What the last ``WaitSignal`` received (None unless this phase resumed from one)."""
    restarts: int = 0
    """How many times the task was entered again after its holder was lost (a kill), over
    all its phases: unlike ``attempt``, a phase that raised does not count."""


class PhaseContext:
    """The world around a running phase: the session's entries, and a way to add some.

    Entries appended here are committed together with what the phase returns, in order,
    and so is what it charges to its tenant's budget.
    """

    def __init__(
        self,
        session_id: str,
        compat: str,
        *,
        entries: Sequence[EntryRecord] = (),
        now: float | None = None,
        text_stream: Callable[[str], None] | None = None,
    ) -> None:
        self.session_id = session_id
        self.compat = compat
        self.entries = tuple(entries)
        self.now = time.time() if now is None else now
        self.appended: list[tuple[str, Any]] = []
        """What the phase adds to its commit: entries (kind, body) and tenant charges
        (``("", TenantCharge)``), in order."""
        self.text_stream = text_stream
        """Where a phase hands text as it is produced (a streaming model's deltas): the
        session's watchers see it live; nothing of it is stored (None: nowhere)."""

    def append_entry(self, kind: str, body: Any) -> None:
        """Add an immutable entry to the session, in the commit of this phase's result."""
        self.appended.append((kind, body))

    def charge_tenant(self, charge: TenantCharge) -> None:
        """Count ``charge`` against the session's tenant's budget (``brain.tenant_budget``),
        in the commit of this phase's result."""
        self.appended.append(("", charge))


# What a phase returns -------------------------------------------------------------------


@dataclass(frozen=True)
class Goto:
    """Run ``phase`` next, handing it ``state``."""

    phase: str
    state: Any = None


@dataclass(frozen=True)
class Sleep:
    """Sleep until ``until`` (epoch seconds) or for ``seconds``, then run ``then``."""

    then: str
    seconds: float | None = None
    until: float | None = None
    state: Any = None

    def wake_at(self, now: float) -> float:
        if (self.seconds is None) == (self.until is None):
            raise ValueError("Sleep needs exactly one of seconds= or until=")
        return self.until if self.until is not None else now + (self.seconds or 0.0)


@dataclass(frozen=True)
class Child:
    """A child task to spawn."""

    kind: str
    input: Any
    version: int | None = None
    """Default: the newest version registered for ``kind``."""


def _check_operation_id(operation_id: str | None) -> None:
    if operation_id is not None and not 0 < len(operation_id) <= CHOSEN_OPERATION_ID_MAX:
        raise ValueError(
            f"operation_id {operation_id!r} must have 1 to {CHOSEN_OPERATION_ID_MAX} characters"
        )


@dataclass(frozen=True)
class Call:
    """A tool call to make as a child: it ends as its operation does."""

    tool: str
    arguments: dict[str, Any]
    operation_id: str | None = None
    """The call's idempotency key, unique across deployments and stores. By default one is
    derived from the commit that records the intent. One chosen here (at most 31 characters,
    unique within the session) is scoped by the session's random uid: the operation, and
    the tool's ``ctx.operation_id``, are ``{uid}:{chosen}``."""

    def __post_init__(self) -> None:
        _check_operation_id(self.operation_id)


@dataclass(frozen=True)
class Spawn:
    """Create ``children`` (tasks or tool calls), wait for them under ``join``, then run
    ``then``; it sees their outcomes in the order given."""

    children: Sequence[Child | Call]
    then: str
    join: JoinPolicy = "all_settled"
    state: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.join, Quorum | First) and not 1 <= self.join.k <= len(self.children):
            raise ValueError(
                f"join {self.join}: k must be between 1 and the {len(self.children)} children"
            )


@dataclass(frozen=True)
class Dispatch:
    """Call one tool on its Hands pool, wait for its outcome, then run ``then``: the same as
    ``Spawn([Call(tool, arguments, operation_id)], then)``."""

    tool: str
    arguments: dict[str, Any]
    then: str
    operation_id: str | None = None
    """As ``Call.operation_id``."""
    state: Any = None

    def __post_init__(self) -> None:
        _check_operation_id(self.operation_id)


FOLLOW_UP = "brainhands.follow-up"
"""The signal a root task waits for to take in the session's next message: a task waiting
for it receives the oldest submission waiting for its turn whose input would start a task
of its own kind with the same input but for its ``text`` (an agent's message joins that
agent's loop; the input is the payload, the request id the signal id), and that
submission is then answered when this task ends."""


@dataclass(frozen=True)
class WaitSignal:
    """Wait durably for a signal named ``name`` (``Client.signal``), then run ``then``, which
    sees it as ``task.signal``; after ``timeout`` seconds without one, ``then`` runs with
    ``task.signal.timed_out``.

    A signal sent before the wait is kept in the session's inbox and received at once; each
    signal is received by one wait, the oldest first, and the same signal id sent twice is
    one signal. ``exclusive``: only one signal can ever be sent under this name (its id is
    the name); a timeout is then sent as that one, so a signal and the timeout can never
    both count -- what an approval's decision is. ``decision``: the signal decides
    something (a manager's go-ahead): only one sent as a decision reaches it
    (``Client.signal(..., decision=True)``; through the API, a key that may approve).
    """

    name: str
    then: str
    timeout: float | None = None
    state: Any = None
    exclusive: bool = False
    decision: bool = False

    def __post_init__(self) -> None:
        if not 0 < len(self.signal_name) <= SIGNAL_NAME_MAX:
            raise ValueError(f"a signal name has 1 to {SIGNAL_NAME_MAX} characters")
        if self.timeout is not None and self.timeout < 0:
            raise ValueError("timeout must not be negative")

    @property
    def signal_name(self) -> str:
        """The name the wait is kept under: a decision's is apart from other signals'."""
        return DECISION_SIGNAL + self.name if self.decision else self.name


@dataclass(frozen=True)
class Finish:
    """The task succeeded with ``result``."""

    result: Any = None


@dataclass(frozen=True)
class Fail:
    """The task failed with ``error``."""

    error: Any


Next = Goto | Sleep | Spawn | Dispatch | WaitSignal | Finish | Fail
