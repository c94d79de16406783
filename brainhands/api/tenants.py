"""Which tenant a session belongs to, as the API's key checks need it on every request."""

from __future__ import annotations

from sqlalchemy import select

from brainhands.shared.store import Store, schema


class SessionTenants:
    """Each session's tenant, read once per API process: a session never changes tenant,
    so a key's every request need not read it again. Sessions not found are not kept (one
    may be created next), and the memory is bounded: past ``limit`` sessions it starts
    over."""

    def __init__(self, store: Store, limit: int = 100_000) -> None:
        self.store = store
        self.limit = limit
        self._known: dict[str, str | None] = {}

    async def of(self, session_id: str) -> tuple[bool, str | None]:
        """Whether the session exists, and its tenant."""
        if session_id in self._known:
            return True, self._known[session_id]
        s = schema.session
        async with self.store.backend.snapshot() as conn:
            row = (await conn.execute(select(s.c.tenant).where(s.c.id == session_id))).one_or_none()
        if row is None:
            return False, None
        self.learn(session_id, row.tenant)
        return True, row.tenant

    def learn(self, session_id: str, tenant: str | None) -> None:
        """``session_id`` exists and belongs to ``tenant``."""
        if len(self._known) >= self.limit:
            self._known.clear()
        self._known[session_id] = tenant
