"""RabbitMQ: confirmed publishing and manually acknowledged consuming of protocol messages.

The broker only triggers (DESIGN §1), so this module promises little and keeps it:

- ``publish`` returns once the broker has confirmed the message, or raises within
  ``publish_timeout``: ``UnroutableMessage`` when no queue took it, ``BrokerUnavailable``
  when there is no connection, no confirm in time, or a nack. It never hangs in an outage.
- ``consume`` starts a ``Consumer`` (``shared.consumer``) that hands each decoded message
  to a handler, which settles its ``Delivery`` (``shared.delivery``) after its own commit.
- ``park`` copies a delivery to the parking queue with its reason (``shared.parking`` is
  what an operator reads and replays there).

The connection is robust: after a broker restart it reconnects and restores the declared
topology and every consumer on its own. Given a cluster's nodes (``broker_node_urls``), it
connects to the first that answers and, when that node is lost, reconnects through the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import aio_pika
import aiormq
from aio_pika.abc import (
    AbstractRobustChannel,
    AbstractRobustConnection,
)
from aio_pika.exceptions import (
    ChannelNotFoundEntity,
    DeliveryError,
    PublishError,
)
from aiormq import spec
from yarl import URL

from brainhands.shared import metrics
from brainhands.shared.config import broker_node_urls
from brainhands.shared.consumer import Consumer
from brainhands.shared.delivery import DELIVERIES_HEADER, TRANSPORT_ERRORS, Delivery, Handler
from brainhands.shared.errors import BrokerError, BrokerUnavailable, UnroutableMessage
from brainhands.shared.messages import Message, encode
from brainhands.shared.topology import Topology

logger = logging.getLogger("brainhands.broker")

PERSISTENT = int(aio_pika.DeliveryMode.PERSISTENT)
"""A message the broker keeps on disk (quorum queues keep every message anyway)."""

RECOUNT_PAUSE = 1.0
"""Seconds a redelivery whose counted copy was not confirmed waits before it is requeued."""
REASON_HEADER = "x-brainhands-reason"
"""Header of a message parked by brainhands: why (e.g. the validation error of its body)."""
ORIGIN_HEADER = "x-brainhands-origin"
"""Header of a message parked by brainhands: the routing key it was delivered with."""

_MAX_REASON_CHARS = 2000


@dataclass(frozen=True)
class Outgoing:
    """One message of a ``publish_many`` batch: an encoded body (as an outbox row keeps it)."""

    body: bytes
    routing_key: str
    headers: Mapping[str, str] | None = None


class _NodesConnection(aio_pika.RobustConnection):
    """A robust connection that moves on to the next of a cluster's nodes whenever it closes.

    aio-pika reconnects to the one URL it was given. It reports every end of a connection,
    and every failed attempt at one, through ``_on_connection_close`` before it tries again
    with ``self.url``: the next node is put there, so a lost node is left behind at the next
    attempt and a cluster with any node up is reached within one round of the list.
    """

    def __init__(self, nodes: Sequence[URL], **kwargs: Any) -> None:
        super().__init__(nodes[0], **kwargs)
        self._nodes = nodes
        self._next = 1 % len(nodes)

    async def _on_connection_close(self, closing: asyncio.Future[Any]) -> None:
        self.url, self._next = self._nodes[self._next], (self._next + 1) % len(self._nodes)
        await super()._on_connection_close(closing)


class Broker:
    """A robust connection to RabbitMQ with one publisher-confirm channel.

    Create with ``await Broker.connect(...)``, which declares the base topology (exchanges and
    parking queue); declare work queues on ``broker.channel`` with the ``Topology``.
    """

    def __init__(
        self,
        connection: AbstractRobustConnection,
        channel: AbstractRobustChannel,
        topology: Topology,
        *,
        publish_timeout: float,
        prefetch: int,
    ) -> None:
        self._connection = connection
        self._channel = channel
        self._topology = topology
        self._publish_timeout = publish_timeout
        self._prefetch = prefetch
        self._consumers: set[Consumer] = set()

    @classmethod
    async def connect(
        cls,
        url: str,
        topology: Topology,
        *,
        publish_timeout: float = 5.0,
        prefetch: int = 16,
        connection_name: str = "brainhands",
        reconnect_interval: float = 1.0,
    ) -> Broker:
        """Connect, open the confirm channel and declare the base topology.

        ``url`` may name a cluster's nodes (``broker_node_urls``): they are tried in turn,
        now and at every reconnection. Raises ``BrokerUnavailable`` when none can be reached,
        each within ``publish_timeout``. ``connection_name`` shows in RabbitMQ's connection
        list.
        """
        nodes = [URL(node) for node in broker_node_urls(url)]
        failures = []
        last: BaseException | None = None
        for first in range(len(nodes)):
            connection = _NodesConnection(
                [*nodes[first:], *nodes[:first]],
                reconnect_interval=reconnect_interval,
                client_properties={"connection_name": connection_name},
            )
            try:
                await connection.connect(timeout=publish_timeout)
                break
            except TRANSPORT_ERRORS as exc:
                await connection.close()
                failures.append(f"{nodes[first].host}:{nodes[first].port}: {exc!r}")
                last = exc
        else:
            # From the last node's error: it says whether trying again can help (a refused
            # connection) or not (a refused login), ``shared.startup``.
            raise BrokerUnavailable(f"cannot connect to RabbitMQ: {'; '.join(failures)}") from last
        try:
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            await topology.declare_base(channel)
        except BaseException:
            await connection.close()
            raise
        return cls(
            connection, channel, topology, publish_timeout=publish_timeout, prefetch=prefetch
        )

    @property
    def connected(self) -> bool:
        """Whether the connection and the confirm channel are open right now."""
        return not self._connection.is_closed and not self._channel.is_closed

    @property
    def topology(self) -> Topology:
        """The names this broker publishes to and parks into."""
        return self._topology

    @property
    def channel(self) -> AbstractRobustChannel:
        """The confirm channel, for declaring queues with ``Topology``."""
        return self._channel

    @contextlib.asynccontextmanager
    async def side_channel(self) -> AsyncIterator[AbstractRobustChannel]:
        """A channel of its own (no confirms), closed on exit.

        Deliveries taken on it and not acked go back to their queue when it closes. Transport
        failures inside the block surface as ``BrokerUnavailable``.
        """
        try:
            try:
                channel = await self._connection.channel(publisher_confirms=False)
            except RuntimeError as exc:  # aio-pika's word for a connection being restored
                raise BrokerUnavailable(f"RabbitMQ connection is down: {exc}") from exc
            try:
                yield channel
            finally:
                # Bounded on its own: a caller's timeout that cut the block short has already
                # fired, and a broker that does not answer must not hold the caller here.
                with contextlib.suppress(*TRANSPORT_ERRORS):
                    async with asyncio.timeout(self._publish_timeout):
                        await channel.close()
        except TRANSPORT_ERRORS as exc:
            raise BrokerUnavailable(f"RabbitMQ channel failed: {exc!r}") from exc

    async def publish(
        self, message: Message, routing_key: str, *, headers: Mapping[str, str] | None = None
    ) -> None:
        """Publish a persistent message to the work exchange and wait for its confirm."""
        await self.publish_body(encode(message), routing_key, headers=headers)

    async def broadcast(self, message: Message, routing_key: str) -> None:
        """Publish to whoever listens on ``routing_key`` now, if anyone (best effort).

        Not mandatory: with no listener the message is dropped, which is right for notices
        whose facts are already in the store (a cancellation, say).
        """
        try:
            async with asyncio.timeout(self._publish_timeout):
                await self._send(
                    encode(message), routing_key, self._topology.exchange, None, mandatory=False
                )
        except TimeoutError as exc:
            raise BrokerUnavailable(f"no confirm for {routing_key}") from exc

    async def publish_routed(self, message: Message, routing_key: str) -> None:
        """``publish``, declaring the work queue the key names if none is bound yet.

        For triggers to a pool or Brain build that may not have started a worker yet: the
        queue then holds the message until one does.
        """
        try:
            await self.publish(message, routing_key)
        except UnroutableMessage:
            if not await self.declare_route(routing_key):
                raise
            await self.publish(message, routing_key)

    async def declare_route(self, routing_key: str) -> bool:
        """Declare the work queue ``routing_key`` names (see ``Topology.declare_route``),
        within the publish bound: a declaration must never hang its caller in an outage."""
        try:
            async with asyncio.timeout(self._publish_timeout):
                return await self._topology.declare_route(self._channel, routing_key)
        except TimeoutError as exc:
            raise BrokerUnavailable(f"could not declare {routing_key} in time") from exc
        except TRANSPORT_ERRORS as exc:
            raise BrokerUnavailable(f"could not declare {routing_key}: {exc!r}") from exc

    async def ready_count(self, queue: str) -> int:
        """How many messages wait in ``queue`` for a consumer; 0 when it does not exist.

        Delivered messages not yet settled are not counted. Answers within the publish bound
        or raises ``BrokerUnavailable``; never declares the queue.
        """
        try:
            async with asyncio.timeout(self._publish_timeout), self.side_channel() as channel:
                # A channel of its own: the broker closes the channel of a passive declare
                # that finds nothing, and a robust channel answers a repeated passive declare
                # from its cache.
                try:
                    declared = await channel.declare_queue(queue, passive=True, robust=False)
                except ChannelNotFoundEntity:
                    return 0
                return int(declared.declaration_result.message_count or 0)
        except TimeoutError as exc:
            raise BrokerUnavailable(f"no depth of {queue} within {self._publish_timeout}s") from exc

    async def publish_body(
        self,
        body: bytes,
        routing_key: str,
        *,
        exchange: str | None = None,
        headers: Mapping[str, Any] | None = None,
    ) -> None:
        """Publish raw bytes (to the work exchange by default) and wait, like ``publish``.

        For bodies that are not (or no longer) valid protocol messages: parking and replay.
        """
        try:
            async with asyncio.timeout(self._publish_timeout):
                await self._send(body, routing_key, exchange or self._topology.exchange, headers)
        except TimeoutError as exc:
            raise BrokerUnavailable(
                f"no confirm for {routing_key} within {self._publish_timeout}s"
            ) from exc

    async def publish_many(self, batch: Sequence[Outgoing]) -> list[BrokerError | None]:
        """Publish a batch to the work exchange and await all its confirms together.

        Returns one entry per message, in order: ``None`` once the broker confirmed it, else
        the error ``publish`` would have raised. The whole batch shares one ``publish_timeout``.
        """
        if len(batch) == 1:
            # The common case right after a commit: no task to schedule first.
            return [await self._send_bounded(batch[0])]
        # aiormq writes the frames one by one anyway; the gain is in not waiting for each
        # confirm before sending the next message.
        tasks = [
            asyncio.create_task(
                self._send(item.body, item.routing_key, self._topology.exchange, item.headers)
            )
            for item in batch
        ]
        _, pending = await asyncio.wait(tasks, timeout=self._publish_timeout)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        outcomes = [_outcome(task, self._publish_timeout) for task in tasks]
        for item, error in zip(batch, outcomes, strict=True):
            if error is not None:
                logger.warning("publish failed: %s", error, extra={"routing_key": item.routing_key})
        return outcomes

    async def _send_bounded(self, item: Outgoing) -> BrokerError | None:
        """``_send`` within ``publish_timeout``; the error instead of raising it."""
        error: BrokerError | None = None
        try:
            async with asyncio.timeout(self._publish_timeout):
                await self._send(item.body, item.routing_key, self._topology.exchange, item.headers)
        except TimeoutError:
            error = BrokerUnavailable(f"no confirm within {self._publish_timeout}s")
        except BrokerError as exc:
            error = exc
        if error is not None:
            logger.warning("publish failed: %s", error, extra={"routing_key": item.routing_key})
        return error

    async def park(self, delivery: Delivery, reason: str) -> None:
        """Copy a delivery to the parking queue with ``reason``, wait for the confirm, ack it.

        The copy keeps body, headers and routing key (recorded as the origin, too). If the
        copy is not confirmed the delivery is requeued: it comes back, and at the delivery
        limit its queue dead-letters it to the parking queue anyway.
        """
        extra = {"routing_key": delivery.routing_key, "reason": reason}
        headers = {
            **delivery.headers,
            REASON_HEADER: reason[:_MAX_REASON_CHARS],
            ORIGIN_HEADER: delivery.routing_key,
        }
        try:
            await self.publish_body(
                delivery.body,
                delivery.routing_key,
                exchange=self._topology.dead_letter_exchange,
                headers=headers,
            )
        except BrokerError:
            logger.exception("could not park a message; requeued", extra=extra)
            await delivery.reject(requeue=True)
        else:
            logger.warning("parked a message", extra=extra)
            metrics.PARKED.labels("undecodable" if "invalid message" in reason else "other").inc()
            await delivery.ack()

    async def count_redelivery(self, delivery: Delivery) -> None:
        """What a quorum queue does by itself, for a classic one: a redelivered message is
        published again with its count of returns (``DELIVERIES_HEADER``) and acknowledged, or
        parked once the count passes the delivery limit. The copy goes to the back of the
        queue; it is handled when it comes, as a message delivered before.

        If the copy is not confirmed the delivery is requeued (after ``RECOUNT_PAUSE``), and
        counted when it comes back. Only work queues are counted: a private listener's
        queue (cancel notices, live notes) is not published again to every listener.
        """
        count = (delivery.delivery_count or 0) + 1
        limit = self._topology.delivery_limit
        if count > limit:
            await self.park(delivery, f"delivery_limit: returned {count} times (limit {limit})")
            return
        try:
            await self.publish_body(
                delivery.body,
                delivery.routing_key,
                headers={**delivery.headers, DELIVERIES_HEADER: count},
            )
        except BrokerError:
            logger.warning(
                "could not count a redelivery; requeued after a pause",
                extra={"routing_key": delivery.routing_key},
                exc_info=True,
            )
            await asyncio.sleep(RECOUNT_PAUSE)  # not straight back while publishing fails
            await delivery.reject(requeue=True)
        else:
            await delivery.ack()

    async def consume(
        self, queue_name: str, handler: Handler, *, prefetch: int | None = None
    ) -> Consumer:
        """Start consuming a declared queue on a channel of its own; return the handle.

        At most ``prefetch`` (default: the broker's) unsettled deliveries are in flight, each
        handled in its own task. Raises ``BrokerError`` when the queue does not exist.
        """
        channel = await self._connection.channel(publisher_confirms=False)
        try:
            await channel.set_qos(prefetch_count=prefetch or self._prefetch)
            try:
                queue = await channel.declare_queue(queue_name, passive=True)
            except ChannelNotFoundEntity as exc:
                raise BrokerError(
                    f"queue {queue_name} does not exist: declare it with Topology first"
                ) from exc
            consumer = Consumer(
                channel,
                queue,
                handler,
                park=self.park,
                count_redelivery=(
                    None
                    if self._topology.broker_counts_deliveries
                    or not self._topology.is_work_queue(queue_name)
                    else self.count_redelivery
                ),
                on_cancel=self._consumers.discard,
            )
            await consumer.start()
        except BaseException:
            await channel.close()
            raise
        self._consumers.add(consumer)
        return consumer

    async def close(self) -> None:
        """Cancel every consumer (letting in-flight handlers finish) and disconnect."""
        for consumer in list(self._consumers):
            await consumer.cancel()
        await self._connection.close()

    async def _send(
        self,
        body: bytes,
        routing_key: str,
        exchange: str,
        headers: Mapping[str, Any] | None,
        *,
        mandatory: bool = True,
    ) -> None:
        if self._channel.is_closed:
            # The robust channel is being restored after a reconnect: wait for it (within the
            # caller's bound) rather than fail a publish that would succeed a moment later.
            await self._channel.ready()
        properties = spec.Basic.Properties(
            content_type="application/json",
            delivery_mode=PERSISTENT,
            headers=dict(headers) if headers else None,
            timestamp=datetime.fromtimestamp(time.time(), tz=UTC),
        )
        try:
            channel = cast(aiormq.Channel, await self._channel.get_underlay_channel())
            # Straight to aiormq, not waiting for the frames to be written (wait=False), then
            # for the confirm. aio-pika's publish waits for the write while holding the
            # channel's lock, so the messages of a wave went out one event-loop turn apiece.
            await channel.basic_publish(
                body,
                exchange=exchange,
                routing_key=routing_key,
                properties=properties,
                mandatory=mandatory,
                wait=False,
            )
        except PublishError as exc:
            raise UnroutableMessage(
                f"no queue is bound to {routing_key!r} on exchange {exchange!r}"
            ) from exc
        except DeliveryError as exc:
            raise BrokerUnavailable(f"the broker refused the message for {routing_key}") from exc
        except ChannelNotFoundEntity as exc:
            raise BrokerError(f"exchange {exchange!r} does not exist: {exc}") from exc
        except TRANSPORT_ERRORS as exc:
            raise BrokerUnavailable(f"cannot publish to {routing_key}: {exc!r}") from exc


def _outcome(task: asyncio.Task[None], timeout: float) -> BrokerError | None:
    if task.cancelled():
        return BrokerUnavailable(f"no confirm within {timeout}s")
    error = task.exception()
    if error is None or isinstance(error, BrokerError):
        return error
    raise error
