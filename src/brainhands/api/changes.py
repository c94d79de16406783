"""Which sessions committed: what wakes the API's event streams.

One listener per API process, whatever the number of watchers: a ``LISTEN`` on the
channel every commit notifies (PostgreSQL), or on SQLite, which has none, one poll of the
watched sessions' versions per period. A notification is only a trigger: the stream then
reads the session, and its version says whether anything is new.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Protocol

from brainhands.api.watcher import registered
from brainhands.shared.store import SESSION_CHANNEL, Store
from brainhands.shared.tenancy import split_key

POLL = 0.25
"""Seconds between version reads where there are no notifications (SQLite)."""


class Listener(Protocol):
    def changed(self) -> None:
        """The session (one of the tenant's, for ``watch_tenant``) may have committed."""


class SessionChanges:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._watchers: dict[str, set[Listener]] = {}
        self._tenants: dict[str, set[Listener]] = {}
        self._feed = store.listen(SESSION_CHANNEL, self._heard)
        self._poller: asyncio.Task[None] | None = None
        self._heard_count: dict[str, int] = {}

    def heard(self, session_id: str) -> int:
        """How many changes of ``session_id`` this process has heard of while watched: a
        read begun after the n-th saw at least what that change committed."""
        return self._heard_count.get(session_id, 0)

    @property
    def pushed(self) -> bool:
        """Whether changes arrive as notifications (else by this process's poll)."""
        return self._feed.listening

    async def start(self) -> None:
        if not await self._feed.start():
            self._poller = asyncio.create_task(self._poll(), name="session-changes-poll")

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        await self._feed.close()

    @contextlib.contextmanager
    def watch(self, session_id: str, watcher: Listener) -> Iterator[None]:
        """Tell ``watcher`` whenever the session of store key ``session_id`` may have
        committed, while the block runs."""
        try:
            with registered(self._watchers, session_id, watcher):
                yield
        finally:
            if session_id not in self._watchers:
                self._heard_count.pop(session_id, None)

    @contextlib.contextmanager
    def watch_tenant(self, tenant: str, watcher: Listener) -> Iterator[None]:
        """Tell ``watcher`` whenever one of ``tenant``'s sessions may have committed (or
        been created), while the block runs; other tenants' commits do not wake it."""
        with registered(self._tenants, tenant, watcher):
            yield

    def _heard(self, session_id: str) -> None:
        if session_id in self._watchers:
            self._heard_count[session_id] = self._heard_count.get(session_id, 0) + 1
        tenant, _ = split_key(session_id)
        for watcher in [*self._watchers.get(session_id, ()), *self._tenants.get(tenant, ())]:
            watcher.changed()

    async def _poll(self) -> None:
        seen: dict[str, int] = {}
        latest: dict[str, tuple[int, float | None]] = {}
        while True:
            await asyncio.sleep(POLL)
            versions, tenants = await self.store.listings.marks(
                list(self._watchers), list(self._tenants)
            )
            for session_id, version in versions.items():
                if seen.get(session_id) != version:
                    seen[session_id] = version
                    self._heard(session_id)
            for tenant, mark in tenants.items():
                if latest.get(tenant) != mark:
                    latest[tenant] = mark
                    for watcher in list(self._tenants.get(tenant, ())):
                        watcher.changed()
