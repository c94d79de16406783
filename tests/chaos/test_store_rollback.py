"""The store goes back in time, as when an asynchronous standby that lacked the primary's
last commits is promoted: rows are put back to an earlier state with SQL after Redis
witnessed their commits (``shared.witness``).

The workers find it, refuse to act on the resource, set the deployment's flag and refuse
all work while it stands (readiness says so); the call whose outcome was lost is not run
again (the email service's own ledger); an operator restores what was lost and accepts
with ``brainhands store accept-rollback``, and work resumes. Both sides are shown: a Hands
finding an operation's outcome gone, a Brain finding a session's commits gone.

Then the real thing, on PostgreSQL: an asynchronous standby stopped while calls run, the
primary killed after it committed their outcomes, the standby promoted -- the lost outcomes
are found and no call goes out twice."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import func, select, update

from brainhands.shared.config import normalize_database_url
from brainhands.shared.keys import Keys, operation_resource
from brainhands.shared.messages import SessionWake
from brainhands.shared.store import schema
from brainhands.shared.witness import went_back
from tests.chaos.test_readiness import free_port, get
from tests.helpers.cluster import Cluster, deployment
from tests.helpers.pg_pair import PostgresPair, postgres_pair
from tests.helpers.polling import eventually
from tests.helpers.processes import WORKDIR
from tests.helpers.stores import StoreTarget

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(180)]

REFUSED_FOR = 3.0
"""Seconds the test watches new work stay refused while the flag stands."""


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def brainhands_store(cluster: Cluster, action: str) -> tuple[int, str]:
    """Run ``brainhands store ACTION`` as an operator would, with the deployment's settings."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "brainhands",
        "store",
        action,
        cwd=WORKDIR,
        env={**os.environ, **cluster.settings()},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode()


async def email_operation(cluster: Cluster, session: str) -> dict[str, Any]:
    """The row of one succeeded ``send_email`` call of ``session``, as the store holds it."""
    o = schema.operation
    async with cluster.store.backend.engine.connect() as conn:
        row = (
            await conn.execute(
                select(o).where(o.c.session_id == session, o.c.status == "succeeded").limit(1)
            )
        ).one()
    return dict(row._mapping)


async def lose_the_outcome(cluster: Cluster, op: dict[str, Any]) -> None:
    """What a standby that missed the call's claim, its outcome and its job's "sent" mark
    holds: the operation ``intended`` with no outcome, its job unsent in the outbox."""
    o, box = schema.operation, schema.outbox
    async with cluster.store.backend.engine.begin() as conn:
        await conn.execute(
            update(o)
            .where(o.c.operation_id == op["operation_id"])
            .values(
                status="intended",
                attempts=0,
                fence=0,
                result=None,
                error=None,
                started_at=None,
                finished_at=None,
                updated_at=op["created_at"],
            )
        )
        jobs = await conn.execute(
            select(box.c.id, box.c.body).where(
                box.c.routing_key == cluster.env.topology.hands_queue("email")
            )
        )
        [job] = [i for i, body in jobs if op["operation_id"].encode() in body]
        await conn.execute(
            update(box).where(box.c.id == job).values(sent_at=None, publish_after=None)
        )


async def restore(cluster: Cluster, op: dict[str, Any]) -> None:
    """The operator's reconciliation: the lost outcome put back (from the old primary)."""
    o = schema.operation
    async with cluster.store.backend.engine.begin() as conn:
        await conn.execute(update(o).where(o.c.operation_id == op["operation_id"]).values(**op))


async def session_version(cluster: Cluster, session: str) -> int:
    s = schema.session
    async with cluster.store.backend.engine.connect() as conn:
        return int((await conn.execute(select(s.c.version).where(s.c.id == session))).scalar_one())


async def set_session_version(cluster: Cluster, session: str, version: int) -> None:
    s = schema.session
    async with cluster.store.backend.engine.begin() as conn:
        await conn.execute(update(s).where(s.c.id == session).values(version=version))


def critical(log: str) -> list[str]:
    """The resources of the findings a worker's log reports at CRITICAL."""
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [line["resource"] for line in lines if line.get("level") == "critical"]


async def sends(cluster: Cluster) -> int:
    return len((await cluster.email.ledger())["sends"])


async def queued(cluster: Cluster, session: str) -> bool:
    sub = schema.submission
    async with cluster.store.backend.engine.connect() as conn:
        status = await conn.execute(
            select(func.min(sub.c.status)).where(sub.c.session_id == session)
        )
        return status.scalar_one() == "queued"


async def test_a_store_gone_back_is_refused_until_an_operator_accepts_it(
    cluster: Cluster, redis: Redis, tmp_path: Path
) -> None:
    keys = Keys(cluster.env.topology.namespace)
    port = free_port()
    cluster.start("brain-0", BRAINHANDS_HTTP_PORT=str(port))
    cluster.start("hands-0")
    await cluster.submit_batches(1)
    await cluster.wait_done(within=60)
    sent = await sends(cluster)
    assert sent == 5

    # 1. A Hands finds an operation's outcome gone: the call does not go out again. (The
    # relays mark what they published a moment later: those marks land before the loss.)
    await eventually(cluster.outbox_drained, within=10, what="the outbox marked sent")
    op = await email_operation(cluster, cluster.sessions[0])
    await lose_the_outcome(cluster, op)
    await eventually(lambda: went_back(redis, keys), within=30, what="the store found gone back")
    finding = await went_back(redis, keys)
    assert finding is not None and finding.resource == f"operation:{op['operation_id']}"
    assert finding.stored == "status intended"
    await eventually(
        lambda: critical(cluster.log("hands-0")) == [finding.resource],
        within=10,
        what="the Hands to log the finding",
    )
    status, body = await get(port, "/readyz")
    assert status == 503 and json.loads(body)["store_intact"] is False
    assert (await brainhands_store(cluster, "check"))[0] == 1

    # All other work is refused while the flag stands.
    await cluster.submit_batches(1)
    await asyncio.sleep(REFUSED_FOR)
    assert await queued(cluster, cluster.sessions[1]), "new work ran on a store gone back"
    assert await sends(cluster) == sent, "a call went out on a store gone back"

    # 2. The operator restores what was lost and accepts: work resumes, nothing twice.
    await restore(cluster, op)
    code, out = await brainhands_store(cluster, "accept-rollback")
    assert code == 0 and "rollback accepted" in out, out
    await cluster.wait_done(within=60)
    assert await sends(cluster) == 2 * sent
    status, _ = await get(port, "/readyz")
    assert status == 200

    # 3. A Brain finds a session's commits gone (the second session's, witnessed since).
    session = cluster.sessions[1]
    version = await session_version(cluster, session)
    await set_session_version(cluster, session, version - 2)
    wake = SessionWake(session_id=session, compat="v1", reason="sweep")
    await cluster.env.broker.publish(wake, cluster.env.topology.brain_queue("v1"))
    await eventually(lambda: went_back(redis, keys), within=30, what="the session found gone back")
    finding = await went_back(redis, keys)
    assert finding is not None
    assert (finding.resource, finding.stored, finding.witnessed) == (
        f"session:{session}",
        f"version {version - 2}",
        f"version {version}",
    )
    await eventually(
        lambda: critical(cluster.log("brain-0")) == [finding.resource],
        within=10,
        what="the Brain to log the finding",
    )
    await set_session_version(cluster, session, version)
    assert (await brainhands_store(cluster, "accept-rollback"))[0] == 0
    assert (await brainhands_store(cluster, "check"))[0] == 0

    await cluster.check_invariants("store gone back: found, refused, accepted")
    for name, proc in cluster.procs.items():
        assert proc.poll() is None, f"{name} exited: {cluster.log(name)[-2000:]}"


async def test_an_asynchronous_standby_promoted_without_the_last_outcomes_is_found(
    rabbitmq_url: str, redis_url: str, namespace: str, tmp_path: Path, redis: Redis
) -> None:
    with postgres_pair(synchronous=False) as pair:
        target = StoreTarget(normalize_database_url(pair.url), None)
        async with deployment(target, rabbitmq_url, redis_url, namespace, tmp_path) as cluster:
            await standby_loses_the_outcomes(cluster, pair, redis)


async def standby_loses_the_outcomes(cluster: Cluster, pair: PostgresPair, redis: Redis) -> None:
    """Calls in flight as the standby stops; their outcomes committed on the primary alone;
    the primary killed and the standby promoted: the loss is found, no call goes out twice."""
    keys = Keys(cluster.env.topology.namespace)
    await cluster.email.set_faults(delay=4)  # the calls outlast the standby's stop
    for name in ("brain-0", "hands-0", "sweeper-0"):
        cluster.start(name)
    await cluster.submit_batches(1)
    await eventually(lambda: cluster.operations_started(5), within=60, what="calls in flight")
    await eventually(
        lambda: asyncio.to_thread(pair.standby_caught_up), within=30, what="the standby"
    )
    # The standby has the calls' claims and no more: their outcomes reach the primary alone.
    await asyncio.to_thread(pair.stop_standby)
    await cluster.email.set_faults(delay=0)
    await cluster.wait_done(within=60)
    _, operations = await cluster.store.queries.history(cluster.sessions[0])
    witnesses = [keys.witness(operation_resource(o.operation_id)) for o in operations]
    await eventually(
        lambda: _all_exist(redis, witnesses), within=10, what="every outcome witnessed"
    )
    sent = Counter(s["key"] for s in (await cluster.email.ledger())["sends"])
    assert sorted(sent.values()) == [1] * 5

    await asyncio.to_thread(pair.kill_primary)
    await asyncio.to_thread(pair.start_standby)
    await asyncio.to_thread(pair.promote_standby)
    cluster.kills["async standby promoted without the last outcomes"] += 1

    await eventually(lambda: went_back(redis, keys), within=60, what="the lost outcomes found")
    finding = await went_back(redis, keys)
    assert finding is not None
    # Each worker that met a lost commit before the flag was up reports its own finding.
    found = critical(cluster.log("brain-0")) + critical(cluster.log("hands-0"))
    assert finding.resource in found, found
    await asyncio.sleep(REFUSED_FOR)  # a re-dispatch made before the flag is refused
    again = Counter(s["key"] for s in (await cluster.email.ledger())["sends"])
    assert again == sent, "a call whose outcome the store lost went out again"
    assert '"event": "sweep_held"' in cluster.log("sweeper-0")  # it stands by meanwhile
    for name, proc in cluster.procs.items():
        assert proc.poll() is None, f"{name} exited: {cluster.log(name)[-2000:]}"


async def _all_exist(redis: Redis, names: list[str]) -> bool:
    return bool(await redis.exists(*names) == len(names))
