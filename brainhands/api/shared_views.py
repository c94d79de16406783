"""One read of a session for all its watchers: after a commit, a thousand streams of one
session cost one read and one JSON document, not a thousand.

A watcher asks for the view as of the changes it has heard of (``SessionChanges.heard``);
it joins a read already under way only if that read began after them, so no watcher is
handed a view older than the commit that woke it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from sse_starlette import ServerSentEvent

from brainhands.api.changes import SessionChanges
from brainhands.api.views import session_document
from brainhands.client import Client


@dataclass(frozen=True)
class Snapshot:
    version: int
    frame: bytes
    """The server-sent event carrying it (``id`` its version), encoded once for all."""


@dataclass
class _Read:
    covers: int
    """The changes heard of when it began: it sees at least what they committed."""
    waiters: list[asyncio.Future[Snapshot]] = field(default_factory=list)


class SharedViews:
    def __init__(self, client: Client, changes: SessionChanges) -> None:
        self.client = client
        self.changes = changes
        self._reads: dict[str, _Read] = {}
        self._reading: set[asyncio.Task[None]] = set()

    async def read(self, session_id: str) -> Snapshot:
        """The session's view, read at or after the last change heard of."""
        wanted = self.changes.heard(session_id)
        under_way = self._reads.get(session_id)
        if under_way is None or under_way.covers < wanted:
            under_way = self._reads[session_id] = _Read(wanted)
            reading = asyncio.create_task(self._read(session_id, under_way))
            self._reading.add(reading)
            reading.add_done_callback(self._reading.discard)
        # A future of its own: a watcher that goes away cancels it, not the others' read.
        waiter: asyncio.Future[Snapshot] = asyncio.get_running_loop().create_future()
        under_way.waiters.append(waiter)
        return await waiter

    async def _read(self, session_id: str, read: _Read) -> None:
        outcome: Snapshot | BaseException
        try:
            view = await self.client.session(session_id)
            version = view.session.version
            data = json.dumps(session_document(view))
            frame = ServerSentEvent(data=data, id=str(version), event="view").encode()
            outcome = Snapshot(version, frame)
        except BaseException as exc:  # each waiter's to see; the read itself ends here
            outcome = exc
        finally:
            if self._reads.get(session_id) is read:
                del self._reads[session_id]
        for waiter in read.waiters:
            if waiter.done():
                continue
            if isinstance(outcome, asyncio.CancelledError):
                waiter.cancel()
            elif isinstance(outcome, BaseException):
                waiter.set_exception(outcome)
            else:
                waiter.set_result(outcome)
