"""One read of a session for all its watchers: after a commit, a thousand streams of one
session cost one read and one JSON document, not a thousand.

The read starts when the commit is heard of, before any stream is woken; the streams are
woken once it is done, and each takes the view at once. A view is handed out as of the
changes heard of (``SessionChanges.heard``): one whose read began before the last of them
is not, so no watcher gets a view older than the commit that woke it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from brainhands.api.changes import SessionChanges
from brainhands.api.sse import frame
from brainhands.api.views import session_document
from brainhands.api.watcher import Watcher, watching
from brainhands.client.direct import Client
from brainhands.shared.batch import settle


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
    wakes: bool = False
    """Whether the session's watchers are woken when it is done (a read a commit began)."""


@dataclass(eq=False)
class _Watched:
    """A session some streams watch: what ``SessionChanges`` tells of its commits."""

    views: SharedViews
    session_id: str
    watchers: set[Watcher] = field(default_factory=set)
    latest: tuple[int, Snapshot] | None = None
    """The last view read, with the changes it covers."""
    listening: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def changed(self) -> None:
        self.views.start_read(self.session_id, wake=True)


class SharedViews:
    def __init__(self, client: Client, changes: SessionChanges) -> None:
        self.client = client
        self.changes = changes
        self._watched: dict[str, _Watched] = {}
        self._reads: dict[str, _Read] = {}
        self._reading: set[asyncio.Task[None]] = set()

    @contextlib.contextmanager
    def watch(self, session_id: str, watcher: Watcher) -> Iterator[None]:
        """Tell ``watcher`` (``changed``) whenever a newer view of ``session_id`` has been
        read, while the block runs: ``read`` then returns it at once."""
        with watching(
            self._watched,
            session_id,
            watcher,
            lambda: _Watched(self, session_id),
            lambda watched: self.changes.watch(session_id, watched),
        ):
            yield

    async def read(self, session_id: str) -> Snapshot:
        """The session's view, read at or after the last change heard of."""
        wanted = self.changes.heard(session_id)
        watched = self._watched.get(session_id)
        if watched is not None and watched.latest is not None and watched.latest[0] >= wanted:
            return watched.latest[1]
        under_way = self.start_read(session_id)
        # A future of its own: a watcher that goes away cancels it, not the others' read.
        waiter: asyncio.Future[Snapshot] = asyncio.get_running_loop().create_future()
        under_way.waiters.append(waiter)
        return await waiter

    def start_read(self, session_id: str, *, wake: bool = False) -> _Read:
        """A read that covers every change heard of: the one under way, or a new one
        (``wake``: the session's watchers are told when it is done)."""
        wanted = self.changes.heard(session_id)
        under_way = self._reads.get(session_id)
        if under_way is None or under_way.covers < wanted:
            under_way = self._reads[session_id] = _Read(wanted)
            reading = asyncio.create_task(self._read(session_id, under_way))
            self._reading.add(reading)
            reading.add_done_callback(self._reading.discard)
        under_way.wakes |= wake
        return under_way

    async def _read(self, session_id: str, read: _Read) -> None:
        outcome: Snapshot | BaseException
        try:
            view = await self.client.session(session_id)
            version = view.session.version
            data = json.dumps(session_document(view))
            outcome = Snapshot(version, frame(data, event="view", id=str(version)))
        except BaseException as exc:  # each waiter's to see; the read itself ends here
            outcome = exc
        finally:
            if self._reads.get(session_id) is read:
                del self._reads[session_id]
        for waiter in read.waiters:
            settle(waiter, outcome)
        watched = self._watched.get(session_id)
        if watched is None:
            return
        newest = watched.latest is None or watched.latest[0] <= read.covers
        if isinstance(outcome, Snapshot) and newest:
            watched.latest = (read.covers, outcome)
        if not read.wakes or isinstance(outcome, asyncio.CancelledError):
            return
        # Woken on a failed read too: each stream then reads for itself, and sees the error.
        for watcher in watched.watchers:
            watcher.changed()
