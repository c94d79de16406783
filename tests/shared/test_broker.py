"""The broker layer against a real RabbitMQ: topology, confirms, consuming, parking, replay."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aio_pika
import pytest

from brainhands.shared.broker import ORIGIN_HEADER, REASON_HEADER, Broker, Outgoing
from brainhands.shared.delivery import Delivery
from brainhands.shared.errors import BrokerError, BrokerUnavailable, UnroutableMessage
from brainhands.shared.messages import Message, ToolJob, encode
from brainhands.shared.parking import list_parked, replay_parked
from brainhands.shared.topology import Topology
from tests.helpers.polling import eventually
from tests.helpers.rabbit import (
    RABBITMQCTL,
    broker_env,
    broker_stopped,
    close_connection,
    delete_topology,
)
from tests.helpers.rabbit import (
    BrokerEnv as Env,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

DELIVERY_LIMIT = 2
needs_rabbitmqctl = pytest.mark.skipif(RABBITMQCTL is None, reason="needs rabbitmqctl")


def job(n: int = 1) -> ToolJob:
    return ToolJob(
        operation_id=f"op-{n}",
        tool="send_email",
        arguments={"n": n},
        session_id="s-1",
        task_id=f"t-{n}",
        compat="v1",
        pool="email",
    )


@dataclass
class Recorder:
    """A handler that records what it got and settles as told."""

    fail: bool = False
    ack: bool = True
    received: list[Message] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)

    async def __call__(self, message: Message, delivery: Delivery) -> None:
        self.received.append(message)
        self.deliveries.append(delivery)
        if self.fail:
            raise RuntimeError("tool exploded")
        if self.ack:
            await delivery.ack()


@pytest.fixture(params=["quorum", "classic"])
async def env(
    rabbitmq_url: str, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[Env]:
    """A broker on quorum queues (which count deliveries) and on classic ones (whose
    consumers count them): every behaviour below holds on both."""
    async with broker_env(
        rabbitmq_url, namespace, delivery_limit=DELIVERY_LIMIT, queue_type=request.param
    ) as environment:
        yield environment


async def test_declaring_twice_is_harmless(env: Env) -> None:
    first = await env.hands_queue("email")
    second = await env.topology.declare_hands_pool(env.broker.channel, "email")
    await env.topology.declare_base(env.broker.channel)

    assert first == second == f"{env.topology.namespace}.hands.email"


async def test_redeclaring_with_other_arguments_fails_clearly(env: Env) -> None:
    await env.hands_queue("email")
    other = (
        Topology(env.topology.namespace, delivery_limit=DELIVERY_LIMIT + 3)
        if env.topology.queue_type == "quorum"
        else Topology(env.topology.namespace, queue_type="quorum")
    )
    connection = await aio_pika.connect(env.url)
    async with connection:
        channel = await connection.channel()
        with pytest.raises(BrokerError, match="other arguments"):
            await other.declare_hands_pool(channel, "email")


async def test_publish_consume_ack_round_trip(env: Env) -> None:
    queue = await env.hands_queue()
    recorder = Recorder()
    await env.broker.consume(queue, recorder)

    await env.broker.publish(job(), queue, headers={"traceparent": "00-1-2-01"})

    await eventually(lambda: len(recorder.received) == 1, what="delivery")
    delivery = recorder.deliveries[0]
    assert recorder.received == [job()]
    assert delivery.routing_key == queue
    assert not delivery.redelivered
    assert delivery.delivery_count in (0, None)
    assert delivery.headers["traceparent"] == "00-1-2-01"
    assert delivery.settled
    with pytest.raises(RuntimeError, match="already settled"):
        await delivery.ack()
    await asyncio.sleep(0.3)
    assert len(recorder.received) == 1
    assert await env.message_count(queue) == 0


async def test_unsettled_delivery_is_requeued(env: Env) -> None:
    queue = await env.hands_queue()
    recorder = Recorder(ack=False)
    consumer = await env.broker.consume(queue, recorder)
    await env.broker.publish(job(), queue)
    await eventually(lambda: len(recorder.received) >= 2, what="redelivery")
    await consumer.cancel()

    assert recorder.deliveries[1].returned
    assert recorder.deliveries[1].delivered_before
    assert recorder.deliveries[1].delivery_count == 1


async def test_unroutable_publish_raises(env: Env) -> None:
    nowhere = env.topology.hands_queue("nowhere")

    with pytest.raises(UnroutableMessage, match="nowhere"):
        await env.broker.publish(job(), nowhere)


async def test_publish_many_reports_each_outcome(env: Env) -> None:
    queue = await env.hands_queue()
    batch = [Outgoing(encode(job(n)), queue) for n in range(100)]
    batch.insert(50, Outgoing(encode(job(999)), env.topology.hands_queue("nowhere")))

    outcomes = await env.broker.publish_many(batch)

    assert [type(o) for o in outcomes] == [type(None)] * 50 + [UnroutableMessage] + [
        type(None)
    ] * 50
    await eventually(lambda: env.count_is(queue, 100), what="100 messages queued")


async def test_malformed_body_is_parked_and_the_queue_goes_on(env: Env) -> None:
    queue = await env.hands_queue()
    recorder = Recorder()
    await env.broker.consume(queue, recorder)

    await env.broker.publish_body(b"{this is not json", queue, headers={"k": "v"})
    await env.broker.publish_body(b'{"type": "tool_job", "schema_version": 1}', queue)
    await env.broker.publish(job(), queue)

    await eventually(lambda: len(recorder.received) == 1, what="the good message")
    assert recorder.received == [job()]
    await eventually(lambda: env.count_is(env.topology.parking_queue, 2), what="2 parked")
    assert await env.message_count(queue) == 0

    connection = await aio_pika.connect(env.url)
    async with connection:
        channel = await connection.channel()
        parking = await channel.get_queue(env.topology.parking_queue, ensure=False)
        parked = [await parking.get(no_ack=False) for _ in range(2)]
        garbage = next(p for p in parked if p.body == b"{this is not json")
        assert garbage.routing_key == queue
        assert garbage.headers[ORIGIN_HEADER] == queue
        assert garbage.headers["k"] == "v"
        assert "Invalid JSON" in str(garbage.headers[REASON_HEADER])
        # Left unacked, both go back to the parking queue with this connection.


async def test_handler_that_always_fails_parks_the_message_after_the_limit(env: Env) -> None:
    queue = await env.hands_queue()
    recorder = Recorder(fail=True)
    await env.broker.consume(queue, recorder)

    await env.broker.publish(job(), queue)

    await eventually(lambda: env.count_is(env.topology.parking_queue, 1), what="parked")
    assert len(recorder.received) == DELIVERY_LIMIT + 1
    assert [d.delivery_count for d in recorder.deliveries][1:] == list(range(1, DELIVERY_LIMIT + 1))
    parked = await list_parked(env.broker)
    assert len(parked) == 1
    assert parked[0].origin == queue
    if env.topology.queue_type == "quorum":
        assert parked[0].reason == "delivery_limit"
    else:
        assert parked[0].reason == "delivery_limit: returned 3 times (limit 2)"
    assert parked[0].count == 1
    assert '"operation_id":"op-1"' in parked[0].body_preview


async def test_list_parked_shows_reasons_and_leaves_messages_parked(env: Env) -> None:
    queue = await env.hands_queue()
    await env.broker.consume(queue, Recorder())
    await env.broker.publish_body(b"garbage-1", queue)
    await env.broker.publish_body(b'{"type": "wake"}', queue)
    await eventually(lambda: env.count_is(env.topology.parking_queue, 2), what="2 parked")

    for _ in range(3):
        parked = sorted(await list_parked(env.broker, limit=10), key=lambda p: p.body_preview)
        assert [p.body_preview for p in parked] == ["garbage-1", '{"type": "wake"}']
        assert all(p.origin == queue for p in parked)
        assert all(p.count == 1 for p in parked)
        assert "Invalid JSON" in parked[0].reason
        assert "wake.session_id: Field required" in parked[1].reason
        await eventually(lambda: env.count_is(env.topology.parking_queue, 2), what="still 2")

    assert len(await list_parked(env.broker, limit=1)) == 1
    await eventually(lambda: env.count_is(env.topology.parking_queue, 2), what="still 2")


async def test_replay_sends_parked_messages_back_to_their_origin(env: Env) -> None:
    queue = await env.hands_queue()
    failing = Recorder(fail=True)
    consumer = await env.broker.consume(queue, failing)
    await env.broker.publish(job(1), queue)
    await env.broker.publish(job(2), queue)
    await eventually(lambda: env.count_is(env.topology.parking_queue, 2), what="parked")
    await consumer.cancel()
    # A parked message whose origin has no queue any more stays parked.
    gone = env.topology.hands_queue("gone")
    await env.broker.publish_body(
        b"orphan", gone, exchange=env.topology.dead_letter_exchange, headers={ORIGIN_HEADER: gone}
    )
    await eventually(lambda: env.count_is(env.topology.parking_queue, 3), what="orphan parked")

    fixed = Recorder()
    await env.broker.consume(queue, fixed)
    replayed = await replay_parked(env.broker, limit=10)

    assert replayed == 2
    await eventually(lambda: len(fixed.received) == 2, what="replayed deliveries")
    assert sorted(fixed.received, key=repr) == [job(1), job(2)]
    # Replayed messages start afresh: no dead-letter history, a new delivery count.
    assert all("x-death" not in d.headers for d in fixed.deliveries)
    assert all(d.delivery_count in (0, None) for d in fixed.deliveries)
    await eventually(lambda: env.count_is(env.topology.parking_queue, 1), what="orphan left")
    assert [p.origin for p in await list_parked(env.broker)] == [gone]


async def test_consuming_a_queue_that_does_not_exist_fails(env: Env) -> None:
    with pytest.raises(BrokerError, match="does not exist"):
        await env.broker.consume(env.topology.hands_queue("missing"), Recorder())


@needs_rabbitmqctl
async def test_ack_after_the_connection_died_is_dropped_and_redelivered(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    queue = await env.hands_queue()
    release = asyncio.Event()
    seen: list[Delivery] = []

    async def slow(message: Message, delivery: Delivery) -> None:
        seen.append(delivery)
        if len(seen) == 1:
            await release.wait()
        await delivery.ack()

    await env.broker.consume(queue, slow)
    await env.broker.publish(job(), queue)
    await eventually(lambda: len(seen) == 1, what="first delivery")

    caplog.set_level(logging.WARNING, logger="brainhands.broker")
    await close_connection(env.topology.namespace)
    # The handler is not cancelled with its channel: it finishes, and its ack is dropped.
    release.set()
    await eventually(lambda: seen[0].settled, what="first handler done")
    await eventually(lambda: len(seen) == 2, within=30, what="redelivery")

    assert "ack dropped" in caplog.text
    assert seen[1].returned
    await eventually(lambda: env.count_is(queue, 0), what="acked after redelivery")


@pytest.mark.chaos
@needs_rabbitmqctl
async def test_broker_outage_fails_fast_and_recovers(rabbitmq_url: str, namespace: str) -> None:
    topology = Topology(namespace, delivery_limit=DELIVERY_LIMIT)
    broker = await Broker.connect(rabbitmq_url, topology, publish_timeout=2.0)
    queue = await topology.declare_hands_pool(broker.channel, "email")
    received: list[Message] = []

    async def handler(message: Message, delivery: Delivery) -> None:
        received.append(message)
        await delivery.ack()

    await broker.consume(queue, handler)
    try:
        await broker.publish(job(1), queue)
        await eventually(lambda: received == [job(1)], what="delivery before outage")
        async with broker_stopped():
            started = time.monotonic()
            with pytest.raises(BrokerUnavailable):
                await broker.publish(job(2), queue)
            assert time.monotonic() - started < 2.0 + 1.0
            with pytest.raises(BrokerUnavailable):  # a side channel too: an error, not a crash
                await broker.ready_count(queue)

        async def publish_succeeds() -> bool:
            try:
                await broker.publish(job(3), queue)
            except BrokerUnavailable:
                return False
            return True

        await eventually(publish_succeeds, within=30, what="publish after restart")
        await eventually(lambda: job(3) in received, within=30, what="consumer back")
    finally:
        await broker.close()
        await delete_topology(rabbitmq_url, topology, [queue])


def test_only_work_queues_have_their_deliveries_counted_by_the_consumers() -> None:
    # A private listener's redelivery published again would reach every listener.
    topology = Topology("ns", queue_type="classic")
    work = [topology.hands_queue("email"), *topology.brain_queues("v1")]
    assert all(topology.is_work_queue(name) for name in work)
    others = [topology.parking_queue, "amq.gen-abc", "other.hands.email", "ns.live"]
    assert not any(topology.is_work_queue(name) for name in others)
