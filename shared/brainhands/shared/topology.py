"""RabbitMQ names and their declaration (DESIGN §6).

    exchange "{ns}"  (direct) ──"{ns}.hands.{pool}"────▶ queue "{ns}.hands.{pool}"
                              ──"{ns}.brain.{compat}"───▶ queue "{ns}.brain.{compat}"
                              ──"{ns}.results.{compat}"─▶ queue "{ns}.results.{compat}"
                                                            │ delivery limit reached
                                                            ▼
    exchange "{ns}.dlx" (topic) ──"#"──▶ queue "{ns}.parked"

A Brain build consumes two queues per compatibility key: wake-ups (new submissions, timers,
the sweeper's recoveries) and tool results, each with a prefetch of its own, so that a result
is applied at once even while a burst of new sessions waits in the wake-up queue.

A work queue's routing key is its own name. Dead-lettered messages keep their original routing
key, so a parked message still says where it came from and replay can send it back. The DLX is
a topic exchange bound with ``#`` so that everything lands in the one parking queue while an
operator can still bind an extra queue to the dead letters of a single pool (e.g. for alerts).

The queues are quorum queues (``queue_type``), replicated over a cluster's nodes, which count
a message's deliveries and dead-letter it at the limit themselves. On a single-node broker
they may be ``classic`` (durable, the messages persistent and confirmed as well): cheaper per
message, but a node's loss loses its queues until it is back, and the count of deliveries is
kept by the consumers (``Broker.count_redelivery``: a redelivered message is published again
with its count and acknowledged, and parked past the limit).

Every process declares what it uses at start-up; declaring again with the same arguments is a
no-op. Declaring a queue that exists with *different* arguments (say another
``delivery_limit``) fails with ``BrokerError``: RabbitMQ never changes queue arguments in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import aio_pika
from aio_pika.abc import AbstractChannel
from aio_pika.exceptions import ChannelPreconditionFailed

from brainhands.shared.errors import BrokerError

# RabbitMQ 4.x gives quorum queues a default delivery limit of 20 and reads -1 as "unlimited",
# while 3.10 has no default and drops a message at once under -1. Listing parked messages
# returns them to the queue, which counts as a delivery, so the parking queue gets a limit
# that is explicit, valid on both, and never reached by operators.
_PARKING_DELIVERY_LIMIT = 1_000_000

_CLASSIC: dict[str, Any] = {"x-queue-type": "classic", "x-queue-version": 2}
"""A classic queue of the second storage version (RabbitMQ 3.10+): fewer disk writes."""

QueueType = Literal["quorum", "classic"]
"""The kind of RabbitMQ queue every work queue and the parking queue are."""


@dataclass(frozen=True)
class Topology:
    """The names of one deployment's exchanges and queues, and how to declare them."""

    namespace: str
    delivery_limit: int = 5
    """Redeliveries a work message gets before it is dead-lettered to the parking queue."""
    queue_type: QueueType = "quorum"
    """Quorum queues (replicated; the broker counts deliveries) or classic ones (one node; the
    consumers count them)."""

    def __post_init__(self) -> None:
        if not self.namespace:
            raise ValueError("namespace must not be empty")
        if self.delivery_limit < 1:
            raise ValueError("delivery_limit must be at least 1")
        if self.queue_type not in get_args(QueueType):
            raise ValueError(f"queue_type must be one of {get_args(QueueType)}")

    @property
    def broker_counts_deliveries(self) -> bool:
        """Whether the queues count a message's deliveries and park it at the limit (quorum
        queues), or the consumers must (classic: ``Broker.count_redelivery``)."""
        return self.queue_type == "quorum"

    @property
    def exchange(self) -> str:
        """The direct exchange every job and wake-up is published to."""
        return self.namespace

    @property
    def dead_letter_exchange(self) -> str:
        """Where work queues dead-letter to; parked messages are published here as well."""
        return f"{self.namespace}.dlx"

    @property
    def parking_queue(self) -> str:
        """The one queue that holds every dead-lettered or undecodable message."""
        return f"{self.namespace}.parked"

    def hands_queue(self, pool: str) -> str:
        """Queue (and routing key) of the jobs of a Hands pool."""
        return f"{self.namespace}.hands.{_checked('pool', pool)}"

    def brain_queue(self, compat: str) -> str:
        """Queue (and routing key) of the wake-ups for Brains of one compatibility key."""
        return f"{self.namespace}.brain.{_checked('compat', compat)}"

    def results_queue(self, compat: str) -> str:
        """Queue (and routing key) of the tool results for Brains of one compatibility key."""
        return f"{self.namespace}.results.{_checked('compat', compat)}"

    def is_work_queue(self, name: str) -> bool:
        """Whether ``name`` is one of the deployment's work queues (a Hands pool's, a Brain
        build's wake-ups or results), not the parking queue or a private listener's."""
        prefixes = (f"{self.namespace}.hands.", f"{self.namespace}.brain.")
        return name.startswith((*prefixes, f"{self.namespace}.results."))

    def brain_queues(self, compat: str) -> tuple[str, str]:
        """Both queues a Brain of ``compat`` consumes: wake-ups and results."""
        return self.brain_queue(compat), self.results_queue(compat)

    @property
    def cancel_key(self) -> str:
        """Routing key of cancel notices: every Hands worker's own queue is bound to it."""
        return f"{self.namespace}.cancel"

    @property
    def live_key(self) -> str:
        """Routing key of live notes (``LiveNote``): each API process's own queue is bound
        to it."""
        return f"{self.namespace}.live"

    async def declare_live_listener(self, channel: AbstractChannel) -> str:
        """A private queue that receives every live note while this connection lives."""
        await self.declare_base(channel)
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        await queue.bind(self.exchange, routing_key=self.live_key)
        return str(queue.name)

    async def declare_cancel_listener(self, channel: AbstractChannel) -> str:
        """A private queue that receives every cancel notice while this connection lives."""
        await self.declare_base(channel)
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        await queue.bind(self.exchange, routing_key=self.cancel_key)
        return str(queue.name)

    def work_queue_arguments(self) -> dict[str, Any]:
        """Arguments of every work queue; they must be identical in every process."""
        if self.queue_type == "classic":
            # The consumers count deliveries and park at the limit; a message dead-lettered
            # by the queue (rejected) is copied to the parking queue at most once.
            return {**_CLASSIC, "x-dead-letter-exchange": self.dead_letter_exchange}
        return {
            "x-queue-type": "quorum",
            # 3.10 has no default delivery limit: without this a poison message loops forever.
            "x-delivery-limit": self.delivery_limit,
            "x-dead-letter-exchange": self.dead_letter_exchange,
            # The source queue keeps a message until the parking queue has confirmed it.
            "x-dead-letter-strategy": "at-least-once",
            # at-least-once dead-lettering is silently downgraded without reject-publish.
            "x-overflow": "reject-publish",
        }

    async def declare_base(self, channel: AbstractChannel) -> None:
        """Declare the work exchange, the dead-letter exchange and the parking queue."""
        await channel.declare_exchange(self.exchange, aio_pika.ExchangeType.DIRECT, durable=True)
        await channel.declare_exchange(
            self.dead_letter_exchange, aio_pika.ExchangeType.TOPIC, durable=True
        )
        parked = await _declare_queue(
            channel,
            self.parking_queue,
            _CLASSIC
            if self.queue_type == "classic"
            else {"x-queue-type": "quorum", "x-delivery-limit": _PARKING_DELIVERY_LIMIT},
        )
        await parked.bind(self.dead_letter_exchange, routing_key="#")

    async def declare_hands_pool(self, channel: AbstractChannel, pool: str) -> str:
        """Declare the job queue of a Hands pool (and the base); return its name."""
        return await self._declare_work_queue(channel, self.hands_queue(pool))

    async def declare_brain(self, channel: AbstractChannel, compat: str) -> str:
        """Declare the wake-up queue of a Brain compatibility key (and the base); return it."""
        return await self._declare_work_queue(channel, self.brain_queue(compat))

    async def declare_results(self, channel: AbstractChannel, compat: str) -> str:
        """Declare the result queue of a Brain compatibility key (and the base); return it."""
        return await self._declare_work_queue(channel, self.results_queue(compat))

    async def declare_route(self, channel: AbstractChannel, routing_key: str) -> bool:
        """Declare the work queue a routing key names, if it names one; say whether it did.

        Lets a publisher deliver to a pool or Brain build that has no worker yet: the queue
        holds the message until one starts.
        """
        for prefix, declare in (
            (f"{self.namespace}.hands.", self.declare_hands_pool),
            (f"{self.namespace}.brain.", self.declare_brain),
            (f"{self.namespace}.results.", self.declare_results),
        ):
            name = routing_key.removeprefix(prefix)
            if name != routing_key and name:
                await declare(channel, name)
                return True
        return False

    async def _declare_work_queue(self, channel: AbstractChannel, name: str) -> str:
        # The work queue dead-letters into the base, and binds to its exchange: declare both
        # first, so no order of start-up calls can leave a queue without its parking lot.
        await self.declare_base(channel)
        queue = await _declare_queue(channel, name, self.work_queue_arguments())
        await queue.bind(self.exchange, routing_key=name)
        return name


async def _declare_queue(
    channel: AbstractChannel, name: str, arguments: dict[str, Any]
) -> aio_pika.abc.AbstractQueue:
    try:
        return await channel.declare_queue(name, durable=True, arguments=arguments)
    except ChannelPreconditionFailed as exc:
        raise BrokerError(
            f"queue {name} already exists with other arguments than {arguments}: {exc}. "
            "Use the same settings in every process, or delete the queue to change them."
        ) from exc


def _checked(what: str, name: str) -> str:
    if not name:
        raise ValueError(f"{what} must not be empty")
    return name
