"""Budgets as a client sees them: where a run stopped at its budget, what a session has
spent, and raising a budget so the run goes on.

A run over its budget waits, durably, for the signal ``BUDGET_SIGNAL`` (``brain.budget``),
the reason in its state (``BUDGET_STOP``). A raise is that signal, put in the session's
inbox with the session's wake-up: the run resumes under the raised limits, or, if they
still do not cover what it has spent, stops again. A raise sent while no run is stopped is
kept, and applied at the next stop.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from brainhands.shared.errors import InvalidRequest
from brainhands.shared.store import EntryRecord, InboxReceipt, OutboxMessage, Store, TaskRecord
from brainhands.shared.vocabulary import BUDGET_SIGNAL, BUDGET_STOP, check_budget


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
    ``model_calls``, ``tool_calls``."""
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
    """What a session's model answers spent, added up from the usage each ``model`` entry
    was recorded with (answers recorded before budgets count none)."""
    total: dict[str, float] = {}
    for entry in entries:
        usage = entry.body.get("usage") if entry.kind == "model" else None
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
    wake: Callable[[str], OutboxMessage],
    principal: str,
    raise_id: str | None = None,
) -> InboxReceipt:
    """Send the raise of ``limits`` (the new values of the limits it names) to the session
    of store key ``session_id``, recorded as made by ``principal``; the same ``raise_id``
    twice is one raise. ``InvalidRequest`` for limits that are no budget, or none."""
    checked = check_budget(limits)
    if not checked:
        raise InvalidRequest("a raise names at least one limit")
    payload = {"budget": checked, "by": principal, "at": time.time()}
    return await store.inbox.send_signal(
        session_id=session_id,
        name=BUDGET_SIGNAL,
        signal_id=raise_id or uuid.uuid4().hex,
        payload=payload,
        wake=wake,
        sender=principal,
    )
