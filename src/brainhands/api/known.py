"""What the API knows exists: the sessions its routes stream or act on, and the agents a
message may be for."""

from __future__ import annotations

import time

from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import Store
from brainhands.shared.tenancy import session_key


class KnownSessions:
    """The sessions seen to exist, each read once per API process: a session is never
    deleted, so a key's every request need not read it again. Sessions not found are not
    kept (one may be created next), and the memory is bounded: past ``limit`` sessions it
    starts over."""

    def __init__(self, store: Store, limit: int = 100_000) -> None:
        self.store = store
        self.limit = limit
        self._known: set[str] = set()

    async def exists(self, key: str) -> bool:
        """Whether the session of store key ``key`` exists."""
        if key in self._known:
            return True
        found = await self.store.listings.exists(key)
        if found:
            self.learn(key)
        return found

    async def existing(self, tenant: str, session_id: str) -> str:
        """The store key of ``tenant``'s session ``session_id``; ``NotFoundError`` if it
        has none."""
        key = session_key(tenant, session_id)
        if not await self.exists(key):
            raise NotFoundError(f"session {session_id} does not exist")
        return key

    def learn(self, key: str) -> None:
        """The session of store key ``key`` exists."""
        if len(self._known) >= self.limit:
            self._known.clear()
        self._known.add(key)


class KnownAgents:
    """The agents the Brains of one compatibility key declared, read at most once per
    ``ttl`` seconds, and at most once a second when a name is asked for that the last read
    did not have (a Brain just started may have declared it)."""

    def __init__(self, store: Store, compat: str, ttl: float = 30.0) -> None:
        self.store = store
        self.compat = compat
        self.ttl = ttl
        self._names: set[str] = set()
        self._read_at = -float("inf")

    async def names(self, wanted: str) -> set[str]:
        """The declared agents, read again if ``wanted`` is not among them."""
        age = time.monotonic() - self._read_at
        if age >= self.ttl or (wanted not in self._names and age >= 1.0):
            self._names = await self.store.declarations.agents(self.compat)
            self._read_at = time.monotonic()
        return self._names
