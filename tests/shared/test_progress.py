"""Delivery marks: every message carries its publish time, and the marks consumers share in
Redis only move forward, whichever consumer is ahead."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from brainhands.shared.delivery import Delivery
from brainhands.shared.keys import Keys
from brainhands.shared.messages import SessionWake
from brainhands.shared.progress import MARKS_TTL_S, QueueProgress
from tests.helpers.rabbit import BrokerEnv, broker_env


@pytest.fixture
async def redis(redis_url: str, namespace: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.delete(Keys(namespace).queue_progress())
    await client.aclose()


@pytest.fixture
async def env(rabbitmq_url: str, namespace: str) -> AsyncIterator[BrokerEnv]:
    async with broker_env(rabbitmq_url, namespace) as opened:
        yield opened


@pytest.mark.integration
@pytest.mark.timeout(30)
async def test_a_delivered_message_says_when_it_was_published(env: BrokerEnv) -> None:
    queue = await env.brain_queue("v1")
    before = time.time()
    await env.broker.publish(SessionWake(session_id="s", compat="v1", reason="x"), queue)

    async with env.broker.side_channel() as channel:
        declared = await channel.declare_queue(queue, passive=True)
        delivery = Delivery(await declared.get(no_ack=True))

    assert delivery.published_at is not None
    # Whole seconds: at most a second before the publish call.
    assert before - 1 < delivery.published_at <= time.time()


@pytest.mark.integration
@pytest.mark.timeout(30)
async def test_marks_only_move_forward_whichever_consumer_shares_them(
    redis: Redis, namespace: str
) -> None:
    ahead, behind = QueueProgress(redis, Keys(namespace)), QueueProgress(redis, Keys(namespace))
    ahead.note("q1", 200.0)
    ahead.note("q1", 150.0)  # an older message delivered later: the mark stays
    behind.note("q1", 100.0)
    behind.note("q2", 50.0)
    behind.note("q2", None)  # a message without a publish time says nothing

    await ahead.share()
    await behind.share()

    assert await ahead.read(["q1", "q2", "q3"]) == {"q1": 200.0, "q2": 50.0}
    # Marks nobody refreshes vanish: a queue nobody consumes has none.
    assert 0 < await redis.ttl(Keys(namespace).queue_progress()) <= MARKS_TTL_S
    # What was shared is not written again; a newer delivery moves the mark.
    behind.note("q1", 300.0)
    await behind.share()
    await ahead.share()
    assert await behind.read(["q1"]) == {"q1": 300.0}
    assert await behind.read([]) == {}


@pytest.mark.integration
@pytest.mark.timeout(30)
async def test_without_redis_marks_a_sweeper_reads_none(redis: Redis, namespace: str) -> None:
    """A Redis that restarted empty: no marks, so the sweeper holds by time alone."""
    progress = QueueProgress(redis, Keys(namespace))
    progress.note("q1", 100.0)
    await progress.share()
    await redis.delete(Keys(namespace).queue_progress())

    assert await progress.read(["q1"]) == {}
