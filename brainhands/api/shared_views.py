"""One read of a session for all its watchers: after a commit, a thousand streams of one
session cost one read and one JSON document, not a thousand.

A watcher asks for the view as of the changes it has heard of (``SessionChanges.heard``);
it joins a read already under way only if that read began after them, so no watcher is
handed a view older than the commit that woke it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from sse_starlette import ServerSentEvent

from brainhands.api.changes import SessionChanges
from brainhands.api.views import session_document
from brainhands.client import Client


@dataclass(frozen=True)
class Snapshot:
    version: int
    frame: bytes
    """The server-sent event carrying it (``id`` its version), encoded once for all."""


class SharedViews:
    def __init__(self, client: Client, changes: SessionChanges) -> None:
        self.client = client
        self.changes = changes
        self._reads: dict[str, tuple[int, asyncio.Future[Snapshot]]] = {}

    async def read(self, session_id: str) -> Snapshot:
        """The session's view, read at or after the last change heard of."""
        wanted = self.changes.heard(session_id)
        future: asyncio.Future[Snapshot]
        under_way = self._reads.get(session_id)
        if under_way is None or under_way[0] < wanted or under_way[1].done():
            future = asyncio.ensure_future(self._read(session_id))
            self._reads[session_id] = (wanted, future)
            future.add_done_callback(lambda done: self._forget(session_id, done))
        else:
            future = under_way[1]
        return await asyncio.shield(future)

    async def _read(self, session_id: str) -> Snapshot:
        view = await self.client.session(session_id)
        version = view.session.version
        data = json.dumps(session_document(view))
        frame = ServerSentEvent(data=data, id=str(version), event="view").encode()
        return Snapshot(version, frame)

    def _forget(self, session_id: str, done: asyncio.Future[Snapshot]) -> None:
        current = self._reads.get(session_id)
        if current is not None and current[1] is done:
            del self._reads[session_id]
        if not done.cancelled():
            done.exception()  # retrieved: a failed read is each waiter's to see
