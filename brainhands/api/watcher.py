"""One event stream's wake-ups: the commits heard of for its session and the live notes
passing by, in one place it waits on.

A thousand streams of one session wake on every commit; each wake-up should cost one
future, not the tasks a wait on two sources at once would make. So both sources hand
their news to the stream's ``Watcher``, and the stream waits on it alone. A commit goes
first (the stream then reads the session); notes are kept up to ``BACKLOG``, oldest
dropped first, for a stream slower than they come.
"""

from __future__ import annotations

import asyncio
from collections import deque

from brainhands.shared.messages import LiveNote

BACKLOG = 100
"""Notes kept for a slow stream; older ones are dropped first."""


class Watcher:
    def __init__(self) -> None:
        self._changed = False
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

    async def next(self) -> LiveNote | None:
        """The next news: None for a commit (read the session), else a note."""
        while not self._changed and not self._notes:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self._changed:
            self._changed = False
            return None
        return self._notes.popleft()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
