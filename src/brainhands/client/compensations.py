"""Compensations as a client sees them: where an undo failed and the task waits for an
operator, and the operator's act on it.

A task whose undo failed (``brain.compensation``) waits, durably, for its own signal
(``compensation_signal``), the failure's record in the effects document's
``requires_action``: the session shows ``requires_action`` and needs action. The act is
that signal, put in the session's inbox with the session's wake-up, naming the failure it is
for: ``retry`` runs the failed undo again under a new operation id and the compensation goes
on; ``abandon`` ends the task failed, the record and the reason in its error. Each act is
kept with who sent it, when and why; the same ``action_id`` twice is one act; an act is
refused (``DecisionRefused``) while the task is not waiting for one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from brainhands.shared.errors import DecisionRefused, InvalidRequest
from brainhands.shared.store import (
    DocumentRecord,
    InboxReceipt,
    InboxRecord,
    OutboxMessage,
    Store,
    TaskRecord,
)
from brainhands.shared.vocabulary import (
    COMPENSATION_ACTIONS,
    EFFECTS_DOCUMENT,
    CompensationAction,
    compensation_ref,
    compensation_signal,
    signal_key,
)


@dataclass(frozen=True)
class CompensationStop:
    """A task whose undo failed, waiting for an operator's ``retry`` or ``abandon``."""

    task_id: str
    """The task that waits (the one whose effects are being undone)."""
    failed: dict[str, Any]
    """The effect whose undo failed: ``task_id`` (of its call), ``operation_id``, ``tool``,
    ``undo_task`` (the undo's tool task; None when no undo could be derived)."""
    error: Any
    """Why: the undo's error, or why no undo could be derived."""
    compensated: list[dict[str, Any]]
    """The effects undone already, the most recent first."""
    not_compensated: list[dict[str, Any]]
    """The effects before the failed one, left as they are until the undo succeeds."""
    attempt: int
    """How many times operators had the failed undo run again before."""
    retryable: bool
    """Whether there is an undo to run again (False: only ``abandon`` ends it)."""
    since: float | None


def compensation_stops_of(
    tasks: Iterable[TaskRecord], documents: Mapping[str, DocumentRecord]
) -> list[CompensationStop]:
    """The tasks among a session's ``tasks`` waiting for an operator's act on a failed undo,
    with the records its ``documents`` keep."""
    doc = documents.get(EFFECTS_DOCUMENT)
    records = doc.body.get("requires_action", {}) if doc and isinstance(doc.body, dict) else {}
    stops = []
    for task in tasks:
        record = records.get(task.id)
        if task.status != "waiting" or task.wait_signal != compensation_signal(task.id):
            continue
        if record is not None:
            stops.append(
                CompensationStop(
                    task.id,
                    record["failed"],
                    record.get("error"),
                    record.get("compensated", []),
                    record.get("not_compensated", []),
                    record.get("attempt", 0),
                    bool(record.get("retryable", True)),
                    record.get("since"),
                )
            )
    return stops


async def act_on_compensation(
    store: Store,
    session_id: str,
    task_id: str,
    action: CompensationAction,
    reason: str,
    wake: Callable[[str], OutboxMessage] | None,
    principal: str,
    action_id: str | None = None,
) -> InboxReceipt:
    """Send ``action`` on the failed undo task ``task_id`` of the session of store key
    ``session_id`` waits with, naming that failure, recorded as ``principal``'s with
    ``reason``, with the session's wake-up (``wake``; None: the caller runs the session).
    The same ``action_id`` twice is one act (sent again once the task went on, it is
    answered as sent before). ``InvalidRequest`` for an action that is neither ``retry``
    nor ``abandon``, or no reason; ``DecisionRefused`` when the task is not waiting for an
    act, or for a retry of an effect that has no undo to run."""
    if action not in COMPENSATION_ACTIONS:
        raise InvalidRequest(f"a compensation's action is one of {COMPENSATION_ACTIONS}")
    if not reason:
        raise InvalidRequest("an act on a compensation says why (reason)")
    state = await store.load(session_id)
    stop = next(
        (
            s
            for s in compensation_stops_of(state.open_tasks, state.documents)
            if s.task_id == task_id
        ),
        None,
    )
    if stop is None:
        earlier = await _act_sent(store, session_id, task_id, action_id)
        if earlier is not None:
            return InboxReceipt(earlier, created=False)
        raise DecisionRefused(
            f"task {task_id} of this session is not waiting for a compensation act"
        )
    if action == "retry" and not stop.retryable:
        raise DecisionRefused("the failed effect has no undo to run again: abandon it")
    record = {"failed": stop.failed, "attempt": stop.attempt}
    payload = {
        "action": action,
        "reason": reason,
        "ref": compensation_ref(record),
        "by": principal,
        "at": time.time(),
    }
    return await store.inbox.send_signal(
        session_id=session_id,
        name=compensation_signal(task_id),
        signal_id=action_id or uuid.uuid4().hex,
        payload=payload,
        wake=wake,
        sender=principal,
    )


async def _act_sent(
    store: Store, session_id: str, task_id: str, action_id: str | None
) -> InboxRecord | None:
    """The act sent on task ``task_id``'s compensation under ``action_id`` before, if any."""
    if action_id is None:
        return None
    sent = await store.inbox.of_session(session_id)
    name = compensation_signal(task_id)
    return next((r for r in sent if r.name == name and r.key == signal_key(name, action_id)), None)
