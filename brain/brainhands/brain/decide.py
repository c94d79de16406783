"""The kernel's decisions, as pure functions over stored state.

The scheduler gathers the facts about a task (its row, the rows it waits for, the outcome
of its tool call) and asks ``next_action`` what to do; after a phase it asks ``transition``
how the task's row changes. No I/O here, so every rule of DESIGN §4 is tested directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from brainhands.brain.registry import Migration
from brainhands.brain.task import (
    FOLLOW_UP,
    ChildOutcome,
    Dispatch,
    Fail,
    Finish,
    Goto,
    Next,
    Outcome,
    Sleep,
    Spawn,
    WaitSignal,
)
from brainhands.shared.calls import ToolOutcome
from brainhands.shared.errors import UnknownToolError
from brainhands.shared.store import (
    FINAL_OPERATION_STATUSES,
    InboxRecord,
    JoinPolicy,
    OperationRecord,
    SubmissionChange,
    SubmissionRecord,
    SubmissionStatus,
    TaskChange,
    TaskRecord,
)
from brainhands.shared.vocabulary import APPROVAL_KIND, signal_id_of

TOOL_KIND = "brainhands.tool"
"""The built-in kind of a task that waits for one tool call's outcome."""
COMPENSATING = "brainhands.compensate"
"""The phase of a task undoing its effects (``brain.compensation``): it waits for an undo
(``completing``), its undo's tool (``sleeping``) or an operator's act on a failed undo
(``waiting``, then ``pending``); how it ends is decided, so a cancel does not change it."""
COMPENSATE = "compensate"
"""In a tool task's input: the call's undo, frozen at dispatch (``brain.dispatch``)."""

# Actions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """Enter ``phase`` (recording the entry first: crash loops are counted that way)."""

    phase: str


@dataclass(frozen=True)
class Settle:
    """Make the task terminal."""

    outcome: Outcome
    result: Any = None
    error: Any = None
    notify_cancel: bool = False
    """A tool task cancelled while its call may run: tell Hands."""


@dataclass(frozen=True)
class WindDown:
    """The outcome is decided but owned children still run: ask them to stop, then wait."""

    outcome: Outcome
    error: Any
    cancel: list[str]


@dataclass(frozen=True)
class Cut:
    """A join is met with children still running (``quorum``, ``first``): ask them to stop;
    the wait goes on until they have ended."""

    cancel: list[str]


@dataclass(frozen=True)
class Block:
    """No handler for this kind/version in this build: leave the state, say why."""

    reason: str


@dataclass(frozen=True)
class Receive:
    """A signal wait is over: record ``signal`` for the phase it resumes, and mark the
    inbox request ``inbox_id`` (None for a timeout) applied in the same commit."""

    inbox_id: int | None
    signal: dict[str, Any]
    submission_id: str | None = None
    """A follow-up received: the submission joins the task (answered when it ends)."""


@dataclass(frozen=True)
class Expire:
    """A signal wait's timeout is due, and signals sent meanwhile must be read first (the
    pass may not have read them): for an exclusive wait, after its timeout is ``send`` as
    its one signal (a sender may have been first); then the wait receives what is there."""

    send: bool


@dataclass(frozen=True)
class Idle:
    """Nothing to do until something changes (or until ``until``, for a timer)."""

    until: float | None = None


Action = Run | Settle | WindDown | Cut | Block | Receive | Expire | Idle


@dataclass(slots=True)
class Facts:
    """What the scheduler knows about one open task.

    Not frozen, though nothing changes it: it is made for every open task at every
    decision, and a frozen dataclass's ``__init__`` costs several times as much."""

    task: TaskRecord
    now: float
    has_handler: bool
    max_restarts: int
    waited: list[TaskRecord] = field(default_factory=list)
    """The rows of the tasks in ``task.wait_for``, in that order."""
    operation: OperationRecord | None = None
    """For a tool task: its operation's row, once Hands created it."""
    entered_here: bool = False
    """This scheduler recorded the task's current entry itself: ``running`` is not a crash."""
    signals: list[InboxRecord] = field(default_factory=list)
    """For a signal wait: the session's signals not received yet, oldest first."""
    signals_read: bool = False
    """``signals`` were read from the store in this pass (a timeout may then be final). A
    follow-up look (``FOLLOW_UP``, which does not wait) needs no read of its own: it takes
    what the read that served its entry found (``brain.arrivals``, at most
    ``LEASE_WAIT_MARGIN`` old), and a message queued after that starts the next turn."""
    follow_ups: list[tuple[SubmissionRecord, Any]] = field(default_factory=list)
    """For a ``FOLLOW_UP`` wait: the submissions waiting their turn that would start a task
    of its kind, oldest first, each with the input it would start it with."""


def next_action(facts: Facts) -> Action:
    """What to do with an open task now (DESIGN §4)."""
    task = facts.task
    if task.kind != TOOL_KIND and not facts.has_handler:
        reason = f"no handler for task kind {task.kind} v{task.kind_version} in this build"
        return Idle() if task.blocked_reason == reason else Block(reason)
    if task.cancel_requested and task.status != "completing" and task.phase != COMPENSATING:
        return _cancel(facts)
    if task.status == "pending" and task.phase != COMPENSATING:
        return Run(_phase(task))
    if task.status == "running":
        if facts.entered_here:
            return Run(_phase(task))
        # Whoever ran it lost the session (we hold it now): the phase was interrupted.
        if task.attempt >= facts.max_restarts:
            return Settle("failed", error=crash_loop_error(task))
        return Run(_phase(task))
    if task.status in ("sleeping", "pending"):  # pending: compensating, an operator's act came
        if task.wake_at is None or task.wake_at <= facts.now:
            if task.phase == COMPENSATING:  # its next undo is decided again
                return Settle(task.outcome or "failed", result=task.result, error=task.error)
            return Run(_phase(task))
        return Idle(until=task.wake_at)
    if task.status == "waiting":
        if task.wait_signal is not None:
            return _signal_wait(facts)
        return _tool_wait(facts) if task.kind == TOOL_KIND else _join(facts)
    if task.status == "completing":
        if all(w.status == "terminal" for w in facts.waited):
            return Settle(task.outcome or "failed", result=task.result, error=task.error)
        return Idle()
    return Idle()


def _phase(task: TaskRecord) -> str:
    assert task.phase is not None, f"task {task.id} has no phase"
    return task.phase


def _cancel(facts: Facts) -> Action:
    task = facts.task
    if task.kind == TOOL_KIND:
        # A call that ended is kept (a success is then undone with the rest); one with an
        # undo may still succeed once its Hands hear of the cancel: its outcome is awaited.
        waited = _tool_wait(facts)
        if isinstance(waited, Settle) or task.input.get(COMPENSATE):
            return waited
        return Settle("cancelled", error={"reason": "cancelled"}, notify_cancel=True)
    still_running = [w.id for w in facts.waited if w.status != "terminal"]
    if still_running:
        return WindDown("cancelled", {"reason": "cancelled"}, still_running)
    return Settle("cancelled", error={"reason": "cancelled"})


def _tool_wait(facts: Facts) -> Action:
    """A tool task ends as its call did, once the call's outcome is in."""
    op = facts.operation
    return tool_outcome(op) if op is not None and op.status in FINAL_OPERATION_STATUSES else Idle()


def _signal_wait(facts: Facts) -> Action:
    task = facts.task
    if task.wait_signal == FOLLOW_UP and facts.follow_ups:
        submission, payload = facts.follow_ups[0]
        signal = {
            "name": FOLLOW_UP,
            "payload": payload,
            "signal_id": submission.request_id,
            "timed_out": False,
            "received_at": facts.now,
        }
        return Receive(None, signal, submission_id=submission.id)
    for request in facts.signals:
        if request.name == task.wait_signal:
            return Receive(request.id, received_signal(request, facts.now))
    if task.wake_at is None or task.wake_at > facts.now:
        return Idle(until=task.wake_at)
    if task.wait_exclusive or not (facts.signals_read or task.wait_signal == FOLLOW_UP):
        return Expire(send=task.wait_exclusive)
    timed_out = {
        "name": task.wait_signal,
        "payload": None,
        "signal_id": None,
        "timed_out": True,
        "received_at": facts.now,
    }
    return Receive(None, timed_out)


def exclusive_signal_reused(task: TaskRecord) -> Settle:
    """A wait for an exclusive signal that an earlier wait of its name received fails: an
    exclusive name is waited for once."""
    return Settle(
        "failed",
        error={
            "reason": "exclusive signal reused",
            "message": f"exclusive signal {task.wait_signal!r} was received before: "
            "an exclusive name can be waited for once",
        },
    )


def may_join(follow_up: Any, root_input: Any) -> bool:
    """Whether a submission's input may join a root task started from ``root_input`` (of
    its kind) as a follow-up: all but its ``text`` agree, so an agent's message joins the
    loop of that agent, not another's."""
    if not isinstance(follow_up, dict) or not isinstance(root_input, dict):
        return False
    return all(root_input.get(k) == v for k, v in follow_up.items() if k != "text")


def received_signal(request: InboxRecord, now: float) -> dict[str, Any]:
    """What a wait that receives ``request`` hands its phase (``task.signal``)."""
    body = request.body if isinstance(request.body, dict) else {}
    return {
        "name": request.name,
        "payload": body.get("payload"),
        "signal_id": signal_id_of(request.name or "", request.key),
        "timed_out": bool(body.get("timed_out", False)),
        "received_at": now,
    }


JoinState = Literal["wait", "resume", "fail_fast", "unreachable", "cut"]


def join_rule(policy: JoinPolicy | None) -> tuple[str, int]:
    """A stored join policy as its rule and its ``k`` (``quorum:2`` is ``("quorum", 2)``;
    the others have none: 0)."""
    rule, _, k = (policy or "all_settled").partition(":")
    return rule, int(k or 0)


def evaluate_join(policy: JoinPolicy | None, waited: list[TaskRecord]) -> JoinState:
    """Whether a wait is over: ``all_settled`` waits for every task; ``fail_fast`` stops
    at the first failure (the others are then asked to stop); ``quorum:k`` is met by k
    successes and ``unreachable`` once they can no longer come; ``first:k`` is met by k
    tasks ended, however. A met quorum or first ``cut``s the tasks still running (asks
    them to stop), then waits for them to end, and resumes."""
    rule, k = join_rule(policy)
    ended = [w for w in waited if w.status == "terminal"]
    running = [w for w in waited if w.status != "terminal"]
    failed = [w for w in ended if w.outcome != "succeeded"]
    if rule == "fail_fast" and failed:
        return "fail_fast"
    if rule in ("quorum", "first"):
        counted = ended if rule == "first" else [w for w in ended if w.outcome == "succeeded"]
        if len(counted) >= k:
            return "cut" if any(not w.cancel_requested for w in running) else _settled(running)
        if len(counted) + len(running) < k:
            return "unreachable"
    return _settled(running)


def _settled(running: list[TaskRecord]) -> JoinState:
    return "wait" if running else "resume"


def _join(facts: Facts) -> Action:
    policy = facts.task.join_policy
    state = evaluate_join(policy, facts.waited)
    if state == "resume":
        return Run(_phase(facts.task))
    still_running = [w.id for w in facts.waited if w.status != "terminal"]
    if state == "cut":
        cut = [w.id for w in facts.waited if w.status != "terminal" and not w.cancel_requested]
        return Cut(cut)
    if state in ("fail_fast", "unreachable"):
        failed = [w for w in facts.waited if w.status == "terminal" and w.outcome != "succeeded"]
        error = {"reason": "a child failed", "child": failed[0].id, "child_error": failed[0].error}
        if state == "unreachable":
            _, k = join_rule(policy)
            error = {"reason": f"quorum of {k} unreachable", "failed": [w.id for w in failed]}
        if still_running:
            return WindDown("failed", error, still_running)
        return Settle("failed", error=error)
    return Idle()


def tool_outcome(op: OperationRecord) -> Settle:
    """A tool task ends as its operation did; ``uncertain`` stays visible as such."""
    return settle_tool(ToolOutcome.of_operation(op))


def settle_tool(outcome: ToolOutcome) -> Settle:
    """How a tool task ends with its call's ``outcome`` (stored as ``ToolOutcome.of_task``
    reads it back)."""
    return Settle(outcome.task_outcome, result=outcome.task_result(), error=outcome.task_error())


def child_tool_outcome(child: ChildOutcome) -> ToolOutcome:
    """How a child the model called as a tool ended: a tool task's call, or a task tool."""
    return ToolOutcome.of_task(
        child.outcome, child.result, child.error, tool_task=child.kind == TOOL_KIND
    )


def call_result(child: ChildOutcome) -> dict[str, Any]:
    """What the model reads of a call it made, as its child ended: the call's outcome, or,
    for a call that waited for approval, the outcome of the call once approved, or the
    refusal (never the decision itself)."""
    if child.kind == APPROVAL_KIND and child.outcome == "succeeded":
        return {k: v for k, v in child.result.items() if k != "decision"}
    return child_tool_outcome(child).for_model()


def crash_loop_error(task: TaskRecord) -> dict[str, Any]:
    return {
        "reason": "crash loop",
        "message": f"phase {task.phase!r} was entered {task.attempt} times without finishing",
        "phase": task.phase,
    }


def phase_failed(task: TaskRecord, exc: BaseException, *, max_restarts: int) -> Settle | TaskChange:
    """A phase raised ``exc``: it runs again, one more attempt counted, until it has been
    entered ``max_restarts`` times; then the task fails."""
    if task.attempt >= max_restarts:
        return Settle("failed", error=_failed_phase_error(task, exc))
    return {"attempt": task.attempt + 1}


def _failed_phase_error(task: TaskRecord, exc: BaseException) -> dict[str, Any]:
    return {
        "reason": "phase raised",
        "message": f"phase {task.phase!r} raised {type(exc).__name__}: {exc}",
        "phase": task.phase,
        "attempts": task.attempt,
    }


def unknown_tool(exc: UnknownToolError) -> Settle:
    """A call of a tool no Hands pool declared: its tool task is created ended, as a failed
    call the phase sees; nothing is sent."""
    error = {"type": "UnknownToolError", "message": str(exc)}
    return settle_tool(ToolOutcome("failed", error=error))


def answer(task: TaskRecord) -> SubmissionChange:
    """How a root task that ended answers its submission (and those that joined it)."""
    if task.outcome == "succeeded":
        return {"status": "answered", "answer": task.result}
    status: SubmissionStatus = "cancelled" if task.outcome == "cancelled" else "failed"
    return {"status": status, "error": str(task.error)}


# Transitions -----------------------------------------------------------------------------


def transition(nxt: Next, *, now: float, spawned: list[str]) -> TaskChange:
    """How a task's row changes when a phase returns ``nxt``.

    ``spawned`` are the ids given to the children (or tool task) the result creates. A
    ``Goto`` enters the next phase at once (``running``, first attempt): the scheduler runs
    it right after this commit, and a crash before that counts as one attempt.
    """
    base: TaskChange = {
        "wake_at": None,
        "wait_for": None,
        "join_policy": None,
        "wait_signal": None,
        "wait_exclusive": False,
        "signal": None,
    }
    if isinstance(nxt, Goto):
        return {**base, "status": "running", "phase": nxt.phase, "attempt": 1, "state": nxt.state}
    if isinstance(nxt, Sleep):
        return {
            **base,
            "status": "sleeping",
            "phase": nxt.then,
            "wake_at": nxt.wake_at(now),
            "attempt": 0,
            "state": nxt.state,
        }
    if isinstance(nxt, Spawn | Dispatch):
        join = str(nxt.join) if isinstance(nxt, Spawn) else "all_settled"
        return {
            **base,
            "status": "waiting",
            "phase": nxt.then,
            "wait_for": spawned,
            "join_policy": join,
            "attempt": 0,
            "state": nxt.state,
        }
    if isinstance(nxt, WaitSignal):
        return {
            **base,
            "status": "waiting",
            "phase": nxt.then,
            "wake_at": None if nxt.timeout is None else now + nxt.timeout,
            "wait_signal": nxt.signal_name,
            "wait_exclusive": nxt.exclusive,
            "attempt": 0,
            "state": nxt.state,
        }
    if isinstance(nxt, Finish):
        return {**base, "status": "terminal", "outcome": "succeeded", "result": nxt.result}
    if isinstance(nxt, Fail):
        return {**base, "status": "terminal", "outcome": "failed", "error": nxt.error}
    raise TypeError(f"a phase returned {nxt!r}, which is not a Next")


def upgrade(task: TaskRecord, path: list[Migration]) -> TaskChange:
    """A task of an old version, migrated along ``path`` to the version this build runs:
    its input and state as the migrations leave them, no longer blocked."""
    input_, state = task.input, task.state
    for step in path:
        input_, state = step(input_, state)
    return {
        "kind_version": task.kind_version + len(path),
        "input": input_,
        "state": state,
        "blocked_reason": None,
    }


def entry_changes(task: TaskRecord) -> TaskChange:
    """Entering the task's phase: a first attempt, or, when it was running (whoever ran it
    lost it), one more attempt and one more restart -- so a crash loop is counted."""
    again = task.status == "running"
    return {
        "status": "running",
        "attempt": task.attempt + 1 if again else 1,
        "restarts": task.restarts + again,
    }


def settle_changes(action: Settle) -> TaskChange:
    return {
        "status": "terminal",
        "outcome": action.outcome,
        "result": action.result,
        "error": action.error,
        "wake_at": None,
    }


def wind_down_changes(action: WindDown) -> TaskChange:
    return {"status": "completing", "outcome": action.outcome, "error": action.error}
