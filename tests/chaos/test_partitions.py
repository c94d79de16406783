"""Partitions: workers in network namespaces of their own (``tests.helpers.netns``), cut off
from Redis, RabbitMQ or the store, or behind a slow and lossy link, then healed.

Each case runs the notify deployment on PostgreSQL (a SQLite store is a local file: there
is no network between a worker and it to cut) and judges the run at the email service's own
ledger and the store (``Cluster.check_invariants``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from brainhands.shared.config import normalize_database_url
from tests.helpers.cluster import RECIPIENTS, Cluster, deployment
from tests.helpers.netns import (
    Link,
    Relay,
    namespaces_unavailable,
    nftables_missing,
)
from tests.helpers.pgwire import CommitCut, OnAnswer
from tests.helpers.polling import eventually
from tests.helpers.services import unavailable
from tests.helpers.stores import StoreTarget, drop_pg_schema

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(180)]

TTL = 1.5
"""The deployment's lease TTL (``Cluster.settings``), in seconds."""
CALL_SECONDS = 3.0
"""How long the email service takes with a call while a worker is cut off: past the TTL."""
PARTITION_SECONDS = 30.0
SLOW_BATCHES = 6
SLOW_LINK_TTL_MS = 5000


@pytest.fixture(scope="module")
def namespaces() -> None:
    """Namespaces or a skip: a sandbox that cannot make them skips even under ``CI=true``
    (the failures that count are those of a machine that can)."""
    reason = namespaces_unavailable()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def pg_target(postgres_url: str) -> Iterator[StoreTarget]:
    url = normalize_database_url(postgres_url)
    schema = f"t{uuid.uuid4().hex[:12]}"
    yield StoreTarget(url, schema)
    drop_pg_schema(url, schema)


@pytest.fixture
async def cluster(
    namespaces: None,
    pg_target: StoreTarget,
    rabbitmq_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
) -> AsyncIterator[Cluster]:
    async with deployment(pg_target, rabbitmq_url, redis_url, namespace, tmp_path) as made:
        yield made


@pytest.fixture
async def link(cluster: Cluster) -> AsyncIterator[Link]:
    """A namespace whose relays reach the store, RabbitMQ, Redis and the email service."""
    async with cluster.link() as made:
        yield made


def relay_of(link: Link, url: str) -> Relay:
    """The relay through which ``link``'s worker reaches the service at ``url``."""
    return link.relays[urlsplit(url).port or 0]


def claims_a_call(sql: str) -> bool:
    """Hands claim an operation with their lease token: the call goes out next (an unsafe
    one once it is marked started)."""
    return "INSERT INTO operation" in sql


def records_an_outcome(sql: str) -> bool:
    """Hands commit an operation's outcome with its result event."""
    return sql.startswith("WITH recorded AS") and "UPDATE operation SET status" in sql


def claims_a_session(sql: str) -> bool:
    """A Brain raises a session's fence to its lease token: it now holds the session."""
    return "UPDATE session SET fence" in sql


def creates_tasks(sql: str) -> bool:
    """A Brain's session commit that creates tasks (its first: the batch's plan)."""
    return "UPDATE session SET version" in sql and "INSERT INTO task" in sql


async def tasks_by_kind(cluster: Cluster, session: str) -> Counter[str]:
    tasks, _ = await cluster.store.queries.history(session)
    return Counter(t.kind for t in tasks)


async def session_version(cluster: Cluster, session: str) -> int:
    return (await cluster.store.load(session)).session.version


async def count_failed(cluster: Cluster) -> int:
    failed = 0
    for session in cluster.sessions:
        tasks, _ = await cluster.store.queries.history(session)
        failed += sum(t.kind == "send-notice" and t.outcome != "succeeded" for t in tasks)
    return failed


async def sends_per_key(cluster: Cluster) -> Counter[str]:
    """How many times the email service was asked to send under each key."""
    ledger = await cluster.email.ledger()
    return Counter({s["key"]: s["attempts"] for s in ledger["sends"]})


@pytest.mark.parametrize("tool", ["send_email", "send_email_unsafe"])
async def test_a_hands_cut_from_redis_mid_call_healed_after_three_ttls(
    cluster: Cluster, link: Link, tool: str
) -> None:
    await cluster.email.set_faults(delay=CALL_SECONDS)  # the call outlives the lease
    redis = relay_of(link, cluster.redis_url)
    claimed = OnAnswer(claims_a_call, then=redis.cut)
    relay_of(link, cluster.target.url).arm(claimed)
    cluster.start("brain-0")
    cluster.start("hands-cut", prefix=link.prefix, **cluster.behind(link))
    await cluster.submit_batches(1, tool=tool)
    await asyncio.wait_for(claimed.done.wait(), 60)
    cut_at, cut_log = time.monotonic(), len(cluster.log("hands-cut"))
    cluster.kills["hands cut from redis mid-call"] += 1
    cluster.start("hands-1")  # outside the namespace: where the call finishes
    await eventually(
        lambda: '"event": "lease_lost"' in cluster.log("hands-cut")[cut_log:],
        within=20,
        what="the cut worker to stop work when its renewals went unanswered",
    )
    await cluster.email.set_faults(delay=0)
    await asyncio.sleep(cut_at + 3 * TTL - time.monotonic())
    redis.heal()
    during = cluster.log("hands-cut")[cut_log:]
    assert '"event": "outcome"' not in during, "a worker without its lease recorded an outcome"
    await cluster.wait_done()
    unsafe = tool == "send_email_unsafe"
    failed = await count_failed(cluster) if unsafe else 0
    await cluster.check_invariants(
        f"a hands cut from redis ({tool})", unsafe=unsafe, expect_failed=failed
    )


async def test_b_hands_cut_from_rabbitmq_after_the_outcome_before_the_ack(
    cluster: Cluster, link: Link
) -> None:
    amqp = relay_of(link, cluster.env.url)
    recorded = OnAnswer(records_an_outcome, then=amqp.cut)
    relay_of(link, cluster.target.url).arm(recorded)
    settings = cluster.behind(link)
    # Heartbeats every 2 s: RabbitMQ gives up on the silent connection within seconds and
    # delivers its unacked jobs again (at the default 60 s it would take two minutes).
    settings["BRAINHANDS_RABBITMQ_URL"] += "?heartbeat=2"
    cluster.start("brain-0")
    cluster.start("hands-cut", prefix=link.prefix, **settings)
    await cluster.submit_batches(1)
    await asyncio.wait_for(recorded.done.wait(), 60)
    assert recorded.answer == "CommandComplete SELECT 1", recorded.answer  # it is durable
    cluster.kills["hands cut from rabbitmq after outcome"] += 1
    cluster.start("hands-1")
    await eventually(
        lambda: '"event": "republished"' in cluster.log("hands-1"),
        within=60,
        what="the unacked job delivered again to the other worker, which only republishes",
    )
    amqp.heal()
    await cluster.wait_done()
    assert set((await sends_per_key(cluster)).values()) == {1}  # no email sent twice
    await cluster.check_invariants("b hands cut from rabbitmq after outcome, before ack")


@pytest.mark.parametrize("committed", [True, False], ids=["it-committed", "it-did-not"])
async def test_c_brain_cut_from_the_store_during_its_commit(
    cluster: Cluster, link: Link, committed: bool
) -> None:
    cut = CommitCut(creates_tasks, reaches_server=committed, hold=2.0)
    relay_of(link, cluster.target.url).arm(cut)
    cluster.start("brain-cut", prefix=link.prefix, **cluster.behind(link))
    cluster.start("hands-0")
    await cluster.submit_batches(1)
    await asyncio.wait_for(cut.done.wait(), 60)
    what = "committed" if committed else "never sent"
    cluster.kills[f"store cut at commit ({what})"] += 1
    if committed:
        assert cut.answer is not None and cut.answer.startswith("CommandComplete"), cut.answer
    else:
        assert cut.answer is None
    await cluster.wait_done()
    # The Brain saw its connection die mid-commit, and ran the pass again.
    assert "store connection lost" in cluster.log("brain-cut")
    # Planned once: one batch, five notices, five calls; not twice, not lost.
    planned = {"notice-batch": 1, "send-notice": 5, "brainhands.tool": 5}
    assert await tasks_by_kind(cluster, cluster.sessions[0]) == planned
    await cluster.check_invariants(f"c brain cut at commit ({what})")


async def test_d_brain_partitioned_from_everything_for_30s_while_holding_a_session(
    cluster: Cluster, link: Link
) -> None:
    # Every service's relay holds its bytes, rather than the link going down: after 30 s
    # of a dead link TCP retransmits only every 20-50 s, and the Brain's connections come
    # back that much after the heal (``netns``); the partition is the same while it lasts.
    claimed = OnAnswer(claims_a_session, then=link.cut_services)
    relay_of(link, cluster.target.url).arm(claimed)
    cluster.start("brain-cut", prefix=link.prefix, **cluster.behind(link))
    cluster.start("hands-0")
    await cluster.submit_batches(1)
    await asyncio.wait_for(claimed.done.wait(), 60)
    cut_at, cut_log = time.monotonic(), len(cluster.log("brain-cut"))
    cluster.kills["brain partitioned 30 s holding a session"] += 1
    cluster.start("brain-1")  # takes the session over once the cut Brain's lease lapsed
    await cluster.wait_done(within=PARTITION_SECONDS)  # the session moved on meanwhile
    version = await session_version(cluster, cluster.sessions[0])
    await asyncio.sleep(cut_at + PARTITION_SECONDS - time.monotonic())
    link.heal_services()

    def gave_up() -> bool:
        after = cluster.log("brain-cut")[cut_log:]
        return '"event": "lease_lost"' in after or '"event": "stale"' in after

    # The pass it held the session for ends only now: it learns that its lease is gone.
    await eventually(gave_up, within=30, what="the partitioned Brain to give the session up")
    assert await session_version(cluster, cluster.sessions[0]) == version  # it wrote nothing
    await cluster.check_invariants("d brain partitioned 30 s while holding a session")


async def test_e_hands_behind_a_slow_lossy_link(cluster: Cluster, link: Link) -> None:
    if reason := nftables_missing():
        unavailable(reason)
    link.shape(delay=0.1, jitter=0.05, loss=0.03)
    cluster.start("brain-0")
    # The suite's 1.5 s lease is renewed every 0.5 s: a 1 s margin, which one lost SYN
    # (retransmitted after 1 s) or two lost replies in a row use up on this link. Half the
    # default TTL leaves 3.3 s.
    ttl = {"BRAINHANDS_LEASE_TTL_MS": str(SLOW_LINK_TTL_MS)}
    cluster.start("hands-slow", prefix=link.prefix, **cluster.behind(link), **ttl)
    began = time.monotonic()
    await cluster.submit_batches(SLOW_BATCHES)
    await cluster.wait_done(within=120)
    elapsed = time.monotonic() - began
    calls, dropped = SLOW_BATCHES * len(RECIPIENTS), link.dropped()
    print(
        f"behind 100 +/- 50 ms, 3% loss: {calls} calls in {elapsed:.1f} s, "
        f"{calls / elapsed:.1f} calls/s; {dropped} packets dropped toward the worker"
    )
    assert dropped > 0, "the link lost nothing: the fault was not there"
    assert '"event": "lease_lost"' not in cluster.log("hands-slow"), "a lease lost with no cut"
    cluster.kills["hands behind 100+/-50 ms, 3% loss"] += 1
    await cluster.check_invariants("e hands behind a slow, lossy link")
