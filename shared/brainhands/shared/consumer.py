"""A running subscription to one queue: each delivery decoded and handed to its handler.

A handler that raises gets the message requeued, and the queue's delivery limit parks a
poison message after a few tries; one that met an outage (the store, Redis or RabbitMQ not
answering) has it held and run again, with pauses, until they answer (``Outage``). A body
that does not decode is parked at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from aio_pika.abc import AbstractIncomingMessage, AbstractQueue, AbstractRobustChannel

from brainhands.shared.delivery import TRANSPORT_ERRORS, Delivery, Handler, Park
from brainhands.shared.errors import InvalidMessage
from brainhands.shared.messages import Message, decode
from brainhands.shared.settlement import judge_delivery, settle

logger = logging.getLogger("brainhands.broker")


HOLD_FOR = 300.0
"""Seconds a message met by an outage is held and run again, at most; then it is requeued."""
PAUSE_FIRST = 0.25
PAUSE_MAX = 5.0


class Outage:
    """How long one delivery has been held through an outage, and the pause before its next
    run: ``PAUSE_FIRST`` seconds, doubled each time up to ``PAUSE_MAX``, for ``HOLD_FOR``
    seconds in all."""

    def __init__(self) -> None:
        self.since: float | None = None
        self._pause = PAUSE_FIRST / 2

    def wait_more(self, now: float | None = None) -> bool:
        """Whether to hold the delivery once more (the outage began, or has not lasted too
        long)."""
        now = time.monotonic() if now is None else now
        if self.since is None:
            self.since = now
        return now - self.since < HOLD_FOR

    def next_pause(self) -> float:
        self._pause = min(PAUSE_MAX, self._pause * 2)
        return self._pause

    def log(self, reason: str, extra: dict[str, str]) -> None:
        level = logging.WARNING if self._pause < PAUSE_FIRST else logging.DEBUG
        logger.log(
            level,
            "a service did not answer (%s); the message is held and run again",
            reason,
            extra={**extra, "event": "held"},
        )


class Consumer:
    """A running subscription to one queue; ``cancel`` stops it.

    Made by ``Broker.consume``, which hands it the means to ``park`` an undecodable body (and,
    on a queue that does not count deliveries, to ``count_redelivery``) and is told through
    ``on_cancel`` that it stopped.
    """

    def __init__(
        self,
        channel: AbstractRobustChannel,
        queue: AbstractQueue,
        handler: Handler,
        *,
        park: Park,
        count_redelivery: Callable[[Delivery], Awaitable[None]] | None = None,
        on_cancel: Callable[[Consumer], None],
    ) -> None:
        self.queue_name = queue.name
        self._channel = channel
        self._queue = queue
        self._handler = handler
        self._park = park
        self._count_redelivery = count_redelivery
        self._on_cancel = on_cancel
        self._tag: str | None = None
        self._in_flight: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Register with the broker; deliveries start arriving after this returns."""
        self._tag = await self._queue.consume(self._on_message)

    async def cancel(self, *, grace: float = 10.0) -> None:
        """Stop deliveries, give in-flight handlers ``grace`` seconds, close the channel.

        Handlers still running after that are cancelled; their deliveries go back to the queue.
        """
        self._on_cancel(self)
        try:
            async with asyncio.timeout(grace):
                if self._tag is not None:
                    await self._queue.cancel(self._tag)
                if self._in_flight:
                    await asyncio.wait(set(self._in_flight))
        except TRANSPORT_ERRORS:
            logger.warning("consumer of %s did not stop cleanly", self.queue_name, exc_info=True)
        for task in self._in_flight:
            task.cancel()
        await asyncio.gather(*self._in_flight, return_exceptions=True)
        with contextlib.suppress(*TRANSPORT_ERRORS):
            async with asyncio.timeout(grace):
                await self._channel.close()

    async def _on_message(self, incoming: AbstractIncomingMessage) -> None:
        # aiormq cancels its consumer tasks when the channel dies. The handler must not die
        # with them: a tool call cut short is worse than an ack that is dropped and followed
        # by a redelivery the store recognizes. So the handler runs in a task of our own.
        task = asyncio.create_task(self._deliver(Delivery(incoming)))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _deliver(self, delivery: Delivery) -> None:
        if delivery.redelivered and self._count_redelivery is not None:
            await self._count_redelivery(delivery)
            return
        try:
            message = decode(delivery.body)
        except InvalidMessage as exc:
            await self._park(delivery, str(exc))
            return
        extra = {**_fields(message, delivery.routing_key), "queue": self.queue_name}
        held = Outage()
        try:
            while True:
                try:
                    await self._handler(message, delivery)
                except Exception as exc:
                    verdict = judge_delivery(exc)
                    if verdict.action == "hold" and held.wait_more():
                        held.log(verdict.reason, extra)
                        await asyncio.sleep(held.next_pause())
                        continue
                    logger.exception("handler failed; message requeued", extra=extra)
                    if verdict.action != "hold":
                        await settle(self._park, delivery, verdict)
                else:
                    if not delivery.settled:
                        logger.error(
                            "handler neither acked nor rejected; message requeued", extra=extra
                        )
                break
        finally:
            # A requeue counts against the delivery limit, so a poison message ends up parked.
            if not delivery.settled:
                await delivery.reject(requeue=True)


def _fields(message: Message, routing_key: str) -> dict[str, str]:
    fields = {"message_type": message.type, "routing_key": routing_key}
    fields["session_id"] = message.session_id
    operation_id = getattr(message, "operation_id", None)
    if operation_id is not None:
        fields["operation_id"] = operation_id
    return fields
