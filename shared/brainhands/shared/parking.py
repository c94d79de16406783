"""The parking queue as an operator sees it: what is there and why, and how it goes back.

Two roads lead to the parking queue (``Topology.parking_queue``):

- a work queue dead-lettered the message, usually because it reached the delivery limit
  (RabbitMQ records why in the ``x-death`` header: ``delivery_limit``, ``rejected``, ...);
- a consumer could not decode the body and parked it itself (``Broker.park``), recording
  the validation error and the routing key in ``x-brainhands-*`` headers.

Either way the parked message keeps its original routing key, which is where replay sends it.
``list_parked`` and ``replay_parked`` are what the ``brainhands dlq`` command runs; its purge
holds parked messages (``held_parked``) while the operator's side judges them against the
store (``brainhands.cli.parked``): messaging itself never reads the store.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aio_pika.abc import AbstractIncomingMessage

from brainhands.shared.broker import ORIGIN_HEADER, REASON_HEADER, Broker
from brainhands.shared.delivery import DELIVERIES_HEADER
from brainhands.shared.errors import InvalidMessage, UnroutableMessage
from brainhands.shared.messages import Message, decode

logger = logging.getLogger("brainhands.broker")

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
        DELIVERIES_HEADER,
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
    message: Message | None = field(default=None, repr=False, compare=False)
    """The body as a protocol message; None when this build cannot read it."""

    @property
    def message_type(self) -> str:
        """The message's ``type``, or ``unreadable``."""
        return self.message.type if self.message is not None else "unreadable"

    @property
    def session_id(self) -> str | None:
        return self.message.session_id if self.message is not None else None


@dataclass(frozen=True)
class HeldMessage:
    """A parked message taken, unacked, by ``held_parked``."""

    parked: ParkedMessage
    incoming: AbstractIncomingMessage = field(repr=False)

    async def remove(self) -> None:
        """Delete it from the parking queue for good."""
        await self.incoming.ack()


async def list_parked(broker: Broker, limit: int = 20) -> list[ParkedMessage]:
    """Describe up to ``limit`` parked messages, oldest first, leaving them all parked."""
    async with held_parked(broker, limit) as held:
        return [one.parked for one in held]


@contextlib.asynccontextmanager
async def held_parked(broker: Broker, limit: int = 20) -> AsyncIterator[list[HeldMessage]]:
    """Up to ``limit`` parked messages, oldest first, held unacked while the block runs.

    Those the block ``remove``s are gone; the rest go back to the parking queue when the
    holding channel closes, at the end of the block.
    """
    async with broker.side_channel() as channel:
        queue = await channel.get_queue(broker.topology.parking_queue, ensure=False)
        taken: list[HeldMessage] = []
        # Holding each one unacked until the end is what makes the next get return the next.
        while len(taken) < limit:
            incoming = await queue.get(no_ack=False, fail=False)
            if incoming is None:
                break
            taken.append(HeldMessage(_describe(incoming), incoming))
        yield taken


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
        message=_message(incoming.body),
    )


def _message(body: bytes) -> Message | None:
    try:
        return decode(body)
    except InvalidMessage:
        return None


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
