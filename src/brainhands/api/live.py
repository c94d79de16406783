"""Live notes for the event streams: what happens that recovery does not depend on (a tool's
progress, a model's text as it comes), pushed to this API process over the broker and handed
to the session's watchers. Never stored: a watcher that is not connected when a note passes
misses it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from brainhands.api.watcher import Watcher, registered
from brainhands.shared.broker import Broker
from brainhands.shared.consumer import Consumer
from brainhands.shared.delivery import Delivery
from brainhands.shared.messages import LiveNote, Message


class LiveNotes:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._watchers: dict[str, set[Watcher]] = {}
        self._consumer: Consumer | None = None

    async def start(self) -> None:
        queue = await self.broker.topology.declare_live_listener(self.broker.channel)
        self._consumer = await self.broker.consume(queue, self._heard)

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.cancel()

    @contextlib.contextmanager
    def watch(self, session_id: str, watcher: Watcher) -> Iterator[None]:
        """Hand ``watcher`` the notes of ``session_id`` while the block runs."""
        with registered(self._watchers, session_id, watcher):
            yield

    async def _heard(self, message: Message, delivery: Delivery) -> None:
        await delivery.ack()
        if not isinstance(message, LiveNote):
            return
        for watcher in self._watchers.get(message.session_id, ()):
            watcher.note(message)
