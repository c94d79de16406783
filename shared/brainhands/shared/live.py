"""Publishing live notes (``LiveNote``): what a session's watchers see as it happens and
nothing depends on -- a tool's progress, the text a model is producing.

``LivePublisher.publish`` never waits: each note is broadcast in a task of its own, dropped
when no broker is connected, when it takes longer than ``LIVE_TIMEOUT``, or when
``LIVE_BACKLOG`` notes are in flight already. A note is never stored and never retried: the
committed state is what recovery reads, and a watcher that misses a note loses nothing.

Notes are published ``mandatory``: when the broker returns one because no API process has
bound a queue for them, nobody watches, and the publisher drops its notes for
``QUIET_WHEN_UNHEARD`` seconds before it tries again -- a Brain with no API beside it would
otherwise spend a confirmed publish on every model turn for nobody. An API process that
starts meanwhile sees its first notes that much later.

``TextStream`` turns the deltas a streaming model sends into notes of a sensible size: a
note when ``TEXT_NOTE_CHARS`` characters gathered or ``TEXT_NOTE_EVERY`` seconds passed
since the last one, and the rest at the end.
"""

from __future__ import annotations

import asyncio
import logging
import time

from brainhands.shared.broker import Broker
from brainhands.shared.errors import UnroutableMessage
from brainhands.shared.messages import LiveNote

log = logging.getLogger("brainhands.live")

LIVE_TIMEOUT = 1.0
"""Seconds a live note may take to publish before it is dropped."""
LIVE_BACKLOG = 100
"""Live notes publishing at once; more are dropped."""
QUIET_WHEN_UNHEARD = 1.0
"""Seconds notes are dropped after one came back for want of a listener."""
TEXT_NOTE_CHARS = 64
TEXT_NOTE_EVERY = 0.05


class LivePublisher:
    """Broadcasts live notes to whichever API processes listen, in the background."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._sending: set[asyncio.Task[None]] = set()
        self._quiet_until = 0.0
        """Monotonic time until which notes are dropped: nobody listened lately."""

    def publish(self, note: LiveNote) -> None:
        if (
            not self.broker.connected
            or len(self._sending) >= LIVE_BACKLOG
            or time.monotonic() < self._quiet_until
        ):
            return
        sending = asyncio.create_task(self._send(note))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def _send(self, note: LiveNote) -> None:
        try:
            async with asyncio.timeout(LIVE_TIMEOUT):
                await self.broker.publish(note, self.broker.topology.live_key)
        except UnroutableMessage:
            self._quiet_until = time.monotonic() + QUIET_WHEN_UNHEARD
        except Exception as exc:  # best effort: whatever sent it goes on
            log.debug("live note not sent", extra={"event": "live_dropped", "error": str(exc)})


class TextStream:
    """Gathers a model's text deltas for one task into ``model`` notes."""

    def __init__(self, publish: LivePublisher | None, session_id: str, task_id: str) -> None:
        self._publish = publish
        self._session_id = session_id
        self._task_id = task_id
        self._gathered: list[str] = []
        self._size = 0
        self._sent_at = time.monotonic()
        self._notes = 0

    def __call__(self, delta: str) -> None:
        """One more piece of the text, as the model sent it."""
        if not delta:
            return
        self._gathered.append(delta)
        self._size += len(delta)
        if self._size >= TEXT_NOTE_CHARS or time.monotonic() - self._sent_at >= TEXT_NOTE_EVERY:
            self.flush()

    def flush(self) -> None:
        """Send what gathered since the last note, if anything."""
        if not self._gathered:
            return
        text, self._gathered, self._size = "".join(self._gathered), [], 0
        self._sent_at = time.monotonic()
        if self._publish is not None:
            self._publish.publish(
                LiveNote(
                    session_id=self._session_id,
                    kind="model",
                    message=text,
                    data={"task_id": self._task_id, "seq": self._notes},
                )
            )
        self._notes += 1
