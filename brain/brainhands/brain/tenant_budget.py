"""Tenant budgets, as a Brain keeps them: what all the runs of a tenant's sessions may
spend together, counted where it is spent and checked where a run's own budget is.

An operator sets a tenant's budget (``client.budgets``): limits on model tokens, model cost
and tool calls, over everything the tenant's runs spend from when it was first set, until
an operator raises it. There is no period (a day, a month) after which it starts again: a
run stopped at a period's end would then go on by itself, with no one acting, and a stop
that lifts itself is no stop that needs action.

What is counted, and when: each model answer's usage (its tokens and cost at the agent's
``price``, a resent call's and a compaction's included, as the run's ``Spend`` counts
them) and each tool call dispatched, added to the tenant's usage in the commit that
records the answer or the dispatch (``store.tenant_budgets``), so a kill never loses nor
doubles a count. Only tenants with a budget are counted: a Brain reads which tenants have
one at most every ``REFRESH`` seconds, and the sessions of the others pay nothing, neither
a write nor a read. So counting starts up to ``REFRESH`` seconds after a budget is first
set.

Checked at a run's two durable boundaries (before a model call, before a tool dispatch),
with one read of the tenant's limits and usage: a run whose tenant has reached its budget
stops there as a run over its own does (``brain.budget``), the stop scoped ``tenant``, and
its session shows ``budget_exhausted``. A check is a read, not a lock: runs that passed
their boundary before the usage reached a limit go on. So a tenant overshoots its token or
cost limit by at most what the answers being asked at that moment spend (one turn per
running session of the tenant, its compaction included), and its tool-call limit by at most
the calls of the dispatches committed between another session's read and its own commit
(each at most its agent's ``max_tool_calls``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from brainhands.brain.budget import Spend, limit_reached
from brainhands.brain.task import PhaseContext, WaitSignal
from brainhands.shared.store import Store, TenantCharge
from brainhands.shared.tenancy import split_key

REFRESH = 5.0
"""Seconds a Brain keeps its list of the tenants that have a budget."""


class TenantBudgets:
    """The tenants' budgets as one Brain enforces them: which tenants have one (read from
    the store at most once per ``refresh`` seconds), their charges, their checks."""

    def __init__(self, store: Store, refresh: float = REFRESH) -> None:
        self.store = store
        self.refresh = refresh
        self._tenants: frozenset[str] = frozenset()
        self._read_at = -float("inf")
        self._reading = asyncio.Lock()

    async def budgeted(self, session_id: str) -> str | None:
        """The tenant of ``session_id`` if it has a budget (None: it has none)."""
        if time.monotonic() - self._read_at >= self.refresh:
            async with self._reading:  # one read for every pass that found the list old
                if time.monotonic() - self._read_at >= self.refresh:
                    self._tenants = await self.store.tenant_budgets.tenants()
                    self._read_at = time.monotonic()
        tenant = split_key(session_id)[0]
        return tenant if tenant in self._tenants else None

    async def charge(self, ctx: PhaseContext, charge: TenantCharge) -> None:
        """Count ``charge`` in the commit of ``ctx``'s phase, if its tenant has a budget."""
        if await self.budgeted(ctx.session_id) is not None:
            ctx.charge_tenant(charge)

    async def stop(
        self,
        ctx: PhaseContext,
        spend: Spend,
        *,
        then: str,
        state: dict[str, object],
        dispatching: int = 0,
        pending: TenantCharge | None = None,
    ) -> WaitSignal | None:
        """The run's stop at its tenant's budget, if the tenant has reached it, checked
        before a model call (``dispatching`` 0) or before dispatching that many tool calls;
        None: it goes on. ``pending``: what the phase charged already (the answer its
        commit records), counted as spent."""
        tenant = await self.budgeted(ctx.session_id)
        budget = None if tenant is None else await self.store.tenant_budgets.get(tenant)
        if budget is None:
            return None
        if pending is not None:
            used = {
                "tokens": budget.used["tokens"] + pending.tokens,
                "cost": budget.used["cost"] + pending.cost,
                "tool_calls": budget.used["tool_calls"] + pending.tool_calls,
            }
            budget = dataclasses.replace(budget, used=used)
        spent = {"tokens": budget.used["tokens"], "cost": budget.used["cost"]}
        limit = limit_reached(budget.limits, spent, budget.used["tool_calls"], dispatching)
        if limit is None:
            return None
        return spend.stop(limit, then=then, state=state, now=ctx.now, tenant=budget)
