"""Declarations: what the Hands serving each tool say of it, read by processes that do not
import tool code (the Brain, through a ``ToolCatalog``; the CLI's ``brainhands tools``);
and the agents each Brain build serves, read by the API, which runs none.

A Hands process declares its pool's tools when it starts, before it consumes: one upsert
per tool, keyed by name, that only writes when the declaration changed (its digest), so a
restart of the same build writes nothing. A tool declared differently by two builds of one
pool keeps the newest declaration, and the change is logged by the declaring process.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from sqlalchemy import select

from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend
from brainhands.shared.tools import ToolDeclaration

_t = schema.tool_declaration


class Declarations:
    """The tools and agents declared, reached as ``store.declarations``."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def declare_tools(self, declarations: Iterable[ToolDeclaration]) -> list[str]:
        """Record ``declarations``; returns the names whose stored declaration changed."""
        now = time.time()
        changed: list[str] = []
        async with self._backend.transaction() as conn:
            rows = await conn.execute(select(_t.c.name, _t.c.digest))
            stored = {str(row.name): str(row.digest) for row in rows}
            for d in declarations:
                if stored.get(d.name) == d.digest:
                    continue
                if d.name in stored:
                    changed.append(d.name)
                row = {
                    "name": d.name,
                    "pool": d.pool,
                    "policy": d.policy,
                    "description": d.description,
                    "args_schema": d.args_schema,
                    "approval": d.approval,
                    "compensate": d.compensate,
                    "policy_reason": d.policy_reason,
                    "approval_when": d.approval_when,
                    "digest": d.digest,
                    "declared_at": now,
                }
                upsert = self._backend.insert(_t).values(**row)
                await conn.execute(
                    upsert.on_conflict_do_update(index_elements=[_t.c.name], set_=row)
                )
        return changed

    async def tools(self) -> list[ToolDeclaration]:
        """Every declared tool, by pool then name."""
        query = select(_t).order_by(_t.c.pool, _t.c.name)
        async with self._backend.snapshot() as conn:
            rows = (await conn.execute(query)).all()
        return [
            ToolDeclaration(
                r.name,
                r.pool,
                r.policy,
                r.description,
                r.args_schema,
                r.approval,
                compensate=r.compensate,
                policy_reason=r.policy_reason,
                approval_when=r.approval_when,
            )
            for r in rows
        ]

    async def declare_agents(self, compats: Iterable[str], names: Iterable[str]) -> None:
        """Record that Brains of each of ``compats`` serve the agents ``names`` (kept: a build
        that drops an agent leaves its name, which a Brain then reports unknown as before)."""
        rows = [
            {"compat": c, "name": n, "declared_at": time.time()} for c in compats for n in names
        ]
        if not rows:
            return
        _a = schema.agent_declaration
        async with self._backend.transaction() as conn:
            await conn.execute(self._backend.insert(_a).values(rows).on_conflict_do_nothing())

    async def agents(self, compat: str) -> set[str]:
        """The agents Brains of ``compat`` have declared."""
        _a = schema.agent_declaration
        async with self._backend.snapshot() as conn:
            rows = await conn.execute(select(_a.c.name).where(_a.c.compat == compat))
            return {str(r.name) for r in rows}
