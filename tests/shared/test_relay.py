"""The outbox relay against a real store (SQLite and PostgreSQL) and a real RabbitMQ."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brainhands.shared.config import normalize_database_url
from brainhands.shared.delivery import Delivery
from brainhands.shared.messages import Message, SessionWake, encode
from brainhands.shared.relay import OutboxRelay
from brainhands.shared.store import Draft, Store
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module
from tests.helpers.rabbit import BrokerEnv, broker_env, broker_stopped
from tests.helpers.stores import StoreTarget, drop_schema

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


class Dedupe:
    """A consumer that dedupes by message identity, as every brainhands consumer must."""

    def __init__(self) -> None:
        self.deliveries: Counter[str] = Counter()

    @property
    def unique(self) -> set[str]:
        return set(self.deliveries)

    async def __call__(self, message: Message, delivery: Delivery) -> None:
        assert isinstance(message, SessionWake)
        self.deliveries[message.reason] += 1
        await delivery.ack()


@pytest.fixture
async def env(rabbitmq_url: str, namespace: str) -> AsyncIterator[BrokerEnv]:
    async with broker_env(rabbitmq_url, namespace) as environment:
        yield environment


async def commit_wakes(store: Store, queue: str, count: int, *, per_commit: int = 100) -> None:
    """Commit ``count`` outbox rows, ``per_commit`` per commit, to session s1."""
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    version = 0
    for start in range(0, count, per_commit):
        draft = Draft("s1", version=version, fence=1)
        for n in range(start, min(count, start + per_commit)):
            draft.add_outbox(
                queue, encode(SessionWake(session_id="s1", compat="v1", reason=f"n{n}"))
            )
        version = (await store.commit(draft)).version


def expected(count: int) -> set[str]:
    return {f"n{n}" for n in range(count)}


async def test_rows_are_published_then_marked_sent(store: Store, env: BrokerEnv) -> None:
    queue = await env.brain_queue()
    consumer = Dedupe()
    await env.broker.consume(queue, consumer)
    await commit_wakes(store, queue, 250)
    relay = OutboxRelay(store, env.broker, batch_size=100)

    assert [await relay.drain_once() for _ in range(4)] == [100, 100, 50, 0]

    await eventually(lambda: consumer.unique == expected(250), what="all rows delivered")
    assert (await store.status())["outbox_unsent"] == 0


async def test_a_commit_wakes_the_relay_without_waiting_for_the_poll(
    store: Store, env: BrokerEnv
) -> None:
    queue = await env.brain_queue()
    consumer = Dedupe()
    await env.broker.consume(queue, consumer)
    relay = OutboxRelay(store, env.broker, poll_interval=60.0)
    store.add_commit_listener(relay.wake)
    stop = asyncio.Event()
    running = asyncio.create_task(relay.run(stop))
    try:
        await asyncio.sleep(0.2)  # the relay is idle, waiting out its 60 s poll
        started = time.monotonic()
        await commit_wakes(store, queue, 1)
        await eventually(lambda: consumer.unique == {"n0"}, within=5, what="delivery")
        assert time.monotonic() - started < 2.0
    finally:
        stop.set()
        await running


async def test_a_row_for_an_undeclared_queue_has_it_declared_and_goes_at_once(
    store: Store, env: BrokerEnv
) -> None:
    queue = env.topology.hands_queue("newpool")  # no worker of this pool ever started
    env.queues.append(queue)
    await commit_wakes(store, queue, 3)
    relay = OutboxRelay(store, env.broker)

    # Unroutable: the relay declares the queue and publishes the rows again, in one pass.
    assert await relay.drain_once() == 3
    assert (await store.status())["outbox_unsent"] == 0
    await eventually(lambda: env.count_is(queue, 3), what="rows waiting in the new queue")


async def test_sent_rows_are_pruned_after_the_retention(store: Store, env: BrokerEnv) -> None:
    queue = await env.brain_queue()
    await commit_wakes(store, queue, 5)
    await OutboxRelay(store, env.broker).drain_once()
    await commit_wakes_more(store, queue)

    assert await store.outbox.prune(older_than=3600) == 0
    assert await store.outbox.prune(older_than=0) == 5
    status = await store.status()
    assert (status["outbox_rows"], status["outbox_unsent"]) == (1, 1)  # unsent rows stay


async def commit_wakes_more(store: Store, queue: str) -> None:
    state = await store.load("s1")
    draft = Draft("s1", version=state.session.version, fence=1)
    draft.add_outbox(queue, encode(SessionWake(session_id="s1", compat="v1", reason="late")))
    await store.commit(draft)


async def test_two_relays_on_postgres_drain_concurrently_without_blocking(
    env: BrokerEnv, postgres_url: str, tmp_path: Path
) -> None:
    target = StoreTarget(normalize_database_url(postgres_url), f"relay{env.topology.namespace}")
    store = await Store.open(target.url, upgrade=True, db_schema=target.schema)
    try:
        queue = await env.brain_queue()
        consumer = Dedupe()
        await env.broker.consume(queue, consumer, prefetch=500)
        await commit_wakes(store, queue, 5000, per_commit=500)
        relays = [OutboxRelay(store, env.broker, batch_size=100) for _ in range(2)]
        stop = asyncio.Event()
        runs = [asyncio.create_task(r.run(stop)) for r in relays]
        await eventually(
            lambda: consumer.unique == expected(5000), within=120, what="5,000 rows delivered"
        )
        stop.set()
        await asyncio.gather(*runs)
    finally:
        await store.close()
        await drop_schema(target.url, target.schema or "")

    # SKIP LOCKED: each relay took rows the other had not locked, so nobody published twice.
    assert max(consumer.deliveries.values()) == 1
    assert sum(r.published for r in relays) == 5000
    assert min(r.published for r in relays) > 500, [r.published for r in relays]


@pytest.mark.chaos
async def test_rabbitmq_restart_mid_stream_loses_no_row(store: Store, env: BrokerEnv) -> None:
    queue = await env.brain_queue()
    consumer = Dedupe()
    await env.broker.consume(queue, consumer, prefetch=200)
    await commit_wakes(store, queue, 1000, per_commit=50)
    relay = OutboxRelay(store, env.broker, batch_size=50, poll_interval=0.2)
    stop = asyncio.Event()
    running = asyncio.create_task(relay.run(stop))
    try:
        await eventually(lambda: len(consumer.unique) >= 150, within=60, what="stream started")
        async with broker_stopped():
            await asyncio.sleep(1.0)
            # Marked sent while the broker is down? Only rows it had confirmed before.
            status = await store.status()
            assert 1000 - status["outbox_unsent"] <= relay.published
        await eventually(
            lambda: consumer.unique == expected(1000), within=120, what="every row after restart"
        )
    finally:
        stop.set()
        await running
    assert (await store.status())["outbox_unsent"] == 0
    assert relay.published >= 1000


@pytest.mark.chaos
async def test_relay_killed_between_confirm_and_mark_publishes_again_harmlessly(
    store: Store, store_target: StoreTarget, env: BrokerEnv, tmp_path: Path
) -> None:
    queue = await env.brain_queue()
    consumer = Dedupe()
    await env.broker.consume(queue, consumer)
    await commit_wakes(store, queue, 10)
    await kill_frozen_victim(store_target, env, tmp_path, what="publish and freeze")
    await eventually(lambda: consumer.unique == expected(10), what="first publication")
    assert (await store.status())["outbox_unsent"] == 10  # confirmed, but never marked

    await OutboxRelay(store, env.broker).drain_once()

    await eventually(lambda: sum(consumer.deliveries.values()) == 20, what="second publication")
    assert consumer.unique == expected(10)  # delivered twice, deduped to once each
    assert (await store.status())["outbox_unsent"] == 0


async def test_rows_handed_to_a_running_relay_are_left_to_it_until_the_handoff_ends(
    store: Store, env: BrokerEnv
) -> None:
    queue = await env.brain_queue()
    store.handoff.begin(1.0)  # as while this process's relay runs
    await commit_wakes(store, queue, 4)
    store.handoff.end()
    other = OutboxRelay(store, env.broker)

    assert await other.drain_once() == 0  # another relay leaves them alone meanwhile
    await asyncio.sleep(1.1)
    assert await other.drain_once() == 4  # the writer never published them: taken over
    assert (await store.status())["outbox_unsent"] == 0


@contextlib.asynccontextmanager
async def running_relay(
    store: Store, env: BrokerEnv, consumer: Dedupe, handoff: float
) -> AsyncIterator[tuple[str, OutboxRelay]]:
    """A relay running as in a worker (its commits' rows handed to it, polling only once a
    minute), past its first empty poll, and ``consumer`` on the Brain queue it feeds."""
    queue = await env.brain_queue()
    await env.broker.consume(queue, consumer)
    relay = OutboxRelay(store, env.broker, poll_interval=60.0, handoff=handoff)
    store.add_commit_listener(relay.wake)
    stop = asyncio.Event()
    running = asyncio.create_task(relay.run(stop))
    try:
        await asyncio.sleep(0.2)  # past its first (empty) poll: only the commits can wake it
        yield queue, relay
    finally:
        stop.set()
        await running


async def test_a_running_relay_publishes_its_commits_rows_and_marks_them_sent(
    store: Store, env: BrokerEnv
) -> None:
    consumer = Dedupe()
    async with running_relay(store, env, consumer, handoff=60.0) as (queue, relay):
        await commit_wakes(store, queue, 300, per_commit=3)
        await eventually(lambda: consumer.unique == expected(300), within=30, what="delivery")
        await eventually(lambda: all_sent(store), within=10, what="rows marked sent")
    assert store.handoff.seconds is None  # a stopped relay takes no more rows over
    assert relay.published == 300


async def test_a_stopping_relay_publishes_and_marks_what_it_was_handed_before_it_returns(
    store: Store, env: BrokerEnv
) -> None:
    consumer = Dedupe()
    async with running_relay(store, env, consumer, handoff=60.0) as (queue, relay):
        await commit_wakes(store, queue, 300, per_commit=300)
    # Stopped at once: the rows it was handed went out, and were marked, before run returned.
    assert relay.published == 300
    assert await all_sent(store)
    await eventually(lambda: consumer.unique == expected(300), within=30, what="delivery")


async def test_rows_a_busy_relay_got_to_too_late_are_left_to_the_polling_relays(
    store: Store, env: BrokerEnv, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = Dedupe()
    async with running_relay(store, env, consumer, handoff=1.0) as (queue, writer):
        with caplog.at_level(logging.WARNING, logger="brainhands.relay"):
            await commit_wakes(store, queue, 5)
            # The writer's process is busy (blocking) past the end of its window.
            time.sleep(0.9)  # noqa: ASYNC251
            await asyncio.sleep(0.3)
        assert writer.published == 0
        left = [r for r in caplog.records if r.message.startswith("left")]
        assert [r.rows for r in left] == [5]  # type: ignore[attr-defined]
        await asyncio.sleep(0.2)  # the handoff is over: a polling relay takes them
        assert await OutboxRelay(store, env.broker).drain_once() == 5
        await eventually(lambda: consumer.unique == expected(5), what="delivery")
    assert consumer.deliveries.total() == 5  # each once


async def all_sent(store: Store) -> bool:
    return bool((await store.status())["outbox_unsent"] == 0)


@pytest.mark.chaos
async def test_a_writer_killed_before_its_relay_published_is_taken_over_after_the_handoff(
    store: Store, store_target: StoreTarget, env: BrokerEnv, tmp_path: Path
) -> None:
    queue = await env.brain_queue()
    consumer = Dedupe()
    await env.broker.consume(queue, consumer)
    await store.create_session("s2", compat="v1")
    await store.claim_session_fence("s2", 1)
    await kill_frozen_victim(store_target, env, tmp_path, "--commit", what="commit and freeze")
    killed_at = time.monotonic()
    assert (await store.status())["outbox_unsent"] == 3  # committed, never published
    other = OutboxRelay(store, env.broker, poll_interval=0.1)
    stop = asyncio.Event()
    running = asyncio.create_task(other.run(stop))
    try:
        await eventually(
            lambda: consumer.deliveries.total() == 3, within=10, what="rows taken over"
        )
    finally:
        stop.set()
        await running
    assert time.monotonic() - killed_at >= 1.0  # it waited out (most of) the 2 s handoff
    assert consumer.unique == {"c0", "c1", "c2"}
    assert (await store.status())["outbox_unsent"] == 0


async def kill_frozen_victim(
    store_target: StoreTarget, env: BrokerEnv, tmp_path: Path, *args: str, what: str
) -> None:
    """Run ``tests.helpers.relay_victim`` until it froze where ``args`` say, then SIGKILL it."""
    marker = tmp_path / "frozen"
    victim = spawn_module(
        "tests.helpers.relay_victim",
        str(marker),
        *args,
        env={
            **store_target.env(),
            "BRAINHANDS_RABBITMQ_URL": env.url,
            "BRAINHANDS_NAMESPACE": env.topology.namespace,
        },
        log=tmp_path / "victim.log",
    )
    try:
        await eventually(marker.exists, within=30, what=f"the victim to {what}")
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
