"""Leases against a real Redis: ownership, expiry, fencing tokens and ``hold()``."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from brainhands.shared.errors import LeaseBackendError, LeaseLost, StaleLeaseError
from brainhands.shared.keys import Keys, session_resource
from brainhands.shared.lease import Lease, LeaseManager, connect_redis
from tests.helpers.polling import eventually

pytestmark = pytest.mark.timeout(10)

TTL_MS = 400
_T = TypeVar("_T")
RESOURCE = session_resource("s1")


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def keys(redis: Redis, namespace: str) -> AsyncIterator[Keys]:
    yield Keys(namespace)
    await forget_namespace(redis, namespace)


@pytest.fixture
def manager(redis: Redis, keys: Keys) -> LeaseManager:
    return LeaseManager(redis, keys, ttl_ms=TTL_MS)


@pytest.fixture
async def dead_redis() -> AsyncIterator[Redis]:
    """A client of a port where nothing listens, failing at once instead of retrying."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = Redis(host="127.0.0.1", port=port, retry=Retry(NoBackoff(), 0))
    yield client
    await client.aclose()


@pytest.fixture
async def silent_redis() -> AsyncIterator[Redis]:
    """A client of a server that accepts connections and never answers: a hung Redis."""
    held: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    client = Redis(host="127.0.0.1", port=server.sockets[0].getsockname()[1])
    yield client
    await client.aclose()
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


async def forget_namespace(redis: Redis, namespace: str) -> None:
    """Delete the namespace's keys: for its resources, Redis restarted empty."""
    found = [key async for key in redis.scan_iter(match=f"{namespace}:*")]
    if found:
        await redis.delete(*found)


async def acquire_eventually(manager: LeaseManager, resource: str) -> Lease:
    deadline = time.monotonic() + 3 * TTL_MS / 1000
    while (lease := await manager.acquire(resource)) is None:
        assert time.monotonic() < deadline, f"{resource} never became free"
        await asyncio.sleep(0.02)
    return lease


async def acquired(manager: LeaseManager, owner: str | None = None) -> Lease:
    lease = await manager.acquire(RESOURCE, owner=owner)
    assert lease is not None
    return lease


class MemoryFence:
    """Stands in for the store's ``UPDATE ... SET fence = :t WHERE fence < :t``."""

    def __init__(self, fence: int = 0) -> None:
        self.fence = fence
        self.claims: list[int] = []

    async def claim(self, token: int) -> int:
        self.claims.append(token)
        if token <= self.fence:
            raise StaleLeaseError(RESOURCE, token, self.fence)
        self.fence = token
        return token


# acquire / renew / release


async def test_acquire_takes_the_lease_with_a_ttl_and_the_first_token(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    lease = await acquired(manager)

    assert (lease.resource, lease.token, lease.ttl_ms) == (RESOURCE, 1, TTL_MS)
    assert lease.owner
    assert 0 < await redis.pttl(keys.lease(RESOURCE)) <= TTL_MS


async def test_a_second_owner_cannot_acquire_while_the_lease_is_held(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    first = await acquired(manager)

    assert await manager.acquire(RESOURCE) is None
    assert await manager.acquire(RESOURCE, owner=first.owner) is None
    assert int(await redis.get(keys.fence(RESOURCE)) or 0) == first.token  # refusals burn no token


async def test_renew_extends_only_the_holders_lease(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    lease = await acquired(manager)
    await asyncio.sleep(TTL_MS / 2000)

    assert not await manager.renew(dataclasses.replace(lease, owner="intruder"))
    assert await redis.pttl(keys.lease(RESOURCE)) <= TTL_MS / 2
    assert await manager.renew(lease)
    assert await redis.pttl(keys.lease(RESOURCE)) > TTL_MS * 3 / 4


async def test_release_by_the_holder_frees_the_lease_for_the_next_owner(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    lease = await acquired(manager)

    assert await manager.release(lease)
    assert not await redis.exists(keys.lease(RESOURCE))
    assert not await manager.release(lease)
    assert (await acquired(manager)).token == lease.token + 1


async def test_release_by_another_owner_does_nothing(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    lease = await acquired(manager)

    assert not await manager.release(dataclasses.replace(lease, owner="intruder"))
    assert await redis.exists(keys.lease(RESOURCE))
    assert await manager.renew(lease)


async def scripts_run(
    redis: Redis, lease_keys: set[str], work: Callable[[], Awaitable[_T]]
) -> tuple[int, _T]:
    """``work()``'s result, and how many script calls naming any of ``lease_keys`` Redis ran
    for it."""
    async with redis.monitor() as monitor:  # every command Redis runs, ours picked out
        await redis.ping()  # Redis has answered: the monitor listens from here on
        counting = asyncio.ensure_future(_count_scripts(monitor, lease_keys))
        result = await work()
        await redis.ping()  # a marker: every command of the work came before it
        return await counting, result


async def _count_scripts(monitor: Any, lease_keys: set[str]) -> int:
    calls = 0
    async for command in monitor.listen():
        words = command["command"].split()
        if words[0] == "EVALSHA" and lease_keys & set(words):
            calls += 1
        elif words[0] == "PING" and calls:
            return calls
    return calls


async def test_acquisitions_asked_together_share_one_script_call_each_answered_alone(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    held = await acquired(manager)  # RESOURCE is taken: its acquisition below is refused alone
    resources = [RESOURCE] + [session_resource(f"batch-{i}") for i in range(9)]
    lease_keys = {keys.lease(r) for r in resources}

    async def lone_then_together() -> list[Lease | None]:
        # The first goes out at once, alone; the nine asked meanwhile share the next call.
        first = asyncio.ensure_future(manager.acquire(resources[0]))
        await asyncio.sleep(0)
        rest = await asyncio.gather(*(manager.acquire(r) for r in resources[1:]))
        return [await first, *rest]

    calls, leases = await scripts_run(redis, lease_keys, lone_then_together)

    assert calls == 2
    assert leases[0] is None
    assert all(lease is not None and lease.token == 1 for lease in leases[1:])
    assert await redis.exists(*lease_keys) == 10
    assert int(await redis.get(keys.fence(RESOURCE)) or 0) == held.token  # no token burnt


async def test_releases_asked_together_share_one_script_call_each_answered_alone(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    leases = [await manager.acquire(session_resource(f"free-{i}")) for i in range(8)]
    assert all(leases)
    mine = [lease for lease in leases if lease is not None]
    intruder = dataclasses.replace(mine[0], owner="intruder")
    lease_keys = {keys.lease(lease.resource) for lease in mine}

    async def together() -> list[bool]:
        return await asyncio.gather(*(manager.release(lease) for lease in [intruder, *mine[1:]]))

    calls, released = await scripts_run(redis, lease_keys, together)

    assert calls == 1
    assert released == [False] + [True] * 7
    assert await redis.exists(*lease_keys) == 1  # the intruder released nothing


async def test_a_stale_lease_cannot_touch_a_newer_acquisition_by_the_same_owner(
    manager: LeaseManager,
) -> None:
    old = await acquired(manager, owner="worker-1")
    await manager.release(old)
    new = await acquired(manager, owner="worker-1")

    assert not await manager.renew(old)
    assert not await manager.release(old)
    assert await manager.renew(new)


async def test_expiry_lets_another_owner_acquire_with_a_larger_token(
    manager: LeaseManager,
) -> None:
    first = await acquired(manager)

    second = await acquire_eventually(manager, RESOURCE)

    assert second.token > first.token
    assert second.owner != first.owner
    assert not await manager.renew(first)
    assert not await manager.release(first)


async def test_tokens_strictly_increase_across_acquisitions(manager: LeaseManager) -> None:
    tokens = []
    for _ in range(5):
        lease = await acquired(manager)
        tokens.append(lease.token)
        await manager.release(lease)

    assert tokens == [1, 2, 3, 4, 5]


async def test_a_floor_keeps_tokens_above_it_and_never_lowers_the_counter(
    manager: LeaseManager,
) -> None:
    async def next_token(floor: int = 0) -> int:
        lease = await manager.acquire(RESOURCE, floor=floor)
        assert lease is not None
        await manager.release(lease)
        return lease.token

    assert await next_token(floor=41) == 42
    await manager.raise_floor(RESOURCE, 100)
    assert await next_token() == 101
    await manager.raise_floor(RESOURCE, 5)
    assert await next_token(floor=50) == 102


async def test_backend_failures_are_wrapped(dead_redis: Redis, keys: Keys) -> None:
    manager = LeaseManager(dead_redis, keys, ttl_ms=TTL_MS)

    with pytest.raises(LeaseBackendError) as failed:
        await manager.acquire(RESOURCE)

    assert isinstance(failed.value.__cause__, RedisError)
    assert failed.value.retryable


# acquire_fenced: the store is the truth


async def test_fenced_tokens_keep_increasing_after_redis_forgets_the_counter(
    manager: LeaseManager, redis: Redis, namespace: str
) -> None:
    store = MemoryFence()
    tokens = []
    for forget in (False, False, False, True, False):
        if forget:
            await forget_namespace(redis, namespace)
        lease = await manager.acquire_fenced(RESOURCE, store.claim)
        assert lease is not None
        tokens.append(lease.token)
        await manager.release(lease)

    assert tokens == [1, 2, 3, 4, 5]
    assert store.claims == [1, 2, 3, 1, 4, 5]  # Redis offered 1 again; the store refused it
    assert store.fence == 5


async def test_an_idle_counter_expires_and_tokens_still_increase(redis: Redis, keys: Keys) -> None:
    manager = LeaseManager(redis, keys, ttl_ms=TTL_MS, counter_ttl_ms=300)
    store = MemoryFence()
    first = await manager.acquire_fenced(RESOURCE, store.claim)
    assert first is not None
    await manager.release(first)
    assert 0 < await redis.pttl(keys.fence(RESOURCE)) <= 300

    await asyncio.sleep(0.4)
    assert await redis.exists(keys.fence(RESOURCE)) == 0  # forgotten, as in a restart
    again = await manager.acquire_fenced(RESOURCE, store.claim)

    assert again is not None and again.token == 2
    assert store.claims == [1, 1, 2]  # the store refused the counter's fresh start
    assert 0 < await redis.pttl(keys.fence(RESOURCE)) <= 300  # raised with its TTL


async def test_a_claim_can_refuse_a_token_equal_to_the_stored_fence(
    manager: LeaseManager,
) -> None:
    # An earlier holder claimed token 1, then Redis restarted empty and offers 1 again.
    store = MemoryFence(fence=1)

    lease = await manager.acquire_fenced(RESOURCE, store.claim)

    assert lease is not None
    assert (lease.token, store.claims) == (2, [1, 2])


async def test_acquire_fenced_returns_none_while_another_owner_holds_the_lease(
    manager: LeaseManager,
) -> None:
    await acquired(manager)
    store = MemoryFence()

    assert await manager.acquire_fenced(RESOURCE, store.claim) is None
    assert store.claims == []


async def test_acquire_fenced_releases_the_lease_when_the_claim_fails(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    async def broken_claim(token: int) -> int:
        raise RuntimeError("store unavailable")

    with pytest.raises(RuntimeError, match="store unavailable"):
        await manager.acquire_fenced(RESOURCE, broken_claim)

    assert not await redis.exists(keys.lease(RESOURCE))


async def test_acquire_fenced_gives_up_after_its_attempts(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    claims = []

    async def store_always_ahead(token: int) -> int:
        claims.append(token)
        raise StaleLeaseError(RESOURCE, token, token + 10)

    assert await manager.acquire_fenced(RESOURCE, store_always_ahead, attempts=3) is None
    assert claims == [1, 12, 23]
    assert not await redis.exists(keys.lease(RESOURCE))
    assert int(await redis.get(keys.fence(RESOURCE)) or 0) == 33  # the next token beats the store


# hold(): renew in the background, stop the body when the lease is lost


async def test_hold_keeps_the_lease_alive_past_several_ttls(manager: LeaseManager) -> None:
    lease = await acquired(manager)

    async with manager.hold(lease) as held:
        await asyncio.sleep(4 * TTL_MS / 1000)
        assert await manager.acquire(RESOURCE) is None

    assert held is lease
    assert await manager.renew(lease)  # leaving the block did not release it
    assert (await acquire_eventually(manager, RESOURCE)).token > lease.token  # nor renew it


async def test_hold_stops_the_body_within_one_interval_when_the_lease_vanishes(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    lease = await acquired(manager)
    interval = manager.renew_every

    with pytest.raises(LeaseLost) as lost:
        async with manager.hold(lease):
            await redis.delete(keys.lease(RESOURCE))
            vanished = time.monotonic()
            await asyncio.sleep(10)

    assert time.monotonic() - vanished < interval + 0.2
    assert lost.value.resource == RESOURCE
    assert "another holder" in lost.value.reason


async def test_hold_lease_lost_is_not_swallowed_by_except_exception(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    lease = await acquired(manager)
    swallowed = False

    with pytest.raises(LeaseLost):
        async with manager.hold(lease):
            await redis.delete(keys.lease(RESOURCE))
            assert await manager.acquire(RESOURCE) is not None
            try:  # noqa: SIM105 - the exact pattern of careless tool code
                await asyncio.sleep(10)
            except Exception:
                pass
            swallowed = True

    assert not swallowed


async def test_hold_loses_the_lease_when_the_process_was_paused_past_the_ttl(
    manager: LeaseManager,
) -> None:
    lease = await acquired(manager)

    with pytest.raises(LeaseLost) as lost:
        async with manager.hold(lease):
            # Blocks the whole event loop, renewer included, like SIGSTOP would.
            time.sleep(1.5 * TTL_MS / 1000)  # noqa: ASYNC251
            await asyncio.sleep(10)

    assert "not renewed within its TTL" in lost.value.reason


async def test_hold_loses_the_lease_when_renewal_fails_in_redis(
    manager: LeaseManager, dead_redis: Redis, keys: Keys
) -> None:
    lease = await acquired(manager)
    unreachable = LeaseManager(dead_redis, keys, ttl_ms=TTL_MS)

    with pytest.raises(LeaseLost) as lost:
        async with unreachable.hold(lease):
            await asyncio.sleep(10)

    assert "renewal failed" in lost.value.reason


async def test_hold_loses_the_lease_when_redis_does_not_answer_before_it_expires(
    redis: Redis, silent_redis: Redis, keys: Keys
) -> None:
    # A longer TTL than the other tests': the renewal goes out a quarter of it in, and a
    # loaded machine's event loop may start that round late; it must start before the
    # lease runs out for this to be the hung-Redis case rather than the paused one.
    ttl_ms = 3 * TTL_MS
    lease = await acquired(LeaseManager(redis, keys, ttl_ms=ttl_ms))
    unanswered = LeaseManager(silent_redis, keys, ttl_ms=ttl_ms)

    with pytest.raises(LeaseLost) as lost:
        async with unanswered.hold(lease):
            await asyncio.sleep(10)

    assert time.monotonic() - lease.acquired_at < ttl_ms / 1000 + 0.2
    assert "did not confirm a renewal" in lost.value.reason


async def test_the_renewals_of_all_held_leases_go_out_in_one_request(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    leases = [await manager.acquire(session_resource(f"many-{i}")) for i in range(20)]
    lease_keys = {keys.lease(lease.resource) for lease in leases if lease is not None}
    assert len(lease_keys) == 20
    renewals: list[set[str]] = []

    async def hold_for_a_while(lease: Lease) -> None:
        async with manager.hold(lease):
            await asyncio.sleep(3 * TTL_MS / 1000)

    async with redis.monitor() as monitor:  # every command Redis runs, ours picked out
        holders = asyncio.gather(*(hold_for_a_while(lease) for lease in leases if lease))
        async with asyncio.timeout(3 * TTL_MS / 1000):
            async for command in monitor.listen():
                words = command["command"].split()
                if words[0] == "EVALSHA" and lease_keys & set(words):  # not the script's inside
                    renewals.append(lease_keys & set(words))
                    if len(renewals) == 4:
                        break
        await holders

    assert renewals == [lease_keys] * 4
    assert await redis.exists(*lease_keys) == 20  # kept past three TTLs


async def test_a_loop_blocked_for_less_than_the_ttl_margin_keeps_the_lease(
    redis: Redis, keys: Keys
) -> None:
    manager = LeaseManager(redis, keys, ttl_ms=1500)
    lease = await acquired(manager)

    async with manager.hold(lease):
        for _ in range(4):  # 2.4 s in all, well past one TTL
            time.sleep(0.5)  # noqa: ASYNC251 - a tool hogging the event loop for TTL/3
            await asyncio.sleep(0.1)

    assert await manager.renew(lease)


async def test_an_unanswering_redis_stops_the_holder_and_later_acquisitions_work(
    redis_url: str, redis: Redis, keys: Keys
) -> None:
    ttl = 1.0
    manager = LeaseManager(connect_redis(redis_url), keys, ttl_ms=int(ttl * 1000))
    lease = await acquired(manager)
    # CLIENT PAUSE stops every client of this Redis, other tests' too: lifted as soon as the
    # lease is lost and has expired, and by Redis itself after 4 s at worst.
    try:
        with pytest.raises(LeaseLost) as lost:
            async with manager.hold(lease):
                await redis.client_pause(4000)
                paused = time.monotonic()
                await asyncio.sleep(10)
        stopped = time.monotonic()
        await asyncio.sleep(max(0.0, paused + ttl + 0.1 - time.monotonic()))
    finally:
        await redis.client_unpause()

    assert stopped - paused <= ttl + 0.2
    assert "did not confirm a renewal" in lost.value.reason
    deadline = time.monotonic() + 3
    while (again := await manager.acquire(RESOURCE)) is None:
        assert time.monotonic() < deadline, "the lease never became free after the pause"
        await asyncio.sleep(0.05)
    assert again.token > lease.token
    async with manager.hold(again):
        await asyncio.sleep(2 * ttl)
    assert await manager.renew(again)


async def test_hold_lets_a_cancel_from_elsewhere_propagate(manager: LeaseManager) -> None:
    lease = await acquired(manager)
    entered = asyncio.Event()

    async def work() -> None:
        async with manager.hold(lease):
            entered.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(work())
    await entered.wait()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert await manager.renew(lease)


def test_a_renewal_interval_must_be_shorter_than_the_ttl(redis: Redis, keys: Keys) -> None:
    with pytest.raises(ValueError, match="renew_every"):
        LeaseManager(redis, keys, ttl_ms=TTL_MS, renew_every=TTL_MS / 1000)


async def test_the_renewal_connection_is_taken_only_once_a_renewal_is_due(
    manager: LeaseManager, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Most leases are let go of before their first renewal: they cost no client of its own.
    clients: list[Redis] = []
    client = redis.client

    def counted() -> Redis:
        clients.append(client())
        return clients[-1]

    monkeypatch.setattr(redis, "client", counted)
    for _ in range(3):
        async with manager.hold(await acquired(manager)) as lease:
            await asyncio.sleep(0)
        await manager.release(lease)
    assert clients == []

    async with manager.hold(await acquired(manager)):
        await eventually(lambda: len(clients) == 1, what="a renewal round and its client")
        await asyncio.sleep(2 * manager.renew_every)  # more rounds, on the same client
    assert len(clients) == 1
    await eventually(lambda: clients[0].connection is None, what="the renewal client closed")


# Handed over: the claim may wait for the holder's first commit


async def test_only_a_lease_handed_over_by_the_previous_token_is_marked_so(
    manager: LeaseManager,
) -> None:
    first = await acquired(manager)
    assert not first.handed_over  # nobody held it before
    await manager.release(first, hand_over=True)

    second = await acquired(manager)
    assert second.handed_over
    await manager.release(second)  # let go without handing over (its work failed)

    third = await acquired(manager)
    assert not third.handed_over
    await manager.release(third, hand_over=True)
    fourth = await acquired(manager)
    assert fourth.handed_over


async def test_an_expired_lease_is_not_handed_over_even_if_an_earlier_one_was(
    manager: LeaseManager,
) -> None:
    first = await acquired(manager)
    await manager.release(first, hand_over=True)
    paused = await acquired(manager)  # its holder stops and never renews

    resumed_too_late = await acquire_eventually(manager, RESOURCE)
    assert not resumed_too_late.handed_over
    # The paused holder's release, once it resumes, hands nothing over: the lease is not its.
    assert not await manager.release(paused, hand_over=True)
    assert (await acquire_eventually(manager, RESOURCE)).handed_over is False


async def test_a_hand_over_is_forgotten_with_the_counter(
    manager: LeaseManager, redis: Redis, namespace: str
) -> None:
    lease = await acquired(manager)
    await manager.release(lease, hand_over=True)
    await forget_namespace(redis, namespace)  # Redis restarted empty

    assert not (await acquired(manager)).handed_over


async def test_a_handed_over_lease_is_checked_and_claimed_by_its_first_write(
    manager: LeaseManager,
) -> None:
    store = MemoryFence()
    checks: list[int] = []

    async def check(token: int) -> None:
        checks.append(token)
        if token <= store.fence:
            raise StaleLeaseError(RESOURCE, token, store.fence)

    first = await manager.acquire_fenced(RESOURCE, store.claim, check=check)
    assert first is not None and not first.handed_over
    await manager.release(first, hand_over=True)
    second = await manager.acquire_fenced(RESOURCE, store.claim, check=check)

    assert second is not None and second.handed_over
    assert (store.claims, checks, store.fence) == ([1], [2], 1)


async def test_a_refused_check_raises_the_counter_and_claims_the_next_token(
    manager: LeaseManager,
) -> None:
    store = MemoryFence()
    first = await manager.acquire_fenced(RESOURCE, store.claim)
    assert first is not None
    await manager.release(first, hand_over=True)
    store.fence = 7  # another way in moved the store's fence past Redis's counter

    async def check(token: int) -> None:
        if token <= store.fence:
            raise StaleLeaseError(RESOURCE, token, store.fence)

    lease = await manager.acquire_fenced(RESOURCE, store.claim, check=check)

    assert lease is not None and not lease.handed_over
    assert (lease.token, store.claims, store.fence) == (8, [1, 8], 8)


async def test_an_acquisition_after_a_refusal_is_never_handed_over(
    manager: LeaseManager, redis: Redis, keys: Keys
) -> None:
    # The counter was lost while the handed-over key survived (a short counter TTL, an
    # eviction): raising the counter to the store's fence must not make it look handed over.
    lease = await acquired(manager)
    await manager.release(lease, hand_over=True)
    await redis.delete(keys.fence(RESOURCE))
    store = MemoryFence(fence=1)

    again = await manager.acquire_fenced(RESOURCE, store.claim, check=store.claim)

    assert again is not None and again.token == 2 and not again.handed_over
    assert store.claims == [1, 2]  # the refusal, then the claim of the next token at once


async def test_a_manager_without_hand_overs_claims_every_time(redis: Redis, keys: Keys) -> None:
    manager = LeaseManager(redis, keys, ttl_ms=TTL_MS, hand_over=False)
    first = await acquired(manager)
    await manager.release(first, hand_over=True)

    assert not (await acquired(manager)).handed_over
    assert await redis.exists(keys.handed(RESOURCE)) == 0
