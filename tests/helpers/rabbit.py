"""A real RabbitMQ for tests: an isolated topology per test, and operator actions."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aio_pika

from brainhands.shared.broker import Broker
from brainhands.shared.messages import Message
from brainhands.shared.topology import QueueType, Topology
from tests.helpers.polling import eventually

RABBITMQCTL = shutil.which("rabbitmqctl")


@dataclass
class BrokerEnv:
    """A connected broker on a topology of its own; remembers the queues to delete."""

    broker: Broker
    topology: Topology
    url: str
    queues: list[str] = field(default_factory=list)

    async def hands_queue(self, pool: str = "email") -> str:
        name = await self.topology.declare_hands_pool(self.broker.channel, pool)
        self.queues.append(name)
        return name

    async def brain_queue(self, compat: str = "v1") -> str:
        name = await self.topology.declare_brain(self.broker.channel, compat)
        self.queues.append(name)
        return name

    async def results_queue(self, compat: str = "v1") -> str:
        name = await self.topology.declare_results(self.broker.channel, compat)
        self.queues.append(name)
        return name

    async def message_count(self, queue: str) -> int:
        connection = await aio_pika.connect(self.url)
        async with connection:
            channel = await connection.channel()
            declared = await channel.declare_queue(queue, passive=True)
            return int(declared.declaration_result.message_count or 0)

    async def purge(self, queue: str) -> None:
        """Drop every message in ``queue``: the lost-trigger lever."""
        connection = await aio_pika.connect(self.url)
        async with connection:
            channel = await connection.channel()
            await (await channel.declare_queue(queue, passive=True)).purge()

    async def count_is(self, queue: str, expected: int) -> bool:
        return await self.message_count(queue) == expected

    async def park_after_the_delivery_limit(self, queue: str, messages: Sequence[Message]) -> None:
        """Publish ``messages`` to ``queue``, whose consumer hands each back until RabbitMQ
        parks it."""
        parked = await self.message_count(self.topology.parking_queue) + len(messages)
        for message in messages:
            await self.broker.publish(message, queue)
        consumer = await self.broker.consume(
            queue, lambda message, delivery: delivery.reject(requeue=True)
        )
        await eventually(
            lambda: self.count_is(self.topology.parking_queue, parked), what="messages parked"
        )
        await consumer.cancel()


async def delete_amqp(url: str, queues: list[str], exchanges: list[str]) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        for queue in queues:
            await channel.queue_delete(queue)
        for exchange in exchanges:
            await channel.exchange_delete(exchange)


async def delete_topology(url: str, topology: Topology, queues: list[str]) -> None:
    """Delete ``queues``, the parking queue, the exchanges, and the result queue of every
    Brain queue among ``queues``: the Brains a test starts declare it, and a run of hundreds
    of tests must not leave hundreds of quorum queues on the broker until the session ends
    (deleting a queue that does not exist is no error)."""
    exchanges = [topology.exchange, topology.dead_letter_exchange]
    prefix = topology.brain_queue("x").removesuffix("x")
    compats = [q.removeprefix(prefix) for q in queues if q.startswith(prefix)]
    results = [topology.results_queue(compat) for compat in compats]
    await delete_amqp(url, [*queues, *results, topology.parking_queue], exchanges)


@contextlib.asynccontextmanager
async def broker_env(
    url: str, namespace: str, *, delivery_limit: int = 5, queue_type: QueueType = "quorum"
) -> AsyncIterator[BrokerEnv]:
    topology = Topology(namespace, delivery_limit=delivery_limit, queue_type=queue_type)
    broker = await Broker.connect(url, topology, connection_name=namespace)
    env = BrokerEnv(broker, topology, url)
    try:
        yield env
    finally:
        await broker.close()
        await delete_topology(url, topology, env.queues)


def delete_leftovers(url: str, namespaces: set[str]) -> int:
    """Delete every queue and exchange of ``namespaces`` on the local node; return how many.

    A test deletes the queues it declared itself, but the worker processes it started may
    have declared more (a pool's queue, another build's Brain queue). This runs once at the
    end of the test session, only for a broker on this machine, which ``rabbitmqctl`` lists.
    """
    host = urlsplit(url).hostname
    if not namespaces or RABBITMQCTL is None or host not in ("127.0.0.1", "localhost", "::1"):
        return 0

    def names(kind: str) -> list[str]:
        done = subprocess.run(
            [RABBITMQCTL, "-q", f"list_{kind}", "name"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        listed = (line.strip() for line in done.stdout.splitlines())
        return [n for n in listed if n.split(".", 1)[0] in namespaces]

    queues, exchanges = names("queues"), names("exchanges")
    if queues or exchanges:
        asyncio.run(delete_amqp(url, queues, exchanges))
    return len(queues) + len(exchanges)


async def rabbitmqctl(*args: str) -> str:
    """Run an operator command against the local node (the chaos tests' lever)."""
    assert RABBITMQCTL is not None, "rabbitmqctl is not installed"
    done = await asyncio.to_thread(
        subprocess.run, [RABBITMQCTL, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def close_connection(connection_name: str) -> None:
    """Have the broker close one client connection, as a network failure would."""
    listing = await rabbitmqctl("-q", "list_connections", "pid", "client_properties")
    pids = [
        line.split("\t", 1)[0]
        for line in listing.splitlines()
        if f'{{"connection_name","{connection_name}"}}' in line
    ]
    assert len(pids) == 1, listing
    await rabbitmqctl("close_connection", pids[0], "test: connection lost")


@contextlib.asynccontextmanager
async def broker_stopped() -> AsyncIterator[None]:
    """Stop the RabbitMQ app for the body; always start it again and wait until it is up."""
    await rabbitmqctl("stop_app")
    try:
        yield
    finally:
        await rabbitmqctl("start_app")
        await rabbitmqctl("await_startup")
