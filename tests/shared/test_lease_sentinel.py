"""Leases on Redis with Sentinel: the client follows the Sentinels to a promoted replica, and
fencing tokens stay above everything the store accepted although that replica missed the
last increments of the token counter (the FLUSHALL case in another form)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from brainhands.shared.config import parse_addresses
from brainhands.shared.errors import LeaseBackendError
from brainhands.shared.keys import Keys, session_resource
from brainhands.shared.lease import LeaseManager, connect_redis
from brainhands.shared.store import Store
from tests.helpers.redis_sentinel import MASTER, sentinel_group

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


async def test_tokens_stay_above_the_store_after_a_failover_to_a_replica_that_missed_them(
    tmp_path: Path, namespace: str
) -> None:
    store = await Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    await store.create_session("s1", compat="v1")
    resource = session_resource("s1")

    async def claim(token: int) -> None:
        await store.claim_session_fence("s1", token)

    with sentinel_group() as group:
        redis = connect_redis(
            "redis://127.0.0.1/0",
            sentinels=parse_addresses(group.sentinels),
            sentinel_master=MASTER,
        )
        manager = LeaseManager(redis, Keys(namespace), ttl_ms=2000)
        tokens = []

        async def take() -> None:
            lease = await manager.acquire_fenced(resource, claim)
            assert lease is not None
            tokens.append(lease.token)
            await manager.release(lease)

        for _ in range(3):
            await take()
        # The replica stops hearing the primary: the next tokens are issued where it cannot
        # copy them, the last one just before the primary dies.
        replica = group.procs["replica"]
        os.kill(replica.pid, signal.SIGSTOP)
        for _ in range(3):
            await take()
        group.kill_primary()
        os.kill(replica.pid, signal.SIGCONT)
        await asyncio.to_thread(group.wait_for_primary, group.replica_port)

        # The client finds the new primary by itself (a call or two may meet the old one).
        for _ in range(100):
            try:
                await take()
                break
            except LeaseBackendError:
                await asyncio.sleep(0.2)
        await take()
        await redis.aclose()

    assert tokens == sorted(set(tokens)), tokens  # strictly increasing, none reused
    assert tokens[:6] == [1, 2, 3, 4, 5, 6]
    assert tokens[6] == 7  # the promoted replica offered 4 first; the store refused it
    assert (await store.load("s1")).session.fence == tokens[-1]
    await store.close()
