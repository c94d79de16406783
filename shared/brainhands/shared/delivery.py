"""One received message and the means to settle it, once.

Settling a delivery whose channel died with a broker restart is logged and dropped: the
broker redelivers that message on a new channel, and the store makes that harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aio_pika.abc import AbstractIncomingMessage
from aio_pika.exceptions import AMQPError, ChannelInvalidStateError

from brainhands.shared.messages import Message

logger = logging.getLogger("brainhands.broker")

REPUBLISHED_HEADER = "x-brainhands-republished"
"""Set on a message the sweeper publishes again (its first copy may have been delivered):
its receiver treats it like a redelivery (``Delivery.delivered_before``)."""

DELIVERIES_HEADER = "x-brainhands-deliveries"
"""On a classic queue, the count of a message's earlier deliveries that were returned
(``Broker.count_redelivery`` publishes a redelivered message again with it): what a quorum
queue's ``x-delivery-count`` says."""

TRANSPORT_ERRORS = (AMQPError, ChannelInvalidStateError, ConnectionError, OSError, TimeoutError)
"""What aio-pika raises when the connection or channel is gone (or does not answer)."""


class Delivery:
    """One received message and the means to settle it, once.

    ``body``, ``headers``, ``routing_key`` (for work queues: the queue's name) and
    ``redelivered`` are as received. ``delivery_count`` is the number of earlier failed
    deliveries, as counted by a quorum queue (``x-delivery-count``) or by the consumers of a
    classic one (``DELIVERIES_HEADER``); ``None`` when nothing counted.
    ``published_at`` is when the message was published (whole seconds), if it says so.
    ``republished``: the sweeper published it again (``REPUBLISHED_HEADER``).
    """

    def __init__(self, incoming: AbstractIncomingMessage) -> None:
        self._incoming = incoming
        self.body: bytes = incoming.body
        self.headers: Mapping[str, Any] = incoming.headers
        self.routing_key: str = incoming.routing_key or ""
        self.redelivered = bool(incoming.redelivered)
        stamp = incoming.timestamp
        self.published_at: float | None = stamp.timestamp() if stamp else None
        count = incoming.headers.get("x-delivery-count", incoming.headers.get(DELIVERIES_HEADER))
        self.delivery_count: int | None = count if isinstance(count, int) else None
        self.republished = bool(incoming.headers.get(REPUBLISHED_HEADER))
        self.settled = False
        """Whether ``ack`` or ``reject`` has been called."""

    @property
    def returned(self) -> bool:
        """Whether the broker delivered this message before (and it came back): redelivered,
        or counted (a classic queue's copy, published again, is not ``redelivered``)."""
        return self.redelivered or bool(self.delivery_count)

    @property
    def delivered_before(self) -> bool:
        """Whether this message may have been delivered before (``delivered_before``)."""
        return delivered_before(
            redelivered=self.redelivered,
            delivery_count=self.delivery_count,
            republished=self.republished,
        )

    async def ack(self) -> None:
        """Acknowledge: the message is done with and leaves the queue."""
        await self._settle("ack", self._incoming.ack)

    async def reject(self, requeue: bool) -> None:
        """Give the message back (``requeue=True``; counts as a failed delivery) or drop it
        (``requeue=False``; a work queue dead-letters it to the parking queue)."""
        await self._settle("reject", lambda: self._incoming.reject(requeue=requeue))

    async def _settle(self, verb: str, settle: Callable[[], Awaitable[None]]) -> None:
        if self.settled:
            raise RuntimeError(f"cannot {verb}: the delivery is already settled")
        self.settled = True
        try:
            await settle()
        except TRANSPORT_ERRORS:
            # Retrying is pointless: the delivery tag died with its channel, and the broker
            # has already put the message back for another delivery.
            logger.warning(
                "%s dropped: its channel is gone, the broker will redeliver",
                verb,
                extra={"routing_key": self.routing_key},
                exc_info=True,
            )


def delivered_before(*, redelivered: bool, delivery_count: int | None, republished: bool) -> bool:
    """Whether a message may have reached a consumer before this delivery: the broker says it
    is a redelivery (``redelivered``, or a quorum queue's ``x-delivery-count`` above 0), or
    the sweeper published it again (``republished``) because its first copy went without an
    outcome. A first delivery of a first publish is none of these."""
    return redelivered or bool(delivery_count) or republished


Park = Callable[[Delivery, str], Awaitable[None]]
"""Copies a delivery to the parking queue with a reason, and settles it (``Broker.park``)."""

Handler = Callable[[Message, Delivery], Awaitable[None]]
"""Processes one message and settles its delivery (``ack`` after the commit, or ``reject``)."""
