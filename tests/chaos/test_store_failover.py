"""The store fails over: its PostgreSQL primary dies mid-burst and the synchronous standby is
promoted. Every process reaches the new primary through the multi-host URL without a
restart; nothing committed is lost and nothing is applied twice (judged at the email
service's own ledger and the store, ``Cluster.check_invariants``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brainhands.shared.config import normalize_database_url
from tests.helpers.cluster import Cluster, deployment
from tests.helpers.pg_pair import PostgresPair, postgres_pair
from tests.helpers.polling import eventually, once_it_answers
from tests.helpers.stores import StoreTarget

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(240)]


@pytest.fixture
def pair() -> AsyncIterator[PostgresPair]:
    with postgres_pair() as made:
        yield made


@pytest.fixture
async def failover_cluster(
    pair: PostgresPair, rabbitmq_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    target = StoreTarget(normalize_database_url(pair.url), None)
    async with deployment(target, rabbitmq_url, redis_url, namespace, tmp_path) as made:
        yield made


async def test_the_primary_dies_mid_burst_and_the_standby_takes_over(
    failover_cluster: Cluster, pair: PostgresPair
) -> None:
    cluster = failover_cluster
    await cluster.email.set_faults(delay=0.3)
    for n in range(2):
        cluster.start(f"brain-{n}")
        cluster.start(f"hands-{n}")
    await cluster.submit_batches(4)
    await eventually(lambda: cluster.operations_started(3), within=60, what="calls in flight")
    await asyncio.to_thread(pair.kill_primary)
    cluster.kills["kill the store's primary"] += 1
    await asyncio.sleep(1)  # the workers find the store gone before a new primary is there
    await asyncio.to_thread(pair.promote_standby)
    await cluster.email.set_faults(delay=0)
    await eventually(lambda: once_it_answers(cluster.all_done), within=150, what="every session")
    await cluster.check_invariants("store failover: primary killed, standby promoted")
    for name, proc in cluster.procs.items():
        assert proc.poll() is None, f"{name} exited: {cluster.log(name)[-2000:]}"
