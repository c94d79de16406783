"""A draft's tenant charge (``Draft.charge``) as its commit adds it to the tenant's usage.

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

import zlib
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Update, bindparam, update
from sqlalchemy.engine import Connection

from brainhands.shared.store import schema
from brainhands.shared.store.draft import Draft, TenantCharge
from brainhands.shared.store.hot import hot, run
from brainhands.shared.tenancy import split_key

SHARDS = 16
"""Usage rows per tenant with a budget."""

_u = schema.tenant_usage


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
