"""One event stream's wake-ups: the commits heard of for its session, the live notes
passing by, keep-alives and the server's shutdown, in one place it waits on.

A thousand streams of one session wake on every commit; each wake-up should cost one
future, not the tasks a wait on several sources at once would make. So every source hands
its news to the stream's ``Watcher``, and the stream waits on it alone. A commit goes
first (the stream then reads the session); notes are kept up to ``BACKLOG``, oldest
dropped first, for a stream slower than they come.

``Watchers`` holds every stream's watcher in the process: one timer pings them all, one
ends each whose credential has (its key revoked, its stream token expired) within
``CHECK`` seconds of the key table's refresh, and at shutdown they are all told to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Literal, Protocol, TypeVar

from brainhands.api.keys import Principal
from brainhands.shared.messages import LiveNote

log = logging.getLogger("brainhands.api")

BACKLOG = 100
"""Notes kept for a slow stream; older ones are dropped first."""
KEEPALIVE = 15.0
"""Seconds between pings of every stream."""
CHECK = 1.0
"""Seconds between checks of the open streams' credentials."""

News = LiveNote | Literal["changed", "ping", "closed"]
_W = TypeVar("_W")


@contextlib.contextmanager
def registered(registry: dict[str, set[_W]], key: str, item: _W) -> Iterator[None]:
    """``item`` among ``registry[key]`` while the block runs; a key left with none goes."""
    registry.setdefault(key, set()).add(item)
    try:
        yield
    finally:
        items = registry[key]
        items.discard(item)
        if not items:
            del registry[key]


class _Shared(Protocol):
    watchers: set[Watcher]
    listening: contextlib.ExitStack
    """What tells it of changes, open while any watcher watches (closed with the last)."""


_S = TypeVar("_S", bound=_Shared)


@contextlib.contextmanager
def watching(
    shared: dict[str, _S],
    key: str,
    watcher: Watcher,
    new: Callable[[], _S],
    listen: Callable[[_S], contextlib.AbstractContextManager[object]],
) -> Iterator[None]:
    """``watcher`` among the watchers of ``shared[key]`` while the block runs: the first one
    makes it (``new``) and starts its listening (``listen``), the last one gone closes it."""
    watched = shared.get(key)
    if watched is None:
        watched = shared[key] = new()
        watched.listening.enter_context(listen(watched))
    watched.watchers.add(watcher)
    try:
        yield
    finally:
        watched.watchers.discard(watcher)
        if not watched.watchers:
            del shared[key]
            watched.listening.close()


class Watcher:
    def __init__(self) -> None:
        self._changed = False
        self._ping = False
        self._closed = False
        self._notes: deque[LiveNote] = deque(maxlen=BACKLOG)
        self._waiter: asyncio.Future[None] | None = None

    def changed(self) -> None:
        """The session may have committed."""
        self._changed = True
        self._wake()

    def note(self, note: LiveNote) -> None:
        """A live note for the session."""
        self._notes.append(note)
        self._wake()

    def ping(self) -> None:
        """Time to show the connection is alive."""
        self._ping = True
        self._wake()

    def close(self) -> None:
        """The stream is to end (the server stops)."""
        self._closed = True
        self._wake()

    async def next(self) -> News:
        """The next news, most urgent first: closed, changed (read the session), a note,
        or a ping."""
        while not (self._closed or self._changed or self._notes or self._ping):
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self._closed:
            return "closed"
        if self._changed:
            self._changed = False
            return "changed"
        if self._notes:
            return self._notes.popleft()
        self._ping = False
        return "ping"

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class Watchers:
    """Every open stream's watcher: pinged every ``period`` seconds by one timer that runs
    while any is open, closed once ``valid`` says the credential it was opened with no
    longer holds (checked every ``check`` seconds), and closed at once by ``close``."""

    def __init__(
        self,
        period: float = KEEPALIVE,
        valid: Callable[[Principal], Awaitable[bool]] | None = None,
        check: float = CHECK,
    ) -> None:
        self.period = period
        self.valid = valid
        self.check = check
        self._open: dict[Watcher, Principal | None] = {}
        self._timers: list[asyncio.Task[None]] = []
        self._closed = False

    @contextlib.contextmanager
    def open(self, holder: Principal | None = None) -> Iterator[Watcher]:
        """A watcher for one stream, for as long as the block runs; closed early when the
        credential ``holder`` was read from ends."""
        watcher = Watcher()
        if self._closed:
            watcher.close()
        self._open[watcher] = holder
        if not self._timers:
            self._timers = [asyncio.create_task(self._ping(), name="event-stream-pings")]
            if self.valid is not None:
                checks = asyncio.create_task(self._check(self.valid), name="event-stream-keys")
                self._timers.append(checks)
        try:
            yield watcher
        finally:
            del self._open[watcher]
            if not self._open:
                for timer in self._timers:
                    timer.cancel()
                self._timers = []

    def close(self) -> None:
        """Tell every stream, open or opening later, to end."""
        self._closed = True
        for watcher in self._open:
            watcher.close()

    async def _ping(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            for watcher in self._open:
                watcher.ping()

    async def _check(self, valid: Callable[[Principal], Awaitable[bool]]) -> None:
        while True:
            await asyncio.sleep(self.check)
            try:
                for watcher, holder in list(self._open.items()):
                    if holder is not None and not await valid(holder):
                        watcher.close()
            except Exception:  # the key table could not be read: try again next time
                log.warning("could not check the open streams' keys", exc_info=True,
                            extra={"event": "stream_keys_unchecked"})  # fmt: skip
