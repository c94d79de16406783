"""Live notes for the event streams: what happens that recovery does not depend on (a tool's
progress), pushed to this API process over the broker and handed to the session's
watchers. Never stored: a watcher that is not connected when a note passes misses it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from brainhands.shared.broker import Broker, Consumer, Delivery
from brainhands.shared.messages import LiveNote, Message

BACKLOG = 100
"""Notes kept for a slow watcher; older ones are dropped first."""


class LiveNotes:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._watchers: dict[str, set[asyncio.Queue[LiveNote]]] = {}
        self._consumer: Consumer | None = None

    async def start(self) -> None:
        queue = await self.broker.topology.declare_live_listener(self.broker.channel)
        self._consumer = await self.broker.consume(queue, self._heard)

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.cancel()

    @contextlib.contextmanager
    def watch(self, session_id: str) -> Iterator[asyncio.Queue[LiveNote]]:
        notes: asyncio.Queue[LiveNote] = asyncio.Queue(BACKLOG)
        self._watchers.setdefault(session_id, set()).add(notes)
        try:
            yield notes
        finally:
            watchers = self._watchers[session_id]
            watchers.discard(notes)
            if not watchers:
                del self._watchers[session_id]

    async def _heard(self, message: Message, delivery: Delivery) -> None:
        await delivery.ack()
        if not isinstance(message, LiveNote):
            return
        for notes in self._watchers.get(message.session_id, ()):
            if notes.full():
                notes.get_nowait()
            notes.put_nowait(message)
