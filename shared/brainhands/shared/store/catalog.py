"""The declared tools as one process (a Brain) knows them: a cache of the store's
declarations (``declarations``), read again as they may change.

A module of its own, not the declarations': it holds the ``Store``, which holds the
declarations, and a Brain's agents reach the store's other parts through it (tenant
budgets); kept apart, the imports run one way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from brainhands.shared.errors import UnknownToolError
from brainhands.shared.store.store import Store
from brainhands.shared.tools import ToolDeclaration


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
