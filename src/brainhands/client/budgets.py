"""Budgets as a client sees them: where a run stopped at its budget, what a session has
spent, and raising a budget so the run goes on.

A run over its budget waits, durably, for the signal ``BUDGET_SIGNAL`` (``brain.budget``),
the reason in its state (``BUDGET_STOP``). A raise is that signal, put in the session's
inbox with the session's wake-up, naming the stop it lifts: the run resumes under the
raised limits, or, if they still do not cover what it has spent, stops again. A raise is
refused while no run of the session is stopped (``DecisionRefused``), and one that reaches
a later stop than the one it named lifts nothing: a raise is never kept for another stop.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from brainhands.shared.errors import DecisionRefused, InvalidRequest
from brainhands.shared.store import (
    CHECKPOINT_KIND,
    EntryRecord,
    InboxReceipt,
    InboxRecord,
    OutboxMessage,
    Store,
    TaskRecord,
)
from brainhands.shared.vocabulary import BUDGET_SIGNAL, BUDGET_STOP, budget_stop_ref, check_budget


@dataclass(frozen=True)
class BudgetStop:
    """A run of a session's agent stopped at its budget: the session is
    ``budget_exhausted`` until its budget is raised."""

    task_id: str
    """The task that waits for the raise."""
    limit: str
    """What was reached: ``tokens``, ``cost``, ``tool_calls`` or ``seconds``."""
    budget: dict[str, float]
    """The run's limits when it stopped."""
    used: dict[str, Any]
    """What the run had spent: ``input_tokens``, ``output_tokens``, ``tokens``, ``cost``,
    ``model_calls``, ``tool_calls``, ``resent`` (model calls sent again after a kill)."""
    since: float


def budget_stop_of(tasks: Iterable[TaskRecord]) -> BudgetStop | None:
    """The stop among a session's ``tasks`` (None: its runs are within their budgets)."""
    for task in tasks:
        state = task.state if isinstance(task.state, dict) else {}
        why = state.get(BUDGET_STOP)
        if task.status == "waiting" and task.wait_signal == BUDGET_SIGNAL and why:
            return BudgetStop(task.id, why["limit"], why["budget"], why["used"], why["at"])
    return None


def session_usage(entries: Iterable[EntryRecord]) -> dict[str, float]:
    """What a session's model calls spent, added up from the usage each ``model`` entry was
    recorded with, and each checkpoint whose summary a model wrote (answers recorded before
    budgets count none)."""
    total: dict[str, float] = {}
    for entry in entries:
        usage = entry.body.get("usage") if entry.kind in ("model", CHECKPOINT_KIND) else None
        for name, value in (usage or {}).items():
            total[name] = total.get(name, 0) + value
    return total


def with_budget(payload: dict[str, Any], budget: dict[str, Any] | None) -> dict[str, Any]:
    """A submission's ``payload`` carrying ``budget`` (checked), the limits of the agent's
    run it starts; ``InvalidRequest`` when the payload names no agent, which has no run to
    limit."""
    if budget is None:
        return payload
    if "agent" not in payload:
        raise InvalidRequest("a budget limits an agent's run: name the agent")
    return {**payload, "budget": check_budget(budget)}


async def raise_budget(
    store: Store,
    session_id: str,
    limits: dict[str, Any],
    wake: Callable[[str], OutboxMessage] | None,
    principal: str,
    raise_id: str | None = None,
) -> InboxReceipt:
    """Send the raise of ``limits`` (the new values of the limits it names) to the run of
    the session of store key ``session_id`` stopped at its budget, naming that stop,
    recorded as made by ``principal``, with the session's wake-up (``wake``; None: the
    caller runs the session). The same ``raise_id`` twice is one raise (sent again once the
    run went on, it is answered as sent before). ``InvalidRequest`` for limits that are no
    budget, or none; ``DecisionRefused`` when no run of the session is stopped at its
    budget."""
    checked = check_budget(limits)
    if not checked:
        raise InvalidRequest("a raise names at least one limit")
    stop = budget_stop_of((await store.load(session_id)).open_tasks)
    if stop is None:
        earlier = await _raise_sent(store, session_id, raise_id)
        if earlier is not None:
            return InboxReceipt(earlier, created=False)
        raise DecisionRefused("no run of this session is stopped at its budget")
    payload = {
        "budget": checked,
        "stop": budget_stop_ref(stop.task_id, stop.since),
        "by": principal,
        "at": time.time(),
    }
    return await store.inbox.send_signal(
        session_id=session_id,
        name=BUDGET_SIGNAL,
        signal_id=raise_id or uuid.uuid4().hex,
        payload=payload,
        wake=wake,
        sender=principal,
    )


async def _raise_sent(store: Store, session_id: str, raise_id: str | None) -> InboxRecord | None:
    """The raise sent to the session under ``raise_id`` before, if any."""
    if raise_id is None:
        return None
    sent = await store.inbox.of_session(session_id)
    return next((r for r in sent if r.name == BUDGET_SIGNAL and r.key == raise_id), None)
