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
compensation's record.

An undo that failed (or that could not be derived) stops the chain: the effects before it
may depend on it staying in place. The task then waits, durably, for an operator: its
record (which effect, why, which effects are still not undone) goes into the document's
``requires_action``, the task waits for its own signal (``compensation_signal``) and the
session needs action. The operator's act is that signal, naming the failure it is for
(``compensation_ref``): ``retry`` runs the failed undo again under a new operation id (the
first run may have had an effect its tool's policy governs, so it is never re-used) and the
chain goes on; ``abandon`` ends the task as it would have ended, the record and the
operator's reason in its error, the effects left undone listed there. An act naming another
failure is used up and the task waits on.

The decisions are pure functions over plain data (``brain.compensation_rules``, tested
directly); ``Compensations`` carries them out on a pass's rows (``brain.edits``), as
``brain.dispatch`` does for a call.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

from brainhands.brain.compensation_rules import (
    Effect,
    Stuck,
    Undo,
    Undone,
    compensating,
    effect_of,
    hold_changes,
    next_compensation,
    operator_act,
    requires_action,
    start_changes,
    undo_operation_id,
    wait_changes,
    with_compensation,
)
from brainhands.brain.decide import COMPENSATE, COMPENSATING, TOOL_KIND, Settle
from brainhands.brain.dispatch import dispatch
from brainhands.brain.registry import Compensator, TaskKind
from brainhands.shared.store import Draft, TaskRecord
from brainhands.shared.vocabulary import EFFECTS_DOCUMENT, compensation_ref

if TYPE_CHECKING:
    from brainhands.brain.edits import SessionEdits

__all__ = [
    "COMPENSATING",
    "COMPENSATION_ENTRY",
    "EFFECTS_DOCUMENT",
    "Compensations",
    "Effect",
    "Stuck",
    "Undo",
    "Undone",
    "effect_of",
    "next_compensation",
    "operator_act",
    "requires_action",
    "undo_operation_id",
    "with_compensation",
]

log = logging.getLogger("brainhands.brain")
_READS: set[asyncio.Future[None]] = set()
"""Declaration reads started for undos, kept until done (the loop keeps tasks weakly)."""

UNDECLARED_GRACE = 30.0
"""Seconds an undo waits for its tool to be declared; then it is dispatched, and fails as
a call of an unknown tool (an operator's to deal with)."""
COMPENSATION_ENTRY = "compensation"
"""The kind of the session entry that records how a compensation ended."""


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
        self.edits.documents[EFFECTS_DOCUMENT] = draft.put_document(
            EFFECTS_DOCUMENT, body, expected_version=version, previous=current
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
        effects, step = next_compensation(effects, self.edits.rows, operator_act(task))
        body = self._body()
        body["tasks"][task.id] = effects
        if isinstance(step, Stuck):
            self._wait(draft, task, action, body, step.record)
            return None
        body["requires_action"].pop(task.id, None)
        if isinstance(step, Undo) and self._undeclared(effects[step.index], step.call.tool):
            self._put(draft, body)
            self.edits.update(draft, task, **hold_changes(action, time.time()))
            return None
        if isinstance(step, Undo):
            undo_task = dispatch(self.edits, draft, task, step.call)
            effects[step.index]["by"] = undo_task
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
            log.warning(
                "compensation abandoned",
                extra={
                    "event": "compensation_abandoned",
                    "task_id": task.id,
                    "record": step.record,
                },
            )
        self._put(draft, body)
        self.edits.append_entry(draft, COMPENSATION_ENTRY, {"task_id": task.id, **step.record})
        return dataclasses.replace(action, error=with_compensation(action.error, step.record))

    def _wait(
        self, draft: Draft, task: TaskRecord, action: Settle, body: dict[str, Any], record: Any
    ) -> None:
        """An undo of ``task`` failed: it waits for an operator's act, the ``record`` kept
        in ``requires_action`` (the one it waited with already, when an act for another
        failure came: that act is used up)."""
        known = body["requires_action"].get(task.id)
        if known is None or compensation_ref(known) != compensation_ref(record):
            body["requires_action"][task.id] = {**record, "since": time.time()}
            log.warning(
                "compensation failed: requires action",
                extra={"event": "requires_action", "task_id": task.id, "record": record},
            )
            self.edits.append_entry(draft, COMPENSATION_ENTRY, {"task_id": task.id, **record})
        else:
            log.info(
                "an act on another failed undo does nothing",
                extra={"event": "stale_compensation_act", "task_id": task.id},
            )
        self._put(draft, body)
        self.edits.update(draft, task, **wait_changes(action, task.id))
        self.edits.wait_entered = True  # an act sent already is read in this pass
