"""Budgets as a client sees them: where a run stopped at its budget, what a session has
spent, and raising a budget so the run goes on.

A run over its budget waits, durably, for the signal ``BUDGET_SIGNAL`` (``brain.budget``),
the reason in its state (``BUDGET_STOP``). A raise is that signal, put in the session's
inbox with the session's wake-up, naming the stop it lifts: the run resumes under the
raised limits, or, if they still do not cover what it has spent, stops again. A raise is
refused while no run of the session is stopped (``DecisionRefused``), and one that reaches
a later stop than the one it named lifts nothing: a raise is never kept for another stop.

A tenant's budget (``brain.tenant_budget``) is set by an operator (``set_tenant_budget``),
never by the tenant: setting it again, higher, raises it, and sends each of the tenant's
runs stopped at it the budget signal naming its stop, a page at a time. A run stopped at
its tenant's budget is not lifted by a raise of its own (refused: ``DecisionRefused``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
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
    TenantBudget,
)
from brainhands.shared.tenancy import check_tenant
from brainhands.shared.vocabulary import (
    BUDGET_SIGNAL,
    BUDGET_STOP,
    HOSTED_MODEL_KIND,
    TENANT_SCOPE,
    budget_stop_ref,
    check_budget,
    check_tenant_budget,
    signal_key,
)

RESUME_PAGE = 100
"""Stopped runs a tenant's raise reads, and sends their signals, at a time."""

Wake = Callable[[str], OutboxMessage]
"""A session's wake-up, given its compatibility key."""


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
    scope: str = "run"
    """``run``: the run's own budget; ``tenant``: its tenant's (``budget`` and ``used``
    are the tenant's), which only an operator's raise of the tenant's budget lifts."""


def budget_stop_of(tasks: Iterable[TaskRecord]) -> BudgetStop | None:
    """The stop among a session's ``tasks`` (None: its runs are within their budgets)."""
    for task in tasks:
        state = task.state if isinstance(task.state, dict) else {}
        why = state.get(BUDGET_STOP)
        if task.status == "waiting" and task.wait_signal == BUDGET_SIGNAL and why:
            scope = why.get("scope", "run")
            return BudgetStop(task.id, why["limit"], why["budget"], why["used"], why["at"], scope)
    return None


def session_usage(entries: Iterable[EntryRecord]) -> dict[str, float]:
    """What a session's model calls spent, added up from the usage each ``model`` entry (a
    hosted agent's ``hosted_model`` too) was recorded with, and each checkpoint whose
    summary a model wrote (answers recorded before budgets count none)."""
    total: dict[str, float] = {}
    for entry in entries:
        counted = entry.kind in ("model", HOSTED_MODEL_KIND, CHECKPOINT_KIND)
        usage = entry.body.get("usage") if counted else None
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
    if stop.scope == TENANT_SCOPE:
        raise DecisionRefused(
            "the session's run is stopped at its tenant's budget: an operator raises that"
        )
    payload = {"budget": checked, "stop": budget_stop_ref(stop.task_id, stop.since)}
    return await _send_raise(
        store, session_id, raise_id or uuid.uuid4().hex, payload, wake, principal
    )


async def _send_raise(
    store: Store,
    session_id: str,
    raise_id: str,
    payload: dict[str, Any],
    wake: Wake | None,
    principal: str,
) -> InboxReceipt:
    """Send the budget signal ``payload`` (the raise and the stop it names) to the session
    of store key ``session_id`` under ``raise_id``, recorded as made by ``principal`` now."""
    return await store.inbox.send_signal(
        session_id=session_id,
        name=BUDGET_SIGNAL,
        signal_id=raise_id,
        payload={**payload, "by": principal, "at": time.time()},
        wake=wake,
        sender=principal,
    )


async def _raise_sent(store: Store, session_id: str, raise_id: str | None) -> InboxRecord | None:
    """The raise sent to the session under ``raise_id`` before, if any."""
    if raise_id is None:
        return None
    sent, key = await store.inbox.of_session(session_id), signal_key(BUDGET_SIGNAL, raise_id)
    return next((r for r in sent if r.name == BUDGET_SIGNAL and r.key == key), None)


@dataclass(frozen=True)
class TenantBudgetSet:
    """A tenant's budget as an operator set it, and the stopped runs sent the raise."""

    budget: TenantBudget
    resumed: int
    """The tenant's runs stopped at its budget that were sent the raise (each once)."""


async def set_tenant_budget(
    store: Store,
    tenant: str,
    limits: dict[str, Any],
    wake: Callable[[str], Wake] | None,
    principal: str,
) -> TenantBudgetSet:
    """Make ``limits`` ``tenant``'s budget (replacing the one it had; what it has spent is
    kept), as ``principal`` (an operator) sets it, then send each of its runs stopped at its
    budget the budget signal naming its stop, with its session's wake-up (``wake(key)``;
    None: the caller runs the sessions). A run still over the new budget stops again.
    ``InvalidRequest`` for a tenant name or limits that are no tenant's budget, or none."""
    check_tenant(tenant)
    checked = check_tenant_budget(limits)
    if not checked:
        raise InvalidRequest("a tenant's budget names at least one limit")
    budget = await store.tenant_budgets.set(tenant, checked, by=principal)
    resumed, after = 0, None
    while True:
        page = await store.tenant_budgets.stopped(tenant, after=after, limit=RESUME_PAGE)
        sends = [
            _lift(store, task, checked, wake, principal)
            for task in page
            if task.state[BUDGET_STOP].get("scope") == TENANT_SCOPE
        ]
        resumed += sum(await asyncio.gather(*sends))
        if len(page) < RESUME_PAGE:
            return TenantBudgetSet(budget, resumed)
        after = (page[-1].session_id, page[-1].id)


async def _lift(
    store: Store,
    task: TaskRecord,
    limits: dict[str, float],
    wake: Callable[[str], Wake] | None,
    principal: str,
) -> bool:
    """Send ``task``, stopped at its tenant's budget, the raise naming its stop; its id is
    the stop's, so a second raise before the run goes on sends nothing more."""
    stop = budget_stop_ref(task.id, task.state[BUDGET_STOP]["at"])
    digest = hashlib.sha256(json.dumps(stop, sort_keys=True).encode()).hexdigest()[:32]
    payload = {"tenant_budget": limits, "stop": stop}
    woken = wake(task.session_id) if wake is not None else None
    receipt = await _send_raise(
        store, task.session_id, f"tenant-{digest}", payload, woken, principal
    )
    return receipt.created
