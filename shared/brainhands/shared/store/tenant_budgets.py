"""Tenant budgets as the store keeps them: an operator's limits on what a tenant's sessions
spend, and what they have spent since the budget was first set.

A tenant's usage is kept in ``SHARDS`` rows: a commit that spends (a draft's ``charge``)
adds to the row of its session's shard (``shard_of``), in its own transaction, and a read
adds the rows up. So the commits of a tenant's many sessions seldom wait for one another's
lock, where one row would make every commit of the tenant queue behind the last. The rows
are made when the budget is first set: a charge for a tenant without them (no budget, or a
Brain that has not heard of it yet) updates no row and counts nothing.

A draft committed alone adds its charge in its own statements. In a group commit the
charges are added last, summed per row and in row order: two transactions that both add
to two rows lock them in the same order, and never wait for each other in a circle.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Update, bindparam, exists, func, select, tuple_, update
from sqlalchemy.engine import Connection

from brainhands.shared.store import schema
from brainhands.shared.store.draft import Draft, TenantCharge
from brainhands.shared.store.hot import hot, run
from brainhands.shared.store.load import task_record
from brainhands.shared.store.records import TaskRecord
from brainhands.shared.tenancy import split_key
from brainhands.shared.vocabulary import BUDGET_SIGNAL

if TYPE_CHECKING:
    from brainhands.shared.store.store import Store

SHARDS = 16
"""Usage rows per tenant with a budget."""

_b, _u = schema.tenant_budget, schema.tenant_usage


def adding(prefix: str = "") -> Update:
    """The ``UPDATE`` that adds a charge to one usage row (bound as ``charge_params``)."""

    def bound(name: str) -> Any:
        return bindparam(f"{prefix}v_{name}", type_=_u.c[name].type)

    return (
        update(_u)
        .where(_u.c.tenant == bindparam(f"{prefix}w_tenant"))
        .where(_u.c.shard == bindparam(f"{prefix}w_shard"))
        .values({_u.c[n]: _u.c[n] + bound(n) for n in ("tokens", "cost", "tool_calls")})
    )


_ADD = hot(adding())


def shard_of(session_id: str) -> int:
    """The usage row of its tenant that the session's commits add to (the same in every
    process: a CRC, not Python's salted ``hash``)."""
    return zlib.crc32(session_id.encode()) % SHARDS


def charge_params(session_id: str, charge: TenantCharge, prefix: str = "") -> dict[str, Any]:
    """The bound values (names starting ``prefix``) of the addition of ``charge`` to the
    usage row of ``session_id``."""
    return _added(split_key(session_id)[0], shard_of(session_id), charge, prefix)


def _added(tenant: str, shard: int, charge: TenantCharge, prefix: str = "") -> dict[str, Any]:
    return {
        f"{prefix}w_tenant": tenant,
        f"{prefix}w_shard": shard,
        f"{prefix}v_tokens": charge.tokens,
        f"{prefix}v_cost": charge.cost,
        f"{prefix}v_tool_calls": charge.tool_calls,
    }


def add_charges_sync(conn: Connection, drafts: Sequence[Draft]) -> None:
    """Add the charges of ``drafts`` (each written already, in the caller's transaction) to
    their tenants' usage: summed per row, in row order."""
    rows: dict[tuple[str, int], TenantCharge] = {}
    for draft in drafts:
        if draft.charge is not None:
            key = (split_key(draft.session_id)[0], shard_of(draft.session_id))
            rows[key] = rows.get(key, TenantCharge()) + draft.charge
    if rows:
        run(conn, _ADD, [_added(t, s, charge) for (t, s), charge in sorted(rows.items())])


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

    def __init__(self, store: Store) -> None:
        self._store = store

    async def set(self, tenant: str, limits: dict[str, float], *, by: str) -> TenantBudget:
        """Make ``limits`` (checked by the caller) ``tenant``'s budget, replacing the one it
        had; its usage is kept (it starts at nothing when the budget is first set)."""
        now = time.time()
        insert = self._store.backend.insert
        budget = insert(_b).values(
            tenant=tenant, limits=limits, set_by=by, created_at=now, updated_at=now
        )
        budget = budget.on_conflict_do_update(
            index_elements=[_b.c.tenant],
            set_={"limits": limits, "set_by": by, "updated_at": now},
        )
        shards = insert(_u).values([{"tenant": tenant, "shard": s} for s in range(SHARDS)])
        async with self._store.backend.transaction() as conn:
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
        async with self._store.backend.snapshot() as conn:
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
        async with self._store.backend.snapshot() as conn:
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
        async with self._store.backend.snapshot() as conn:
            return [task_record(row) for row in await conn.execute(query)]
