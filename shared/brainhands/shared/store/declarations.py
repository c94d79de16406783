"""Declarations: what the Hands serving each tool say of it, read by processes that do not
import tool code (the Brain, through a ``ToolCatalog``; the CLI's ``brainhands tools``);
and the agents each Brain build serves, read by the API, which runs none.

A Hands process declares its pool's tools when it starts, before it consumes: one upsert
per tool, keyed by name, that only writes when the declaration changed (its digest), so a
restart of the same build writes nothing. A tool declared differently by two builds of one
pool keeps the newest declaration, and the change is logged by the declaring process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import select

from brainhands.shared.errors import UnknownToolError
from brainhands.shared.store import schema
from brainhands.shared.tools import ToolDeclaration

if TYPE_CHECKING:
    from brainhands.shared.store.store import Store

_t = schema.tool_declaration


@dataclass
class ToolCatalog:
    """The declared tools as one process knows them: read from the store when a name is
    looked up that it does not know yet, at most once per ``refresh_interval`` seconds (a
    call to a tool nobody declared does not read the store each time), and again once
    what it read is ``max_age`` seconds old (a Hands build that changed a tool's pool,
    policy or approval is heard of without a restart). Lookups made while a read is in
    flight and missing a name wait for that read: the passes a fresh Brain starts at once
    find the tools declared long before, instead of taking them for undeclared."""

    store: Store
    refresh_interval: float = 1.0
    max_age: float = 10.0
    known: dict[str, ToolDeclaration] = field(default_factory=dict)
    _read_at: float = float("-inf")
    _first_read: float | None = None
    _reading: asyncio.Future[None] | None = None
    """The read in flight, if any: lookups that need it wait for it rather than read again."""

    async def lookup(self, names: Iterable[str]) -> dict[str, ToolDeclaration]:
        """The declarations of those of ``names`` that are declared."""
        wanted = set(names)
        age = time.monotonic() - self._read_at
        missing = not wanted <= self.known.keys()
        if age >= self.max_age or (missing and (self._due() or self._reading is not None)):
            await self.refresh()
        return {name: self.known[name] for name in wanted if name in self.known}

    async def refresh(self) -> None:
        """Read the declarations, or wait for the read in flight."""
        if self._reading is None:
            self._read_at = time.monotonic()
            if self._first_read is None:
                self._first_read = self._read_at
            self._reading = asyncio.ensure_future(self._read())
        # Shielded: a pass cancelled while waiting does not cancel the others' read.
        await asyncio.shield(self._reading)

    async def _read(self) -> None:
        try:
            self.known = {d.name: d for d in await self.store.declarations.tools()}
        finally:
            self._reading = None

    def young(self, grace: float) -> bool:
        """Whether this process first looked tools up less than ``grace`` seconds ago: a
        Hands pool started with it may still be about to declare its tools."""
        return self._first_read is None or time.monotonic() - self._first_read < grace

    def get(self, name: str) -> ToolDeclaration:
        """A declaration already read (``lookup`` reads what is missing)."""
        try:
            return self.known[name]
        except KeyError:
            declared = ", ".join(sorted(self.known)) or "none"
            raise UnknownToolError(
                f"no Hands pool has declared a tool named {name!r} (declared: {declared})"
            ) from None

    def _due(self) -> bool:
        return time.monotonic() - self._read_at >= self.refresh_interval


class Declarations:
    """The tools and agents declared, reached as ``store.declarations``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def declare_tools(self, declarations: Iterable[ToolDeclaration]) -> list[str]:
        """Record ``declarations``; returns the names whose stored declaration changed."""
        now = time.time()
        changed: list[str] = []
        async with self._store.backend.transaction() as conn:
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
                    "digest": d.digest,
                    "declared_at": now,
                }
                upsert = self._store.backend.insert(_t).values(**row)
                await conn.execute(
                    upsert.on_conflict_do_update(index_elements=[_t.c.name], set_=row)
                )
        return changed

    async def tools(self) -> list[ToolDeclaration]:
        """Every declared tool, by pool then name."""
        query = select(_t).order_by(_t.c.pool, _t.c.name)
        async with self._store.backend.snapshot() as conn:
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
        async with self._store.backend.transaction() as conn:
            await conn.execute(self._store.backend.insert(_a).values(rows).on_conflict_do_nothing())

    async def agents(self, compat: str) -> set[str]:
        """The agents Brains of ``compat`` have declared."""
        _a = schema.agent_declaration
        async with self._store.backend.snapshot() as conn:
            rows = await conn.execute(select(_a.c.name).where(_a.c.compat == compat))
            return {str(r.name) for r in rows}
