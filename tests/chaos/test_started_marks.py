"""Started marks (issue 39): only an ``unsafe`` call commits ``started`` before it goes out.

Each case kills a real Hands process at the point the started mark used to guard -- right
after a tool call returned, its effect made, before any commit of a ``safe`` or ``query``
call -- and judges the recovery at the email service's own ledger, on both backends:

- ``query``: the redelivered job asks the service first, which finds the email: sent once;
- ``safe``: the call runs again under the same key, the service dedupes it: sent once;
- ``unsafe``: its started mark says a call went out: ``uncertain``, never sent twice;
- a ``query`` job re-published by the sweeper (flagged) asks first even where the store names
  no earlier holder, while a first delivery runs directly.

And the cost: the operation row's writes per call, counted by PostgreSQL.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from sqlalchemy import text

from brainhands.brain.sweeper import Sweeper
from brainhands.shared.config import normalize_database_url
from brainhands.shared.delivery import REPUBLISHED_HEADER, Delivery
from brainhands.shared.keys import Keys
from brainhands.shared.lease import LeaseManager
from brainhands.shared.messages import ToolJob, decode
from brainhands.shared.store import Store
from tests.brain.test_sweeper import lost_call
from tests.helpers.cluster import Cluster
from tests.helpers.harness import HandsHarness, hands_deployment
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module
from tests.helpers.rabbit import broker_env
from tests.helpers.stores import StoreTarget, drop_schema

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(180)]


@pytest.fixture
async def hands(
    store_target: StoreTarget, rabbitmq_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[HandsHarness]:
    """Hands workers and the email service on each backend (``tests/hands`` has them on
    PostgreSQL only)."""
    async with hands_deployment(
        store_target, rabbitmq_url, redis_url, namespace, tmp_path
    ) as harness:
        yield harness


def start_victim(hands: HandsHarness) -> subprocess.Popen[bytes]:
    """A Hands worker that dies as its first tool call returns (``hands_victim``)."""
    proc = spawn_module(
        "tests.helpers.hands_victim",
        "after-effect",
        "hands",
        "--pool",
        "email",
        "--tools",
        "tests.helpers.tools",
        env=hands.worker_env(),
        log=hands.tmp_path / f"worker{len(hands.workers)}.log",
    )
    hands.workers.append(proc)
    return proc


async def died_after_the_effect(hands: HandsHarness, victim: subprocess.Popen[bytes]) -> None:
    await eventually(lambda: victim.poll() is not None, within=60, what="the victim's death")
    assert victim.returncode == 9  # its own exit, at the kill point


@pytest.mark.parametrize("tool", ["send_safe", "send_query", "send_unsafe"])
async def test_a_call_killed_after_its_effect_before_any_commit(
    hands: HandsHarness, tool: str
) -> None:
    victim = start_victim(hands)
    job = hands.job(tool, {"to": "ann@example.com"})
    await hands.publish(job)
    await died_after_the_effect(hands, victim)
    assert await hands.service_has(job.operation_id)  # the effect happened
    hands.start_worker()  # RabbitMQ redelivers the unacked job to this one

    op = await hands.outcome(job.operation_id)
    ledger = await hands.email.ledger()
    if tool == "send_safe":
        # Claimed before with no started mark: run again as an interruption, same key.
        [sent] = ledger["sends"]
        assert (op.status, op.attempts, op.interruptions) == ("succeeded", 2, 1)
        assert sent["attempts"] == 2  # the service deduped the second call
        assert op.result["receipt"] == sent["receipt"]
    elif tool == "send_query":
        # Asked instead of sent again: one call at the service, the outcome found by query.
        [sent] = ledger["sends"]
        assert (op.status, op.attempts, sent["attempts"]) == ("succeeded", 1, 1)
        assert op.result["receipt"] == sent["receipt"]
        assert '"via": "query"' in hands.log(hands.workers[-1])
    else:
        # Its started mark was committed: uncertain, and one call at the service.
        assert (op.status, op.error["type"]) == ("uncertain", "Interrupted")
        assert len(ledger["unsafe_sends"]) == 1
        assert ledger["sends"] == []
    assert {r.status for r in hands.results} == {op.status}


async def test_a_query_job_asks_first_only_when_it_may_have_run_before(
    hands: HandsHarness,
) -> None:
    # Both emails went out already under their keys, as an earlier holder whose claim the
    # store lost (a failover) would have sent them: the store names no earlier holder.
    republished = hands.job("send_query", {"to": "bo@example.com"})
    first = hands.job("send_query", {"to": "cy@example.com"})
    for job in (republished, first):
        await hands.email.send(job.operation_id, "x@example.com", "notice", "hello")
    hands.start_worker()
    queue = hands.env.topology.hands_queue("email")
    await hands.env.broker.publish(republished, queue, headers={REPUBLISHED_HEADER: "sweeper"})
    await hands.publish(first)

    asked = await hands.outcome(republished.operation_id)
    ran = await hands.outcome(first.operation_id)

    sends = {s["key"]: s for s in (await hands.email.ledger())["sends"]}
    # The sweeper's copy asked, found the email and sent nothing.
    assert (asked.status, asked.attempts, sends[republished.operation_id]["attempts"]) == (
        "succeeded",
        1,
        1,
    )
    # A first delivery of a fresh call went straight to the tool (the service deduped).
    assert (ran.status, ran.attempts, sends[first.operation_id]["attempts"]) == (
        "succeeded",
        1,
        2,
    )


async def test_the_sweepers_re_publish_is_flagged_as_delivered_before(
    store: Store, rabbitmq_url: str, redis_url: str, namespace: str
) -> None:
    redis = Redis.from_url(redis_url)
    async with broker_env(rabbitmq_url, namespace) as env:
        queue = await env.hands_queue("email")
        leases = LeaseManager(redis, Keys(namespace), ttl_ms=2000)
        sweeper = Sweeper(store=store, broker=env.broker, leases=leases, period=0.1)
        await store.create_session("s1", compat="v1")
        await lost_call(store, "t-1", {"tool": "send_email", "arguments": {}, "pool": "email"})

        assert (await sweeper.sweep_once())["job_redispatched"] == 1

        async with env.broker.side_channel() as channel:
            jobs = await channel.declare_queue(queue, passive=True)
            incoming = await jobs.get(no_ack=True, fail=True)
            assert incoming is not None
            delivery = Delivery(incoming)
    await redis.aclose()
    assert isinstance(decode(delivery.body), ToolJob)
    # A first delivery as far as RabbitMQ knows, but the sweeper's copy of a job whose
    # first copy may have reached a worker: a query tool asks before it runs.
    assert (delivery.redelivered, delivery.republished, delivery.delivered_before) == (
        False,
        True,
        True,
    )


@pytest.mark.parametrize("tool", ["send_email", "send_email_unsafe"])
async def test_the_notify_run_survives_a_hands_death_after_an_effect(
    cluster: Cluster, tool: str
) -> None:
    cluster.start("brain-0")
    victim = cluster.start("hands-victim", victim="after-effect")
    await cluster.submit_batches(1, tool=tool)
    await eventually(lambda: victim.poll() is not None, within=60, what="death after an effect")
    assert victim.returncode == 9
    cluster.kills["SIGKILL hands (after an effect, before any commit)"] += 1
    cluster.start("hands-0")  # gets the unacked jobs again
    await cluster.wait_done()
    _, operations = await cluster.store.queries.history(cluster.sessions[0])
    if tool == "send_email":  # query: the email the victim sent is found, not sent again
        assert any(o.result and o.result.get("via") == "query" for o in operations)
        await cluster.check_invariants("started marks: query tool killed after its effect")
        return
    assert sum(o.status == "uncertain" for o in operations) >= 1
    tasks, _ = await cluster.store.queries.history(cluster.sessions[0])
    failed = sum(t.kind == "send-notice" and t.outcome != "succeeded" for t in tasks)
    await cluster.check_invariants(
        "started marks: unsafe tool killed after its effect", unsafe=True, expect_failed=failed
    )


@pytest.fixture
async def pg_hands(
    postgres_url: str, rabbitmq_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[HandsHarness]:
    """PostgreSQL alone, for its statistics views."""
    target = StoreTarget(normalize_database_url(postgres_url), namespace)
    try:
        async with hands_deployment(
            target, rabbitmq_url, redis_url, namespace, tmp_path
        ) as harness:
            yield harness
    finally:
        await drop_schema(target.url, namespace)


async def operation_writes(hands: HandsHarness) -> int:
    """Rows inserted and updated in this test's operation table, as PostgreSQL counts them."""
    async with hands.store.backend.engine.connect() as conn:
        found = await conn.execute(
            text(
                "SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables "
                "WHERE schemaname = :schema AND relname = 'operation'"
            ),
            {"schema": hands.target.schema},
        )
        return int(found.scalar_one())


async def writes_once_flushed(hands: HandsHarness, before: int, expected: int, tool: str) -> int:
    """The operation-row writes since ``before``, once at least ``expected`` are counted."""
    seen = [0]

    async def flushed() -> bool:
        seen.append(await operation_writes(hands) - before)
        return seen[-1] >= expected

    await eventually(flushed, within=40, what=f"{tool}: statistics of {expected} writes")
    return seen[-1]


async def test_writes_per_call_by_policy(pg_hands: HandsHarness) -> None:
    # The operation row's transitions per call: a claim (insert) and an outcome, plus the
    # started mark for unsafe alone (3 for every policy before issue 39). Each is one
    # autocommit statement, so writes are write transactions here.
    hands, per_policy = pg_hands, 10
    hands.start_worker(concurrency=4)
    counted = {}
    for tool in ("send_safe", "send_query", "send_unsafe"):
        before = await operation_writes(hands)
        jobs = [hands.job(tool, {"to": f"u{n}@example.com"}) for n in range(per_policy)]
        for job in jobs:
            await hands.publish(job)
        for job in jobs:
            assert (await hands.outcome(job.operation_id)).status == "succeeded"
        expected = per_policy * (3 if tool == "send_unsafe" else 2)
        # Statistics reach the view up to ~10 s after the worker's transactions.
        writes = await writes_once_flushed(hands, before, expected, tool)
        counted[tool] = writes / per_policy
    print(f"operation-row writes per call: {counted}")
    assert counted == {"send_safe": 2.0, "send_query": 2.0, "send_unsafe": 3.0}
