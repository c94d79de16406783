"""Redis as the witness of what the store had committed (``shared.witness``): the pure
comparisons, and the lease scripts that record, return and refuse, against a real Redis."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from redis.asyncio import Redis

from brainhands.shared.errors import NotFoundError, StoreWentBack
from brainhands.shared.keys import Keys, operation_resource, session_resource
from brainhands.shared.lease import Lease, LeaseManager
from brainhands.shared.witness import (
    accept_rollback,
    evidence,
    operation_went_back,
    read_evidence,
    session_went_back,
    went_back,
)
from tests.shared.test_lease import forget_namespace

pytestmark = pytest.mark.timeout(10)

SESSION = session_resource("s1")
OPERATION = operation_resource("op1")


# The comparisons: pure functions


def test_a_session_at_or_past_its_witnessed_version_did_not_go_back() -> None:
    assert session_went_back(SESSION, 5, 5) is None
    assert session_went_back(SESSION, 5, 9) is None


def test_a_session_with_no_witness_cannot_be_judged() -> None:
    assert session_went_back(SESSION, None, 0) is None
    assert session_went_back(SESSION, None, None) is None


def test_a_session_behind_its_witnessed_version_went_back_naming_both() -> None:
    found = session_went_back(SESSION, 7, 4)

    assert found is not None
    assert (found.resource, found.stored, found.witnessed) == (SESSION, "version 4", "version 7")
    assert "version 4" in str(found) and "version 7" in str(found) and SESSION in str(found)
    assert found.retryable  # the delivery is held, neither acked nor parked


def test_a_witnessed_session_the_store_no_longer_has_went_back() -> None:
    found = session_went_back(SESSION, 2, None)

    assert found is not None and found.stored == "no such session"


@pytest.mark.parametrize("status", ["succeeded", "failed", "uncertain", "cancelled"])
def test_an_operation_witnessed_final_and_still_final_did_not_go_back(status: str) -> None:
    assert operation_went_back(OPERATION, 3, status) is None


@pytest.mark.parametrize("status", ["intended", "started", None])
def test_an_operation_witnessed_final_and_found_open_or_missing_went_back(
    status: str | None,
) -> None:
    found = operation_went_back(OPERATION, 3, status)

    assert found is not None
    assert found.witnessed == "a final outcome (under fence 3)"
    assert found.stored == ("no such operation" if status is None else f"status {status}")


def test_an_operation_with_no_witness_cannot_be_judged() -> None:
    assert operation_went_back(OPERATION, None, "intended") is None


def test_evidence_reads_back_as_the_same_finding() -> None:
    found = StoreWentBack(SESSION, "version 4", "version 7")

    read = read_evidence(evidence(found, by="host:1"))

    assert (read.resource, read.stored, read.witnessed) == (SESSION, "version 4", "version 7")
    assert json.loads(evidence(found, by="host:1"))["by"] == "host:1"


def test_a_flag_of_another_form_still_refuses_saying_what_it_holds() -> None:
    assert "garbage" in str(read_evidence(b"garbage"))


# The lease scripts against a real Redis


@dataclass
class Rig:
    """A lease manager of a fresh namespace, and a client to look into its Redis."""

    manager: LeaseManager
    redis: Redis
    keys: Keys


@pytest.fixture
async def rig(redis_url: str, namespace: str) -> AsyncIterator[Rig]:
    redis = Redis.from_url(redis_url)
    keys = Keys(namespace)
    yield Rig(LeaseManager(redis, keys, ttl_ms=400, counter_ttl_ms=60_000), redis, keys)
    await forget_namespace(redis, namespace)
    await redis.aclose()


async def take(manager: LeaseManager, resource: str = SESSION) -> Lease:
    lease = await manager.acquire(resource)
    assert lease is not None
    return lease


async def test_a_release_records_the_witness_and_the_next_acquisition_returns_it(rig: Rig) -> None:
    manager = rig.manager
    first = await take(manager)
    assert first.witnessed is None
    assert await manager.release(first, witness=4)

    assert (await take(manager)).witnessed == 4


async def test_a_release_without_a_witness_keeps_the_one_recorded(rig: Rig) -> None:
    manager = rig.manager
    await manager.release(await take(manager), witness=4)
    await manager.release(await take(manager))

    assert (await take(manager)).witnessed == 4


async def test_the_larger_witness_is_kept_whatever_order_releases_come_in(rig: Rig) -> None:
    manager = rig.manager
    await manager.release(await take(manager), witness=9)
    await manager.release(await take(manager), witness=5)  # a slower holder's older commit

    assert (await take(manager)).witnessed == 9


async def test_an_expired_holder_still_records_what_the_store_acknowledged(rig: Rig) -> None:
    manager, redis, keys = rig.manager, rig.redis, rig.keys
    lease = await take(manager)
    await redis.delete(keys.lease(SESSION))  # expired

    assert not await manager.release(lease, witness=3)
    assert (await take(manager)).witnessed == 3


async def test_the_witness_lives_as_long_as_the_fence_counter(rig: Rig) -> None:
    manager, redis, keys = rig.manager, rig.redis, rig.keys
    await manager.release(await take(manager), witness=2)
    witness_ttl = await redis.pttl(keys.witness(SESSION))
    fence_ttl = await redis.pttl(keys.fence(SESSION))

    assert 0 < witness_ttl <= 60_000 and abs(witness_ttl - fence_ttl) < 1_000


async def test_a_witness_redis_forgot_refuses_nothing(rig: Rig, namespace: str) -> None:
    manager, redis, keys = rig.manager, rig.redis, rig.keys
    await manager.release(await take(manager), witness=8)
    await forget_namespace(redis, namespace)  # Redis restarted empty, or failed over

    lease = await manager.acquire_fenced(
        SESSION,
        claim=_accept,
        went_back=lambda lease: session_went_back(SESSION, lease.witnessed, 1),
    )

    assert lease is not None and lease.witnessed is None
    assert await went_back(redis, keys) is None


async def _accept(token: int) -> int:
    return token


async def test_a_claim_behind_the_witness_sets_the_flag_releases_and_raises(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    manager, redis, keys = rig.manager, rig.redis, rig.keys
    await manager.release(await take(manager), witness=7)

    with pytest.raises(StoreWentBack, match="version 3"):
        await manager.acquire_fenced(
            SESSION,
            claim=_accept,
            went_back=lambda lease: session_went_back(SESSION, lease.witnessed, 3),
        )

    assert not await redis.exists(keys.lease(SESSION))  # let go at once
    flag = await went_back(redis, keys)
    assert flag is not None
    assert (flag.resource, flag.stored, flag.witnessed) == (SESSION, "version 3", "version 7")
    critical = [r for r in caplog.records if r.levelname == "CRITICAL"]
    assert [getattr(r, "resource", None) for r in critical] == [SESSION]


async def test_a_witnessed_row_the_claim_finds_missing_went_back(rig: Rig) -> None:
    manager, redis, keys = rig.manager, rig.redis, rig.keys
    await manager.release(await take(manager), witness=2)

    async def missing(token: int) -> None:
        raise NotFoundError("session s1 does not exist")

    with pytest.raises(StoreWentBack, match="no such session"):
        await manager.acquire_fenced(
            SESSION,
            claim=missing,
            went_back=lambda lease: session_went_back(SESSION, lease.witnessed, None),
        )
    assert await went_back(redis, keys) is not None


async def test_a_missing_row_with_no_witness_is_only_missing(rig: Rig) -> None:
    manager, redis, keys = rig.manager, rig.redis, rig.keys

    async def missing(token: int) -> None:
        raise NotFoundError("session s1 does not exist")

    with pytest.raises(NotFoundError):
        await manager.acquire_fenced(
            SESSION,
            claim=missing,
            went_back=lambda lease: session_went_back(SESSION, lease.witnessed, None),
        )
    assert await went_back(redis, keys) is None


async def test_while_the_flag_stands_every_acquisition_is_refused_with_its_evidence(
    rig: Rig,
) -> None:
    manager, redis, keys = rig.manager, rig.redis, rig.keys
    await manager.declare_went_back(StoreWentBack(OPERATION, "status intended", "a final outcome"))
    # A later finding does not overwrite the first.
    await manager.declare_went_back(StoreWentBack(SESSION, "version 1", "version 2"))

    for resource in (SESSION, OPERATION, "sweeper"):
        with pytest.raises(StoreWentBack, match="status intended") as refused:
            await manager.acquire(resource)
        assert refused.value.resource == OPERATION
        assert not await redis.exists(keys.lease(resource))


async def test_accepting_the_rollback_deletes_the_flag_and_the_witnesses_of_its_namespace(
    rig: Rig, namespace: str
) -> None:
    manager, redis, keys = rig.manager, rig.redis, rig.keys
    other = Keys(f"{namespace}-other")
    bystander = LeaseManager(redis, other, ttl_ms=400)
    try:
        await bystander.release(await take(bystander), witness=5)
        for n in range(3):
            await manager.release(await take(manager, session_resource(f"s{n}")), witness=n + 1)
        await manager.declare_went_back(StoreWentBack(SESSION, "version 0", "version 1"))

        finding, deleted = await accept_rollback(redis, keys)

        assert finding is not None and finding.resource == SESSION
        assert deleted == 3
        assert await went_back(redis, keys) is None
        assert (await take(manager, session_resource("s1"))).witnessed is None
        assert (await take(bystander)).witnessed == 5  # another deployment's are kept
    finally:
        await forget_namespace(redis, other.namespace)
