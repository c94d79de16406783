"""Compensation: undoing what a task did when it cannot finish.

A tool call may have a compensating call: its task kind says how to undo it
(``TaskKind.compensate``), or else the tool's declaration names a compensating tool
(``@tool(..., compensate=...)``). When such a call succeeds, the undo it would need is
derived at once from the call's arguments and result and committed with the tool task's
end, in the session document ``EFFECTS_DOCUMENT`` under the task that made the call. Which
undo a call has is frozen in its tool task's input when it is dispatched (``brain.dispatch``),
and a cancel does not throw such a call away: its tool task waits for the call's real outcome
(``brain.decide``), so a success that came after the cancel is undone too. A task that
succeeds hands its recorded effects on to its parent (a parent that fails later undoes what
its finished children did too); a root task that succeeds drops them.

A task that fails or is cancelled with recorded effects does not end at once: it enters
``completing`` in phase ``COMPENSATING`` and undoes its effects one at a time, the most
recent first, each as a tool task of its own (so each runs exactly once under its own
operation id, ``{session uid}:{effect's task id}/compensate``, and its Hands retry or recover
it like any call). Which undo comes next is decided by ``next_compensation`` from the
document and the waited row alone, so a Brain killed anywhere in the chain picks it up
where its last commit left it. The task then ends as it would have, its error carrying the
compensation's record; an undo that failed stops the chain, and the record stays in the
document's ``requires_action`` until an operator deals with it (the effects not undone are
listed there).

The decisions are pure functions over plain data (tested directly); ``Compensations``
carries them out on a pass's rows (``brain.edits``), as ``brain.dispatch`` does for a call.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from brainhands.brain.decide import COMPENSATE, COMPENSATING, TOOL_KIND, Settle
from brainhands.brain.dispatch import dispatch
from brainhands.brain.registry import Compensator, TaskKind
from brainhands.brain.task import Call
from brainhands.shared.calls import ToolCallIntent
from brainhands.shared.store import DocumentRecord, Draft, TaskChange, TaskRecord

if TYPE_CHECKING:
    from brainhands.brain.edits import SessionEdits

log = logging.getLogger("brainhands.brain")
_READS: set[asyncio.Future[None]] = set()
"""Declaration reads started for undos, kept until done (the loop keeps tasks weakly)."""

EFFECTS_DOCUMENT = "brainhands.compensations"
"""The session document of compensable effects: ``{"tasks": {task id: [Effect, ...]},
"requires_action": {task id: record}}``."""
UNDECLARED_HOLD = 0.5
"""Seconds a task waits before it decides its next undo again, when the undo's tool is not
declared as far as this Brain knows (a Brain just started has read no declarations)."""
UNDECLARED_GRACE = 30.0
"""Seconds an undo waits for its tool to be declared; then it is dispatched, and fails as
a call of an unknown tool (an operator's to deal with)."""
COMPENSATION_ENTRY = "compensation"
"""The kind of the session entry that records how a compensation ended."""
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


# Deciding ----------------------------------------------------------------------------------


def undo_operation_id(effect_task_id: str) -> str:
    """The chosen operation id of the call that undoes the effect of tool task
    ``effect_task_id`` (scoped by the session's uid, like any chosen id)."""
    return effect_task_id[:_EFFECT_ID_CHARS] + UNDO_SUFFIX


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


def next_compensation(
    effects: list[Effect], rows: Mapping[str, TaskRecord]
) -> tuple[list[Effect], Undo | Undone]:
    """What a task compensating ``effects`` does next, given the rows of the undo calls it
    dispatched that a pass holds; returns the effects with those outcomes folded in.

    The most recent effect is undone first, one at a time. An undo that did not succeed
    (failed, cancelled, uncertain) stops the chain: the effects before it may depend on it
    staying in place, so they are left for an operator, with the record saying which.
    """
    effects = [Effect(**e) for e in effects]
    for effect in effects:
        row = rows.get(effect["by"] or "")
        if effect["outcome"] is None and row is not None and row.status == "terminal":
            effect["outcome"] = "compensated" if row.outcome == "succeeded" else "failed"
    for index in reversed(range(len(effects))):
        effect = effects[index]
        if effect["outcome"] == "compensated":
            continue
        if effect["outcome"] is None and effect["by"] is not None:
            raise RuntimeError(f"the undo {effect['by']} of {effect['task_id']} has not ended")
        if effect["outcome"] is None and effect["undo"] is not None:
            undo = effect["undo"]
            call = Call(undo["tool"], undo["arguments"], undo_operation_id(effect["task_id"]))
            return effects, Undo(index, call)
        failed = rows.get(effect["by"] or "")
        why = effect["problem"] or (failed.error if failed is not None else None)
        return effects, Undone(_record("compensation_failed", effects, index, why))
    return effects, Undone(_record("compensated", effects, None, None))


def _record(status: str, effects: list[Effect], failed: int | None, why: Any) -> dict[str, Any]:
    def brief(e: Effect) -> dict[str, Any]:
        return {"task_id": e["task_id"], "operation_id": e["operation_id"], "tool": e["tool"]}

    record: dict[str, Any] = {
        "status": status,
        "compensated": [brief(e) for e in reversed(effects) if e["outcome"] == "compensated"],
    }
    if failed is not None:
        record["failed"] = {**brief(effects[failed]), "undo_task": effects[failed]["by"]}
        record["error"] = why
        record["not_compensated"] = [brief(e) for e in reversed(effects[:failed])]
    return record


def with_compensation(error: Any, record: dict[str, Any]) -> dict[str, Any]:
    """A task's error once its compensation is over: as it was, with the record."""
    if isinstance(error, dict):
        return {**error, "compensation": record}
    return {"error": error, "compensation": record}


def compensating(task: TaskRecord) -> bool:
    """Whether ``task`` is undoing its effects (its calls now are undos, not effects)."""
    return task.phase == COMPENSATING and task.status in ("completing", "sleeping")


def start_changes(action: Settle, undo_task: str) -> TaskChange:
    """The task waits for its next undo; how it will end stays as it was decided."""
    return {**_decided(action), "status": "completing", "wait_for": [undo_task], "wake_at": None}


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


# Carrying out ------------------------------------------------------------------------------


class Compensations:
    """The effects document of one pass, and the compensation decisions carried out on its
    rows (in the drafts ``brain.edits`` builds)."""

    def __init__(self, edits: SessionEdits) -> None:
        self.edits = edits

    def _body(self) -> dict[str, Any]:
        """A copy of the document's body, to change and put."""
        doc = self.edits.documents.get(EFFECTS_DOCUMENT)
        body: dict[str, Any] = copy.deepcopy(doc.body) if doc is not None else {}
        body.setdefault("tasks", {})
        body.setdefault("requires_action", {})
        return body

    def _effects(self, task_id: str) -> list[Effect]:
        doc = self.edits.documents.get(EFFECTS_DOCUMENT)
        if doc is None or not isinstance(doc.body, dict):
            return []
        return list(doc.body.get("tasks", {}).get(task_id, []))

    def _put(self, draft: Draft, body: dict[str, Any]) -> None:
        current = self.edits.documents.get(EFFECTS_DOCUMENT)
        version = current.version if current is not None else None
        draft.put_document(EFFECTS_DOCUMENT, body, expected_version=version)
        self.edits.documents[EFFECTS_DOCUMENT] = DocumentRecord(
            EFFECTS_DOCUMENT, (version or 0) + 1, body
        )

    def _undeclared(self, effect: Effect, tool: str) -> bool:
        """Whether the undo of ``effect`` waits for ``tool``'s declaration (which is then
        read): not past ``UNDECLARED_GRACE``."""
        catalog = self.edits.tools
        if tool in catalog.known:
            return False
        now = time.time()
        effect["held_since"] = effect.get("held_since") or now
        if now - (effect["held_since"] or now) >= UNDECLARED_GRACE:
            return False
        reading = asyncio.ensure_future(catalog.refresh())
        _READS.add(reading)
        reading.add_done_callback(_READS.discard)
        return True

    def compensator(self, parent: TaskRecord, tool_task: TaskRecord) -> Compensator | str | None:
        """How ``parent`` undoes the call of ``tool_task``: by the compensating tool frozen
        in its input at dispatch (``brain.dispatch``: this Brain need not have read the
        declaration), else by its kind's word (a function stays code), else, for a call
        dispatched before undos were frozen, by the tool's declaration as this Brain knows."""
        frozen = tool_task.input.get(COMPENSATE)
        if isinstance(frozen, str):
            return frozen
        tool = str(tool_task.input["tool"])
        kind: TaskKind | None = self.edits.kind(parent)
        if kind is not None and tool in kind.compensations:
            return kind.compensations[tool]
        declared = self.edits.tools.known.get(tool)
        return declared.compensate if declared is not None else None

    def ended(self, draft: Draft, task: TaskRecord) -> None:
        """``task`` ended: a succeeded call records its effect under the task that made
        it; a task that succeeded hands its effects to its parent (a root drops them)."""
        if task.outcome != "succeeded":
            return
        parent = self.edits.rows.get(task.parent_id or "")
        if task.kind == TOOL_KIND:
            if parent is None or compensating(parent):
                return  # an undo's own success is folded in by its compensating parent
            compensator = self.compensator(parent, task)
            effect = effect_of(task, (task.result or {}).get("result"), compensator)
            if effect is not None:
                body = self._body()
                body["tasks"].setdefault(parent.id, []).append(effect)
                self._put(draft, body)
            return
        if self._effects(task.id):
            body = self._body()
            moved = body["tasks"].pop(task.id)
            if parent is not None:
                body["tasks"].setdefault(parent.id, []).extend(moved)
            self._put(draft, body)

    def before_end(self, draft: Draft, task: TaskRecord, action: Settle) -> Settle | None:
        """``task`` is to end failed or cancelled as ``action`` says: dispatch its next undo
        and return None (it is compensating), or return how it ends."""
        effects = self._effects(task.id)
        if not effects:
            return action
        effects, step = next_compensation(effects, self.edits.rows)
        body = self._body()
        if isinstance(step, Undo) and self._undeclared(effects[step.index], step.call.tool):
            body["tasks"][task.id] = effects
            self._put(draft, body)
            self.edits.update(draft, task, **hold_changes(action, time.time()))
            return None
        if isinstance(step, Undo):
            undo_task = dispatch(self.edits, draft, task, step.call)
            effects[step.index]["by"] = undo_task
            body["tasks"][task.id] = effects
            self._put(draft, body)
            if not compensating(task):
                log.info(
                    "compensating",
                    extra={"event": "compensating", "task_id": task.id, "effects": len(effects)},
                )
            self.edits.update(draft, task, **start_changes(action, undo_task))
            return None
        del body["tasks"][task.id]
        if step.failed:
            body["requires_action"][task.id] = step.record
            log.warning(
                "compensation failed: requires action",
                extra={"event": "requires_action", "task_id": task.id, "record": step.record},
            )
        self._put(draft, body)
        self.edits.append_entry(draft, COMPENSATION_ENTRY, {"task_id": task.id, **step.record})
        return dataclasses.replace(action, error=with_compensation(action.error, step.record))
