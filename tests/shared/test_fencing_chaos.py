"""Fencing holds when holders freeze and when Redis forgets everything."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from brainhands.shared.errors import StaleLeaseError
from brainhands.shared.keys import Keys, session_resource
from brainhands.shared.lease import LeaseManager, connect_redis
from brainhands.shared.store import Draft, Store
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module
from tests.helpers.stores import StoreTarget

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(120)]

REDIS_START = [
    "redis-server",
    "--daemonize",
    "yes",
    "--bind",
    "127.0.0.1",
    "-::1",
    "--port",
    "6379",
    "--save",
    "",
    "--appendonly",
    "no",
    "--dir",
    "/var/lib/redis",
    "--logfile",
    "/var/log/redis/ci.log",
]


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = connect_redis(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def leases(redis: Redis, namespace: str) -> LeaseManager:
    return LeaseManager(redis, Keys(namespace), ttl_ms=1000)


async def claimed(store: Store, leases: LeaseManager, session_id: str) -> int:
    lease = await leases.acquire_fenced(
        session_resource(session_id), lambda t: store.claim_session_fence(session_id, t)
    )
    assert lease is not None
    return lease.token


async def commit_as(store: Store, session_id: str, token: int) -> None:
    version = (await store.load(session_id)).session.version
    draft = Draft(session_id, version=version, fence=token)
    draft.append_entry("note", {"token": token})
    await store.commit(draft)


async def test_a_frozen_holder_cannot_write_after_its_successor_claimed(
    store: Store,
    store_target: StoreTarget,
    leases: LeaseManager,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
) -> None:
    await store.create_session("s1", compat="v1")
    token_file, go, result = tmp_path / "token", tmp_path / "go", tmp_path / "result"
    holder = spawn_module(
        "tests.helpers.session_holder",
        "s1",
        str(token_file),
        str(go),
        str(result),
        env={
            **store_target.env(),
            "BRAINHANDS_REDIS_URL": redis_url,
            "BRAINHANDS_NAMESPACE": namespace,
        },
        log=tmp_path / "holder.log",
    )
    try:
        await eventually(token_file.exists, within=20, what="the holder's claim")
        old_token = int(token_file.read_text())
        holder.send_signal(signal.SIGSTOP)
        await asyncio.sleep(1.3)  # past the TTL: the lease is gone from Redis
        new_token = await claimed(store, leases, "s1")
        await commit_as(store, "s1", new_token)
        go.touch()
        holder.send_signal(signal.SIGCONT)
        await eventually(result.exists, within=20, what="the holder's attempt to commit")
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait()

    assert new_token > old_token
    assert result.read_text() == f"stale {new_token}"
    entries = (await store.load("s1")).entries
    assert [e.body["token"] for e in entries] == [new_token]


@pytest.mark.parametrize("forget", ["flushall", "restart"])
async def test_redis_forgetting_everything_never_yields_two_holders(
    store: Store, leases: LeaseManager, redis: Redis, namespace: str, redis_url: str, forget: str
) -> None:
    await store.create_session("s1", compat="v1")
    ledger = store.ledger
    intent = {"session_id": "s1", "task_id": "t", "tool": "x", "pool": "p", "arguments": {}}
    tokens = []
    for _ in range(3):  # earlier holders came and went; the last one still holds the lease
        tokens.append(await claimed(store, leases, "s1"))
        if len(tokens) < 3:
            await redis.delete(Keys(namespace).lease("session:s1"))
    op_lease = await leases.acquire_fenced(
        "operation:op1", lambda t: ledger.claim("op1", t, intent=intent)
    )
    assert op_lease is not None
    old = tokens[-1]

    if forget == "flushall":
        await redis.flushall()
    else:
        await restart_redis(redis_url)

    # Work resumes: new holders get tokens above everything the store has seen.
    new = await claimed(store, leases, "s1")
    new_op = await leases.acquire_fenced(
        "operation:op1", lambda t: ledger.claim("op1", t, intent=intent)
    )
    assert new > old and new_op is not None and new_op.token > op_lease.token

    # The old holders are fenced off; only the new ones can write.
    with pytest.raises(StaleLeaseError):
        await commit_as(store, "s1", old)
    with pytest.raises(StaleLeaseError):
        await ledger.mark_started("op1", op_lease.token)
    await commit_as(store, "s1", new)
    await ledger.mark_started("op1", new_op.token)
    assert [e.body["token"] for e in (await store.load("s1")).entries] == [new]


async def restart_redis(redis_url: str) -> None:
    """A real restart of the local Redis without persistence: it comes back empty."""
    await asyncio.to_thread(
        subprocess.run, ["redis-cli", "shutdown", "nosave"], check=False, capture_output=True
    )
    await asyncio.to_thread(subprocess.run, REDIS_START, check=True, capture_output=True)
    probe = Redis.from_url(redis_url)

    async def answers() -> bool:
        try:
            return bool(await probe.ping())
        except RedisError:
            return False

    try:
        await eventually(answers, within=20, what="Redis to come back")
    finally:
        await probe.aclose()
