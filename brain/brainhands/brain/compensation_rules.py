"""Compensation's rules, as pure functions over plain data (``brain.compensation`` says
what compensation is and carries them out): the effect a succeeded call records, which undo
comes next, what a failed undo and an operator's act on it lead to, the record a
compensation leaves, and how the compensating task's row changes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

from brainhands.brain.decide import COMPENSATING, Settle
from brainhands.brain.ids import CHOSEN_OPERATION_ID_MAX
from brainhands.brain.registry import Compensator
from brainhands.brain.task import Call
from brainhands.shared.calls import ToolCallIntent
from brainhands.shared.store import TaskChange, TaskRecord
from brainhands.shared.vocabulary import compensation_ref, compensation_signal

UNDECLARED_HOLD = 0.5
"""Seconds a task waits before it decides its next undo again, when the undo's tool is not
declared as far as this Brain knows (a Brain just started has read no declarations)."""
UNDO_SUFFIX = "/compensate"
_EFFECT_ID_CHARS = 20
"""Of the effect's task id in its undo's chosen operation id (within 31 characters)."""


class Effect(TypedDict):
    """A succeeded call of a task, and how to undo it."""

    task_id: str
    """The tool task whose call succeeded."""
    operation_id: str
    tool: str
    undo: dict[str, Any] | None
    """The compensating call: ``{"tool", "arguments"}`` (None: see ``problem``)."""
    problem: str | None
    """Why no compensating call could be derived: the effect needs an operator."""
    by: str | None
    """The tool task undoing it, once dispatched."""
    outcome: Literal["compensated", "failed"] | None
    held_since: float | None
    """When its undo first waited for its tool's declaration."""
    error: NotRequired[Any]
    """Why its undo failed (the undo's row is not read again once the task waits)."""
    retries: NotRequired[int]
    """How many times an operator had its undo run again."""
    acts: NotRequired[list[dict[str, Any]]]
    """The operators' retries of its undo: what, who, when, why."""


def undo_operation_id(effect_task_id: str, retry: int = 0) -> str:
    """The chosen operation id of the call that undoes the effect of tool task
    ``effect_task_id`` (scoped by the session's uid, like any chosen id); run again by an
    operator for the ``retry``-th time, a new one (``.../compensate/retry-{n}``, the task id
    shortened to fit)."""
    if not retry:
        return effect_task_id[:_EFFECT_ID_CHARS] + UNDO_SUFFIX
    suffix = f"{UNDO_SUFFIX}/retry-{retry}"
    return effect_task_id[: CHOSEN_OPERATION_ID_MAX - len(suffix)] + suffix


def default_undo(tool: str, operation_id: str, arguments: dict[str, Any], result: Any) -> Call:
    """A compensating tool named by a declaration gets the original call whole."""
    return Call(tool, {"operation_id": operation_id, "arguments": arguments, "result": result})


def effect_of(
    tool_task: TaskRecord, result: Any, compensator: Compensator | str | None
) -> Effect | None:
    """The effect a succeeded call records (None: nothing to undo), its undo derived now
    from the call's arguments and ``result``. A compensator that raises, or arguments that
    went by reference, leave an effect with a ``problem``: an operator's to undo."""
    if compensator is None:
        return None
    intent = ToolCallIntent.from_task(tool_task)
    effect = Effect(
        task_id=tool_task.id,
        operation_id=intent.operation_id,
        tool=intent.tool,
        undo=None,
        problem=None,
        by=None,
        outcome=None,
        held_since=None,
    )
    if intent.arguments_blob_id is not None:
        effect["problem"] = "its arguments were stored by reference: no undo was derived"
        return effect
    try:
        if isinstance(compensator, str):
            call = default_undo(compensator, intent.operation_id, intent.arguments, result)
        else:
            call = compensator(copy.deepcopy(intent.arguments), copy.deepcopy(result))
    except Exception as exc:  # the task kind's code: its failure is the effect's problem
        effect["problem"] = f"deriving its undo raised {type(exc).__name__}: {exc}"
        return effect
    if not isinstance(call, Call):
        effect["problem"] = f"its compensator returned {call!r}, not a Call"
        return effect
    effect["undo"] = {"tool": call.tool, "arguments": call.arguments}
    return effect


@dataclass(frozen=True)
class Undo:
    """Dispatch the undo of ``effects[index]`` next."""

    index: int
    call: Call


@dataclass(frozen=True)
class Undone:
    """The compensation is over: ``record`` says how (``status`` compensated or
    compensation_failed)."""

    record: dict[str, Any]

    @property
    def failed(self) -> bool:
        return bool(self.record["status"] != "compensated")


@dataclass(frozen=True)
class Stuck:
    """An undo failed: the task waits for an operator's act on it; ``record`` (status
    ``requires_action``) says which effect, why, and which are still not undone."""

    record: dict[str, Any]


def next_compensation(
    effects: list[Effect], rows: Mapping[str, TaskRecord], act: dict[str, Any] | None = None
) -> tuple[list[Effect], Undo | Stuck | Undone]:
    """What a task compensating ``effects`` does next, given the rows of the undo calls it
    dispatched that a pass holds and the operator's ``act`` it received (``operator_act``);
    returns the effects with those outcomes (and the act) folded in.

    The most recent effect is undone first, one at a time. An undo that did not succeed
    (failed, cancelled, uncertain), or an effect with no undo, stops the chain: the effects
    before it may depend on it staying in place. The task is then ``Stuck`` until an act
    that names this failure: ``retry`` dispatches the undo again under a new operation id,
    ``abandon`` ends it (``Undone``, status ``compensation_failed``). A retry of an effect
    that has no undo to run leaves it stuck.
    """
    effects = [Effect(**e) for e in effects]
    for effect in effects:
        row = rows.get(effect["by"] or "")
        if effect["outcome"] is None and row is not None and row.status == "terminal":
            effect["outcome"] = "compensated" if row.outcome == "succeeded" else "failed"
            if effect["outcome"] == "failed":
                effect["error"] = row.error
    for index in reversed(range(len(effects))):
        effect = effects[index]
        if effect["outcome"] == "compensated":
            continue
        if effect["outcome"] is None and effect["by"] is not None:
            raise RuntimeError(f"the undo {effect['by']} of {effect['task_id']} has not ended")
        if effect["outcome"] is None and effect["undo"] is not None:
            return effects, Undo(index, _undo_call(effect))
        return effects, _operator(effects, index, act)
    return effects, Undone(_record("compensated", effects, None, None))


def _undo_call(effect: Effect) -> Call:
    undo, retry = effect["undo"] or {}, effect.get("retries", 0)
    return Call(undo["tool"], undo["arguments"], undo_operation_id(effect["task_id"], retry))


def _operator(
    effects: list[Effect], index: int, act: dict[str, Any] | None
) -> Undo | Stuck | Undone:
    """The undo of ``effects[index]`` failed: what the operator's ``act`` makes of it."""
    effect = effects[index]
    why = effect["problem"] or effect.get("error")
    record = _record("requires_action", effects, index, why)
    if act is None or act.get("ref") != compensation_ref(record):
        return Stuck(record)  # no act, or one for another failure (used up)
    done = {name: act.get(name) for name in ("action", "by", "at", "reason", "action_id")}
    if act.get("action") == "abandon":
        ended = _record("compensation_failed", effects, index, why)
        return Undone({**ended, "abandoned": done})
    if act.get("action") != "retry" or effect["undo"] is None:
        return Stuck(record)
    effect.pop("error", None)
    effect["outcome"], effect["by"] = None, None
    effect["retries"] = effect.get("retries", 0) + 1
    effect["acts"] = [*effect.get("acts", []), done]
    return Undo(index, _undo_call(effect))


def _record(status: str, effects: list[Effect], failed: int | None, why: Any) -> dict[str, Any]:
    def brief(e: Effect) -> dict[str, Any]:
        return {"task_id": e["task_id"], "operation_id": e["operation_id"], "tool": e["tool"]}

    record: dict[str, Any] = {
        "status": status,
        "compensated": [brief(e) for e in reversed(effects) if e["outcome"] == "compensated"],
    }
    if failed is not None:
        effect = effects[failed]
        record["failed"] = {**brief(effect), "undo_task": effect["by"]}
        record["error"] = why
        record["not_compensated"] = [brief(e) for e in reversed(effects[:failed])]
        record["attempt"] = effect.get("retries", 0)
        record["retryable"] = effect["undo"] is not None
    acts = [a for e in reversed(effects) for a in e.get("acts", [])]
    if acts:
        record["retried"] = acts
    return record


def operator_act(task: TaskRecord) -> dict[str, Any] | None:
    """The operator's act on its failed undo that ``task`` received (None: none)."""
    signal = task.signal if isinstance(task.signal, dict) else {}
    payload = signal.get("payload")
    if signal.get("name") != compensation_signal(task.id) or not isinstance(payload, dict):
        return None
    return {**payload, "action_id": signal.get("signal_id")}


def with_compensation(error: Any, record: dict[str, Any]) -> dict[str, Any]:
    """A task's error once its compensation is over: as it was, with the record."""
    if isinstance(error, dict):
        return {**error, "compensation": record}
    return {"error": error, "compensation": record}


def compensating(task: TaskRecord) -> bool:
    """Whether ``task`` is undoing its effects (its calls now are undos, not effects)."""
    return task.phase == COMPENSATING and task.status != "terminal"


def start_changes(action: Settle, undo_task: str) -> TaskChange:
    """The task waits for its next undo; how it will end stays as it was decided."""
    return {**_decided(action), "status": "completing", "wait_for": [undo_task], "wake_at": None}


def wait_changes(action: Settle, task_id: str) -> TaskChange:
    """The task waits for an operator's act on its failed undo (its own signal)."""
    signal = compensation_signal(task_id)
    return {**_decided(action), "status": "waiting", "wait_signal": signal, "wake_at": None}


def hold_changes(action: Settle, now: float) -> TaskChange:
    """The task waits a moment for its undo's tool to be declared, then decides again."""
    return {**_decided(action), "status": "sleeping", "wake_at": now + UNDECLARED_HOLD}


def _decided(action: Settle) -> TaskChange:
    return {
        "phase": COMPENSATING,
        "outcome": action.outcome,
        "result": action.result,
        "error": action.error,
        "wait_for": None,
        "join_policy": "all_settled",
        "wait_signal": None,
        "signal": None,
    }


def requires_action(body: Any) -> dict[str, Any]:
    """The compensations of an effects document that need an operator, by task id."""
    return dict(body.get("requires_action", {})) if isinstance(body, dict) else {}
