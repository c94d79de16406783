"""The broker is a three-node RabbitMQ cluster and loses nodes mid-burst.

The workers are given all three nodes (``BRAINHANDS_RABBITMQ_URL``'s multi-node form). The
node they are connected to is killed and restarted: they reconnect through the next node,
publishers re-sending what was not confirmed (the outbox) and consumers re-attaching. Then
the node holding the quorum queues' leaders is killed: the queues elect new leaders on the
two nodes left. Nothing is lost and nothing is done twice, judged at the email service's own
ledger and the store (``Cluster.check_invariants``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from brainhands.shared.broker import Broker
from brainhands.shared.delivery import Delivery
from brainhands.shared.errors import BrokerUnavailable
from brainhands.shared.messages import Message, ToolJob
from brainhands.shared.store import schema
from brainhands.shared.topology import Topology
from tests.chaos.test_readiness import all_ready, free_port
from tests.helpers.cluster import Cluster, deployment
from tests.helpers.polling import eventually
from tests.helpers.rabbit_cluster import RabbitCluster, rabbit_cluster
from tests.helpers.stores import StoreTarget

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def rabbit() -> Iterator[RabbitCluster]:
    with rabbit_cluster() as made:
        yield made


@pytest.fixture
async def broker_cluster(
    rabbit: RabbitCluster,
    store_target: StoreTarget,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
) -> AsyncIterator[Cluster]:
    """The notify deployment on the cluster. The test's own connection is on the last node,
    so the queues it declares -- every work queue -- have their leaders there; the workers
    connect to the first."""
    leaders = rabbit.nodes[-1].url
    async with deployment(store_target, leaders, redis_url, namespace, tmp_path) as made:
        await made.env.results_queue("v1")
        try:
            yield made
        finally:
            made.stop_all()
            await asyncio.to_thread(rabbit.revive)  # the deployment's cleanup needs its node


JOB = ToolJob(
    operation_id="op-after-the-kill",
    tool="send_email",
    arguments={},
    session_id="s-1",
    task_id="t-1",
    compat="v1",
    pool="email",
)


async def confirmed_at(broker: Broker, queue: str, *, within: float = 30) -> float:
    """Publish ``JOB`` until the broker confirms it; when it did."""
    deadline = time.monotonic() + within
    while True:
        try:
            await broker.publish(JOB, queue)
            return time.monotonic()
        except BrokerUnavailable:
            assert time.monotonic() < deadline, f"no publish confirmed within {within}s"
            await asyncio.sleep(0.05)


async def test_a_connection_moves_on_when_its_node_dies(
    rabbit: RabbitCluster, namespace: str
) -> None:
    """The client's node dies and stays dead: its publishes are confirmed, and its consumer
    fed, through the next node listed, within seconds (the times are printed)."""
    topology = Topology(namespace)
    declarer = await Broker.connect(rabbit.nodes[-1].url, topology)  # leaders on the last
    queue = await topology.declare_hands_pool(declarer.channel, "email")
    await declarer.close()
    broker = await Broker.connect(rabbit.url, topology, publish_timeout=2.0)  # on the first
    arrived: list[float] = []

    async def record(message: Message, delivery: Delivery) -> None:
        arrived.append(time.monotonic())
        await delivery.ack()

    await broker.consume(queue, record)
    try:
        await asyncio.to_thread(rabbit.kill, rabbit.nodes[0].name)
        killed = time.monotonic()
        published = await confirmed_at(broker, queue) - killed
        await eventually(lambda: bool(arrived), within=30, what="the consumer back")
        consumed = arrived[0] - killed
        print(f"after the kill: publisher {published:.2f}s, consumer {consumed:.2f}s")
        assert broker.connected
    finally:
        await broker.close()
        await asyncio.to_thread(rabbit.revive)


async def jobs_published(cluster: Cluster) -> int:
    """Tool jobs the relays have published so far."""
    o = schema.outbox
    hands = cluster.env.topology.hands_queue("email")
    async with cluster.store.backend.engine.connect() as conn:
        found = await conn.execute(
            select(func.count())
            .select_from(o)
            .where(o.c.routing_key == hands, o.c.sent_at.is_not(None))
        )
        return int(found.scalar_one())


async def burst(cluster: Cluster, batches: int) -> None:
    """Submit ``batches`` sessions; return once their first jobs are published, so their
    calls are under way (each takes the email service's delay)."""
    before = await jobs_published(cluster)
    await cluster.submit_batches(batches)

    async def under_way() -> bool:
        return await jobs_published(cluster) >= before + 3

    await eventually(under_way, within=60, what="tool calls under way")


@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)  # a server store only
async def test_a_node_then_the_leaders_node_die_mid_burst(
    broker_cluster: Cluster, rabbit: RabbitCluster
) -> None:
    cluster = broker_cluster
    began = time.monotonic()
    await cluster.email.set_faults(delay=1.0)  # calls in flight at each kill
    ports = {f"{role}-{n}": free_port() for n in range(2) for role in ("brain", "hands")}
    for name, port in ports.items():
        cluster.start(name, BRAINHANDS_RABBITMQ_URL=rabbit.url, BRAINHANDS_HTTP_PORT=str(port))
    # Consuming first: the kill is of a node in use, not of one a worker is still starting on.
    await eventually(lambda: all_ready(ports), within=60, what="every worker ready")
    await burst(cluster, 4)

    first = rabbit.nodes[0].name  # every worker's node: the first listed
    await asyncio.to_thread(rabbit.kill, first)
    killed = time.monotonic()
    cluster.kills[f"SIGKILL the workers' RabbitMQ node ({first})"] += 1
    # Sessions submitted while it is down finish before it is back: the workers moved on.
    await cluster.submit_batches(4)
    await cluster.wait_done(within=90)
    moved_on = time.monotonic() - killed
    await cluster.submit_batches(4)
    await asyncio.to_thread(rabbit.start, first)  # during the burst

    # The test's own connection declared the deployment's queues, before any node died: a
    # member on every node, the leaders on the test's node.
    second = rabbit.nodes[1].name
    topology = cluster.env.topology
    declared = {topology.hands_queue("email"), *topology.brain_queues("v1")}
    members = rabbit.queue_column(second, "members")
    assert all(members[q].count("@") == len(rabbit.nodes) for q in declared), members
    leaders = rabbit.queue_column(second, "leader")
    leader = rabbit.nodes[-1].node
    assert {leaders[q] for q in declared} == {leader}, leaders
    await burst(cluster, 4)
    await asyncio.to_thread(rabbit.kill, leader)
    killed = time.monotonic()
    cluster.kills[f"SIGKILL the queues' leader node ({leader.split('@')[0]})"] += 1

    await cluster.wait_done(within=120)
    finished = time.monotonic() - killed
    moved = Counter(rabbit.queue_column(second, "leader")[q] for q in declared)
    assert leader not in moved, moved
    await cluster.check_invariants("broker cluster: a node, then the leaders' node, killed")
    for name, proc in cluster.procs.items():
        assert proc.poll() is None, f"{name} exited: {cluster.log(name)[-2000:]}"
    print(
        f"broker cluster run: {time.monotonic() - began:.1f}s; sessions submitted after the "
        f"workers' node died all done {moved_on:.1f}s after its death; every session done "
        f"{finished:.1f}s after the leaders' node died (leaders now {dict(moved)})"
    )
