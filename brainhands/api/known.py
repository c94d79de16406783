"""Which sessions exist, as the API's routes need to know before they stream or act."""

from __future__ import annotations

from sqlalchemy import exists, select

from brainhands.shared.store import Store, schema


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
        s = schema.session
        async with self.store.backend.snapshot() as conn:
            found = bool(await conn.scalar(select(exists().where(s.c.id == key))))
        if found:
            self.learn(key)
        return found

    def learn(self, key: str) -> None:
        """The session of store key ``key`` exists."""
        if len(self._known) >= self.limit:
            self._known.clear()
        self._known.add(key)
