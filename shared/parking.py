"""The parking queue: how messages get there, what is there and why, and how they go back.

Two roads lead to the parking queue (``Topology.parking_queue``):

- a work queue dead-lettered the message, usually because it reached the delivery limit
  (RabbitMQ records why in the ``x-death`` header: ``delivery_limit``, ``rejected``, ...);
- a consumer could not decode the body and parked it itself (``park``), recording the
  validation error and the routing key in ``x-brainhands-*`` headers.

Either way the parked message keeps its original routing key, which is where replay sends it.
``list_parked`` and ``replay_parked`` are what the ``brainhands dlq`` command runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aio_pika.abc import AbstractIncomingMessage

from shared import metrics
from shared.errors import BrokerError, UnroutableMessage

if TYPE_CHECKING:
    # The broker calls ``park``; this module only needs the broker's type.
    from shared.broker import Broker, Delivery

logger = logging.getLogger("brainhands.broker")

REASON_HEADER = "x-brainhands-reason"
"""Header of a message parked by brainhands: why (e.g. the validation error of its body)."""
ORIGIN_HEADER = "x-brainhands-origin"
"""Header of a message parked by brainhands: the routing key it was delivered with."""

_MAX_REASON_CHARS = 2000
_PREVIEW_CHARS = 200
# Set by RabbitMQ (or by us when parking); a replayed message starts afresh without them.
_PARKING_HEADERS = frozenset(
    {
        "x-death",
        "x-first-death-exchange",
        "x-first-death-queue",
        "x-first-death-reason",
        "x-last-death-exchange",
        "x-last-death-queue",
        "x-last-death-reason",
        "x-delivery-count",
        REASON_HEADER,
        ORIGIN_HEADER,
    }
)


@dataclass(frozen=True)
class ParkedMessage:
    """What an operator needs to judge one parked message."""

    origin: str
    """The routing key it came from: a work queue's name, where replay sends it."""
    reason: str
    """Why it was parked: a validation error, or RabbitMQ's ``delivery_limit``, ``rejected``..."""
    count: int
    """How many times it was dead-lettered this way (1 for a message brainhands parked)."""
    body_preview: str
    """The start of the body, decoded leniently."""


async def park(broker: Broker, delivery: Delivery, reason: str) -> None:
    """Copy a delivery to the parking queue with ``reason``, wait for the confirm, ack it.

    The copy keeps body, headers and routing key (recorded as the origin, too). If the copy is
    not confirmed the delivery is requeued: it comes back, and at the delivery limit its queue
    dead-letters it to the parking queue anyway.
    """
    extra = {"routing_key": delivery.routing_key, "reason": reason}
    headers = {
        **delivery.headers,
        REASON_HEADER: reason[:_MAX_REASON_CHARS],
        ORIGIN_HEADER: delivery.routing_key,
    }
    try:
        await broker.publish_body(
            delivery.body,
            delivery.routing_key,
            exchange=broker.topology.dead_letter_exchange,
            headers=headers,
        )
    except BrokerError:
        logger.exception("could not park a message; requeued", extra=extra)
        await delivery.reject(requeue=True)
    else:
        logger.warning("parked a message", extra=extra)
        metrics.PARKED.labels("undecodable" if "invalid message" in reason else "other").inc()
        await delivery.ack()


async def list_parked(broker: Broker, limit: int = 20) -> list[ParkedMessage]:
    """Describe up to ``limit`` parked messages, oldest first, leaving them all parked.

    The messages are taken without ack and go back when the listing channel closes.
    """
    parked: list[ParkedMessage] = []
    async with broker.side_channel() as channel:
        queue = await channel.get_queue(broker.topology.parking_queue, ensure=False)
        # Holding each one unacked until the end is what makes the next get return the next.
        while len(parked) < limit:
            incoming = await queue.get(no_ack=False, fail=False)
            if incoming is None:
                break
            parked.append(_describe(incoming))
    return parked


async def replay_parked(broker: Broker, limit: int = 20) -> int:
    """Send up to ``limit`` parked messages back to their origin; return how many went.

    Each is republished (confirmed) before it is acked from the parking queue, so a crash in
    between duplicates a message rather than losing it. A message whose origin no longer has
    a queue stays parked. ``BrokerUnavailable`` stops the replay; the rest stays parked.
    """
    replayed = 0
    async with broker.side_channel() as channel:
        queue = await channel.get_queue(broker.topology.parking_queue, ensure=False)
        for _ in range(limit):
            incoming = await queue.get(no_ack=False, fail=False)
            if incoming is None:
                break
            origin = _describe(incoming).origin
            headers = {k: v for k, v in incoming.headers.items() if k not in _PARKING_HEADERS}
            try:
                await broker.publish_body(incoming.body, origin, headers=headers)
            except UnroutableMessage:
                # Left unacked, it returns to the parking queue when the channel closes.
                logger.warning("not replayed: no queue for %s", origin, extra={"origin": origin})
                continue
            await incoming.ack()
            replayed += 1
    logger.info("replayed %d parked messages", replayed)
    return replayed


def _describe(incoming: AbstractIncomingMessage) -> ParkedMessage:
    headers = incoming.headers
    deaths = headers.get("x-death")
    # RabbitMQ puts the most recent dead-lettering first.
    last_death: Mapping[str, Any] = {}
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict):
        last_death = deaths[0]
    routing_keys = last_death.get("routing-keys") or [incoming.routing_key or ""]
    origin = headers.get(ORIGIN_HEADER) or routing_keys[0]
    reason = headers.get(REASON_HEADER) or last_death.get("reason") or "unknown"
    return ParkedMessage(
        origin=_text(origin),
        reason=_text(reason),
        count=int(last_death.get("count", 1)),
        body_preview=incoming.body[:_PREVIEW_CHARS].decode("utf-8", errors="replace"),
    )


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
