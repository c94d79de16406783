"""The limiter's scripts against a real Redis: rates on Redis's clock, concurrency slots that
free when their holder stops renewing, and every limit of a call granted all or none."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from brainhands.shared.keys import Keys
from brainhands.shared.limiter import Limiter, Refusal, Slots
from brainhands.shared.limits import Limit, Scope, wake_in
from tests.shared.test_lease import forget_namespace

pytestmark = pytest.mark.timeout(15)

SLOT_TTL_MS = 300


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def limiter(redis: Redis, namespace: str) -> AsyncIterator[Limiter]:
    """A limiter that reserves no turn ahead: a call is granted only when its turn came."""
    yield Limiter(redis, Keys(namespace), slot_ttl_ms=SLOT_TTL_MS, reserve_ahead_ms=0)
    await forget_namespace(redis, namespace)


async def granted(limiter: Limiter, scopes: list[Scope], holder: str) -> Slots:
    """Ask as a waiting call does (sleeping as ``wake_in`` says) until granted."""
    while True:
        answer = await limiter.take(scopes, holder)
        if isinstance(answer, Slots):
            return answer
        await asyncio.sleep(wake_in(answer.reason, answer.wait_ms))


async def test_a_rate_spaces_the_starts_and_says_how_long_to_wait(limiter: Limiter) -> None:
    scopes = [Scope("tool:send", Limit(rate=20))]
    assert isinstance(await limiter.take(scopes, "a"), Slots)
    refusal = await limiter.take(scopes, "b")
    assert isinstance(refusal, Refusal)
    assert (refusal.scope, refusal.reason) == ("tool:send", "rate")
    assert 0 < refusal.wait_ms <= 53

    starts = []
    began = time.monotonic()
    while time.monotonic() - began < 1.0:
        await granted(limiter, scopes, "c")
        starts.append(time.monotonic())
    # 20 a second, one every 52.5 ms (1/rate and 5%) by Redis's clock: as the client sees
    # them, each reply may come a little late, the span of them all not much.
    assert 16 <= len(starts) <= 20
    assert starts[-1] - starts[0] > (len(starts) - 1) * 0.0525 - 0.02


async def test_a_turn_near_enough_is_reserved(redis: Redis, namespace: str) -> None:
    limiter = Limiter(redis, Keys(namespace), slot_ttl_ms=SLOT_TTL_MS, reserve_ahead_ms=110)
    scopes = [Scope("tool:send", Limit(rate=20))]
    turns = [await limiter.take(scopes, f"h{i}") for i in range(4)]
    now, next_one, after = turns[:3]
    assert isinstance(now, Slots) and now.start_in_ms == 0
    # Granted at once, each to start at its own turn, 52.5 ms apart by Redis's clock.
    assert isinstance(next_one, Slots) and 45 < next_one.start_in_ms <= 53
    assert isinstance(after, Slots) and 95 < after.start_in_ms <= 105
    # The fourth turn (157.5 ms ahead) is beyond reach: asked again once it is within it.
    refusal = turns[3]
    assert isinstance(refusal, Refusal) and 40 < refusal.wait_ms <= 48


async def test_a_burst_starts_together_then_the_rate_holds(limiter: Limiter) -> None:
    scopes = [Scope("tool:send", Limit(rate=2, burst=3))]
    answers = [await limiter.take(scopes, f"h{i}") for i in range(4)]
    assert [isinstance(a, Slots) for a in answers] == [True, True, True, False]
    refusal = answers[3]
    assert isinstance(refusal, Refusal) and 400 < refusal.wait_ms <= 525


async def test_a_concurrency_holds_that_many_and_a_freed_slot_is_taken(limiter: Limiter) -> None:
    scopes = [Scope("tool:send", Limit(concurrency=2))]
    first = await limiter.take(scopes, "a")
    assert isinstance(first, Slots) and first.scopes == ("tool:send",)
    assert isinstance(await limiter.take(scopes, "b"), Slots)
    refusal = await limiter.take(scopes, "c")
    assert isinstance(refusal, Refusal) and refusal.reason == "concurrency"
    await limiter.release(first)
    assert isinstance(await limiter.take(scopes, "c"), Slots)


async def test_a_renewed_slot_is_kept_and_a_dead_holders_frees_at_its_deadline(
    limiter: Limiter,
) -> None:
    scopes = [Scope("tool:send", Limit(concurrency=1))]
    held = await limiter.take(scopes, "alive")
    assert isinstance(held, Slots)
    for _ in range(4):  # past its TTL, renewed all along
        await asyncio.sleep(SLOT_TTL_MS / 3000)
        assert await limiter.renew([held]) == [True]
    assert isinstance(await limiter.take(scopes, "next"), Refusal)

    # The holder dies: nothing renews its slot, which frees once its deadline passes.
    began = time.monotonic()
    await granted(limiter, scopes, "next")
    assert 0.1 < time.monotonic() - began < SLOT_TTL_MS / 1000 + 0.3
    assert await limiter.renew([held]) == [False]  # the dead holder's slot is gone


async def test_every_limit_grants_or_none_does(
    limiter: Limiter, redis: Redis, namespace: str
) -> None:
    tool = Scope("tool:send", Limit(rate=1, burst=2, concurrency=5))
    pool = Scope("pool:email", Limit(concurrency=1))
    first = await limiter.take([tool, pool], "a")
    assert isinstance(first, Slots) and first.scopes == ("tool:send", "pool:email")
    # The tool would grant "b" (its burst has a second start), the pool is full: nothing
    # of the tool's limit is taken either, neither a slot nor that start.
    refusal = await limiter.take([tool, pool], "b")
    assert isinstance(refusal, Refusal) and refusal.scope == "pool:email"
    assert await redis.zrange(Keys(namespace).limit_slots("tool:send"), 0, -1) == [b"a"]
    assert isinstance(await limiter.take([tool], "c"), Slots)  # the burst's second start
    assert isinstance(await limiter.take([tool], "d"), Refusal)


async def test_redis_restarting_empty_forgets_the_slots(
    limiter: Limiter, redis: Redis, namespace: str
) -> None:
    scopes = [Scope("tool:send", Limit(concurrency=1))]
    held = await limiter.take(scopes, "a")
    assert isinstance(held, Slots)
    await forget_namespace(redis, namespace)
    assert await limiter.renew([held]) == [False]  # its call goes on, uncounted
    assert isinstance(await limiter.take(scopes, "b"), Slots)
