"""Tenant budgets as the store keeps them: an operator's limits on what a tenant's sessions
spend, and what they have spent since the budget was first set.

The usage is kept in ``SHARDS`` rows per tenant, made when the budget is first set, and
added to by the commits that spend (``charges``); a read adds the rows up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, func, select, tuple_

from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend
from brainhands.shared.store.charges import SHARDS
from brainhands.shared.store.load import task_record
from brainhands.shared.store.records import TaskRecord
from brainhands.shared.vocabulary import BUDGET_SIGNAL

_b, _u = schema.tenant_budget, schema.tenant_usage


@dataclass(frozen=True)
class TenantBudget:
    """A tenant's budget and what its sessions have spent since it was first set."""

    tenant: str
    limits: dict[str, float]
    used: dict[str, float]
    """``tokens``, ``cost`` and ``tool_calls``, added up over the tenant's usage rows."""
    set_by: str
    created_at: float
    updated_at: float


class TenantBudgets:
    """The tenants' budgets, reached as ``store.tenant_budgets``."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def set(self, tenant: str, limits: dict[str, float], *, by: str) -> TenantBudget:
        """Make ``limits`` (checked by the caller) ``tenant``'s budget, replacing the one it
        had; its usage is kept (it starts at nothing when the budget is first set)."""
        now = time.time()
        insert = self._backend.insert
        budget = insert(_b).values(
            tenant=tenant, limits=limits, set_by=by, created_at=now, updated_at=now
        )
        budget = budget.on_conflict_do_update(
            index_elements=[_b.c.tenant],
            set_={"limits": limits, "set_by": by, "updated_at": now},
        )
        shards = insert(_u).values([{"tenant": tenant, "shard": s} for s in range(SHARDS)])
        async with self._backend.transaction() as conn:
            await conn.execute(budget)
            await conn.execute(shards.on_conflict_do_nothing())
        found = await self.get(tenant)
        assert found is not None, "set in the transaction just committed"
        return found

    async def get(self, tenant: str) -> TenantBudget | None:
        """``tenant``'s budget and what it has spent, in one snapshot (None: no budget)."""
        spent = select(
            func.coalesce(func.sum(_u.c.tokens), 0),
            func.coalesce(func.sum(_u.c.cost), 0.0),
            func.coalesce(func.sum(_u.c.tool_calls), 0),
        ).where(_u.c.tenant == tenant)
        async with self._backend.snapshot() as conn:
            row = (await conn.execute(select(_b).where(_b.c.tenant == tenant))).one_or_none()
            if row is None:
                return None
            totals: Any = (await conn.execute(spent)).one()
        tokens, cost, calls = totals
        used = {"tokens": int(tokens), "cost": float(cost), "tool_calls": int(calls)}
        return TenantBudget(
            tenant, dict(row.limits), used, row.set_by, row.created_at, row.updated_at
        )

    async def tenants(self) -> frozenset[str]:
        """The tenants that have a budget."""
        async with self._backend.snapshot() as conn:
            return frozenset((await conn.execute(select(_b.c.tenant))).scalars())

    async def stopped(
        self, tenant: str, *, after: tuple[str, str] | None = None, limit: int = 100
    ) -> list[TaskRecord]:
        """A page of the tasks of ``tenant``'s sessions waiting for ``BUDGET_SIGNAL`` (at
        their run's budget or at the tenant's), by session and id, after ``after`` (the
        session and id of the last task of the page before)."""
        t, s = schema.task, schema.session
        query = select(t).where(
            t.c.status == "waiting",
            t.c.wait_signal == BUDGET_SIGNAL,
            exists().where(s.c.id == t.c.session_id, s.c.tenant == tenant),
        )
        if after is not None:
            query = query.where(tuple_(t.c.session_id, t.c.id) > tuple_(*after))
        query = query.order_by(t.c.session_id, t.c.id).limit(limit)
        async with self._backend.snapshot() as conn:
            return [task_record(row) for row in await conn.execute(query)]
