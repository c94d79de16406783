"""One read of a tenant's sessions list for all its watchers: a commit costs each tenant
watching the list one query, not one per watcher, and another tenant's commits cost it
nothing.

A commit heard of (``SessionChanges.watch_tenant``) starts a read of the tenant's latest
sessions unless one is under way, in which case that one is followed by another, so the
last read always begins after the last commit heard of. A read whose page differs from
the one before wakes the tenant's streams, which each send the page encoded once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from brainhands.api.changes import SessionChanges
from brainhands.api.sse import frame
from brainhands.api.views import list_sessions
from brainhands.api.watcher import Watcher, watching
from brainhands.shared.store import SessionFilter, Store

log = logging.getLogger("brainhands.api")

PAGE = 100
"""Sessions a list stream shows: the most recently updated."""


@dataclass(eq=False)
class _Listed:
    lists: SharedLists
    tenant: str
    watchers: set[Watcher] = field(default_factory=set)
    latest: bytes | None = None
    """The last page read, as the event that carries it."""
    reading: asyncio.Task[None] | None = None
    again: bool = False
    listening: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def __post_init__(self) -> None:
        # Closed with the last watcher: after the changes stop coming, the read stops too.
        self.listening.callback(self._stop_reading)

    def _stop_reading(self) -> None:
        if self.reading is not None:
            self.reading.cancel()

    def changed(self) -> None:
        if self.reading is not None and not self.reading.done():
            self.again = True  # the read under way may have begun before this commit
            return
        self.reading = asyncio.create_task(self._read(), name=f"sessions-list-{self.tenant}")

    async def _read(self) -> None:
        while True:
            self.again = False
            page, _ = await list_sessions(
                self.lists.store, SessionFilter(tenant=self.tenant), limit=PAGE, after=None
            )
            event = frame(json.dumps({"sessions": page}), event="sessions")
            if event != self.latest:
                self.latest = event
                for watcher in self.watchers:
                    watcher.changed()
            if not self.again:
                return


class SharedLists:
    def __init__(self, store: Store, changes: SessionChanges) -> None:
        self.store = store
        self.changes = changes
        self._listed: dict[str, _Listed] = {}

    @contextlib.contextmanager
    def watch(self, tenant: str, watcher: Watcher) -> Iterator[None]:
        """Tell ``watcher`` (``changed``) whenever ``tenant``'s list has changed, while the
        block runs: ``read`` then returns it at once."""
        with watching(
            self._listed,
            tenant,
            watcher,
            lambda: _Listed(self, tenant),
            lambda listed: self.changes.watch_tenant(tenant, listed),
        ):
            yield

    async def read(self, tenant: str) -> bytes:
        """The tenant's list as last read (read now, once for all, if it never was); only
        for a tenant being watched."""
        listed = self._listed[tenant]
        while listed.latest is None:
            if listed.reading is None or listed.reading.done():
                listed.changed()
            assert listed.reading is not None
            # Shielded: a stream that goes away does not cancel the others' read.
            await asyncio.shield(listed.reading)
        return listed.latest
