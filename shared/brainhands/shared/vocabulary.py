"""The protocol words the Brain, the Client and the API share: approval kinds, verdicts,
signal names and their limits.

They live in the core so that a Client or an API pod names an approval or checks a signal
without loading Brain code; the Brain reads them from here too.
"""

from __future__ import annotations

from typing import Any, Literal

from brainhands.shared.errors import InvalidRequest

APPROVAL_KIND = "agent.approval"
"""The task kind of an approval gate: a tool call waiting for a decision."""

Verdict = Literal["approved", "denied"]
"""What a decision on an approval says."""

DECISION_PREFIX = "decision:"
"""The start of the name of every approval's decision signal."""

SIGNAL_NAME_MAX = 128
"""The longest signal name (and signal id) a session accepts."""


def decision_signal(approval_id: str) -> str:
    """The name (and the id) of the one signal that decides approval ``approval_id``."""
    return DECISION_PREFIX + approval_id


DECISION_SIGNAL = "approval:"
"""Prefix of a signal declared a decision (``WaitSignal(..., decision=True)``): through
the API, only a key that may approve sends one."""


RUNTIME_PREFIXES = (DECISION_PREFIX, "brainhands.", DECISION_SIGNAL)
"""How the names (and the ids) of the runtime's own signals start: no plain signal's name
or id may."""


def signal_name(name: str, signal_id: str, *, decision: bool) -> str:
    """The stored name of a signal a client sends as ``name`` (``decision``: to a wait
    declared a decision); ``InvalidRequest`` for a name or an id in the runtime's own
    namespaces (``RUNTIME_PREFIXES``), or of no length or longer than ``SIGNAL_NAME_MAX``."""
    for what, value in (("name", name), ("signal_id", signal_id)):
        if value.startswith(RUNTIME_PREFIXES):
            raise InvalidRequest(
                f"signal {what}s starting {DECISION_PREFIX!r}, 'brainhands.' or "
                f"{DECISION_SIGNAL!r} are the runtime's own (approvals: use approve and deny; "
                "a decision: decision=True)"
            )
    stored = DECISION_SIGNAL + name if decision else name
    for what, value in (("name", stored), ("signal_id", signal_id)):
        if not 0 < len(value) <= SIGNAL_NAME_MAX:
            raise InvalidRequest(f"a signal's {what} has 1 to {SIGNAL_NAME_MAX} characters")
    return stored


def signal_space(name: str) -> str:
    """The namespace of the ids of the signals named ``name``: none for a plain signal;
    for the runtime's own, one per kind of act (an approval's decision, a decision signal,
    a budget raise, an act on a failed undo), so that an id an approver or an operator
    will use can never be taken first by another kind of signal."""
    if name.startswith(COMPENSATION_SIGNAL):
        return COMPENSATION_SIGNAL
    for prefix in (DECISION_PREFIX, DECISION_SIGNAL):
        if name.startswith(prefix):
            return prefix
    return name + ":" if name.startswith("brainhands.") else ""


def signal_key(name: str, signal_id: str) -> str:
    """The inbox key of signal ``signal_id`` sent as ``name``: a plain signal's id as it
    is (``InvalidRequest`` for an id in a runtime namespace), a runtime signal's id in its
    namespace (``signal_space``; an id already in it, as an exclusive wait's own, as it
    is). Every sender goes through it, so no plain signal can enter a decision's key."""
    space = signal_space(name)
    if not space:
        if signal_id.startswith(RUNTIME_PREFIXES):
            raise InvalidRequest(f"signal id {signal_id!r} is in the runtime's own namespace")
        return signal_id
    return signal_id if signal_id.startswith(space) else space + signal_id


def signal_id_of(name: str, key: str) -> str:
    """The id a signal named ``name`` was sent under, from its inbox key (``signal_key``)."""
    space = signal_space(name)
    if space and key != name and key.startswith(space):
        return key[len(space) :]
    return key


BUDGET_SIGNAL = "brainhands.budget"
"""The signal a run stopped at its budget waits for: its payload raises the budget (the
``BUDGET_LIMITS`` it names, in ``{"budget": {...}}``) for the stop it names (``"stop"``:
``budget_stop_ref``), and the run resumes. Its name is the runtime's own: a client sends it
by raising a budget, never as a plain signal."""

BUDGET_STOP = "budget_stop"
"""The key, in the state of a task waiting for ``BUDGET_SIGNAL``, of why it stopped:
``{"limit", "budget", "used", "at"}`` (what the session's view shows), and ``"scope":
"tenant"`` for a stop at its tenant's budget (``TENANT_SCOPE``: then ``budget`` and ``used``
are the tenant's) rather than at the run's own."""

TENANT_SCOPE = "tenant"
"""The ``scope`` of a stop at the session's tenant's budget: an operator's raise of the
tenant's budget lifts it (the session's own raise does not)."""


def budget_stop_ref(task_id: str, at: float) -> dict[str, Any]:
    """What names one stop at a budget in the raise that lifts it: the stopped task and the
    ``at`` of its ``BUDGET_STOP``. A raise lifts only the stop it names, so one sent for an
    earlier stop (of the same run, or of a run before) never lifts a later one."""
    return {"task_id": task_id, "at": at}


BUDGET_LIMITS = ("tokens", "cost", "tool_calls", "seconds")
"""What a budget may limit: model tokens (input and output), model cost (in the unit of
the agent's prices), tool calls dispatched, and wall-clock seconds since the run began."""


TENANT_BUDGET_LIMITS = ("tokens", "cost", "tool_calls")
"""What a tenant's budget may limit: the same counts as a run's, added up over every run
of the tenant's sessions (wall-clock time belongs to a run, not to a tenant)."""


def check_tenant_budget(limits: Any) -> dict[str, float]:
    """``limits`` as a tenant's budget: ``check_budget``'s, without ``seconds``."""
    checked = check_budget(limits)
    if "seconds" in checked:
        raise InvalidRequest(f"a tenant's budget limits {', '.join(TENANT_BUDGET_LIMITS)}")
    return checked


def check_budget(limits: Any) -> dict[str, float]:
    """``limits`` as a budget (a JSON object of ``BUDGET_LIMITS`` to non-negative numbers;
    a limit given as null is left out): ``InvalidRequest`` naming what is wrong. Read the
    same by the Client, the API and the Brain."""
    if not isinstance(limits, dict):
        raise InvalidRequest(f"a budget is an object of {', '.join(BUDGET_LIMITS)}")
    unknown = sorted(set(limits) - set(BUDGET_LIMITS))
    if unknown:
        raise InvalidRequest(f"a budget limits {', '.join(BUDGET_LIMITS)}, not {unknown}")
    checked: dict[str, float] = {}
    for name, value in limits.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise InvalidRequest(f"budget {name!r} must be a non-negative number, not {value!r}")
        checked[name] = value
    return checked


EFFECTS_DOCUMENT = "brainhands.compensations"
"""The session document of compensable effects (``brain.compensation``): ``{"tasks": {task
id: [effect, ...]}, "requires_action": {task id: record}}``; a client reads a failed undo's
record from it."""

COMPENSATION_SIGNAL = "brainhands.compensation:"
"""Prefix of the signal a task whose undo failed waits for (``compensation_signal``): an
operator's ``retry`` or ``abandon``. The runtime's own: a client sends it by acting on the
compensation, never as a plain signal."""

CompensationAction = Literal["retry", "abandon"]
COMPENSATION_ACTIONS: tuple[CompensationAction, ...] = ("retry", "abandon")
"""What an operator does with a failed undo: run it again (under a new operation id), or
leave it and the effects before it undone (the task then ends failed)."""


def compensation_signal(task_id: str) -> str:
    """The name of the signal task ``task_id`` waits for once an undo of it failed: one per
    task, so an operator's word for one task is never received by another."""
    return COMPENSATION_SIGNAL + task_id


def compensation_ref(record: dict[str, Any]) -> dict[str, Any]:
    """What names one failed undo (in a ``requires_action`` record) in the act on it: the
    effect and how many times its undo was run again before. An act lifts only the failure
    it names, so one sent for an earlier failure of the same undo does nothing."""
    return {"effect": record["failed"]["task_id"], "attempt": record.get("attempt", 0)}


HOSTED_MODEL_KIND = "hosted_model"
"""The entry that keeps one model answer of a hosted agent's run, as its framework encodes
it, with its usage (``brain.hosted.journal``): counted in a session's usage as a ``model``
entry is."""

HOSTED_CHECKPOINT_KIND = "hosted_checkpoint"
"""The entry that keeps one record of a hosted graph's own recovery state (a LangGraph
checkpoint, or the writes of a super-step's tasks), as its framework serialises it
(``brain.hosted.checkpoints``): the graph resumes from the last one committed."""
HOSTED_STEP_KIND = "hosted_step"
"""The entry that keeps the result of one step a hosted run's framework takes in the Brain
and must not take again (an OpenAI Agents SDK guardrail), by its key in the run."""
