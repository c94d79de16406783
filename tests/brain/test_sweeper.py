"""The sweeper's wake-ups: sent once a need outlives its grace, held back while the session's
Brain queue holds a backlog (where its own wake-up most likely still waits)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

import pytest
from aio_pika.exceptions import ChannelNotFoundEntity
from redis.asyncio import Redis
from sqlalchemy import insert, update

from brain.client import submit_input
from brain.decide import TOOL_KIND
from brain.sweeper import Sweeper, plan_wake_ups
from shared.keys import Keys
from shared.lease import LeaseManager
from shared.messages import SessionWake, ToolJob, decode
from shared.store import Store, schema
from shared.store.queries import SessionRef, sessions_needing_attention
from tests.helpers.rabbit import BrokerEnv, broker_env

PERIOD = 1.0
BACKLOG_GRACE = 30.0
NOW = 1_000.0


def plan(
    sessions: list[SessionRef],
    backlogs: dict[str, int],
    woken_at: dict[str, float] | None = None,
) -> tuple[list[str], list[str]]:
    wake, hold = plan_wake_ups(
        sessions,
        backlogs=backlogs,
        woken_at=woken_at or {},
        now=NOW,
        grace=PERIOD,
        backlog_grace=BACKLOG_GRACE,
    )
    return [r.session_id for r in wake], [r.session_id for r in hold]


def test_an_empty_queue_wakes_every_session_past_the_grace() -> None:
    sessions = [SessionRef("a", "v1", NOW - 2), SessionRef("b", "v2", NOW - 60)]

    assert plan(sessions, {"v1": 0}) == (["a", "b"], [])  # v2 unknown: taken as empty


def test_a_backlog_holds_back_needs_younger_than_the_backlog_grace() -> None:
    young = SessionRef("young", "v1", NOW - 5)
    old = SessionRef("old", "v1", NOW - BACKLOG_GRACE)
    elsewhere = SessionRef("elsewhere", "v2", NOW - 5)

    assert plan([young, old, elsewhere], {"v1": 40, "v2": 0}) == (
        ["old", "elsewhere"],
        ["young"],
    )


def test_a_backlog_holds_back_a_session_the_sweeper_woke_recently() -> None:
    old = SessionRef("old", "v1", NOW - 120)

    assert plan([old], {"v1": 40}, {"old": NOW - 10}) == ([], ["old"])
    assert plan([old], {"v1": 40}, {"old": NOW - BACKLOG_GRACE}) == (["old"], [])
    assert plan([old], {"v1": 0}, {"old": NOW - 10}) == (["old"], [])


def test_the_backlog_grace_is_never_shorter_than_the_grace() -> None:
    wake, hold = plan_wake_ups(
        [SessionRef("a", "v1", NOW - 3)],
        backlogs={"v1": 1},
        woken_at={},
        now=NOW,
        grace=5.0,
        backlog_grace=2.0,
    )

    assert (wake, [r.session_id for r in hold]) == ([], ["a"])


@pytest.fixture
async def env(rabbitmq_url: str, namespace: str) -> AsyncIterator[BrokerEnv]:
    async with broker_env(rabbitmq_url, namespace) as opened:
        yield opened


@pytest.fixture
async def leases(redis_url: str, namespace: str) -> AsyncIterator[LeaseManager]:
    redis = Redis.from_url(redis_url)
    yield LeaseManager(redis, Keys(namespace), ttl_ms=2000)
    found = [key async for key in redis.scan_iter(match=f"{namespace}:*")]
    if found:
        await redis.delete(*found)
    await redis.aclose()


@pytest.fixture
def sweeper(store: Store, env: BrokerEnv, leases: LeaseManager) -> Sweeper:
    return Sweeper(
        store=store, broker=env.broker, leases=leases, period=PERIOD, backlog_grace=BACKLOG_GRACE
    )


async def needs_attention(
    store: Store, env: BrokerEnv, session_id: str, compat: str, age: float
) -> None:
    """A session whose submission has waited ``age`` seconds (its wake-up never relayed)."""
    await submit_input(
        store,
        env.topology,
        session_id=session_id,
        request_id="r1",
        input={"kind": "steps", "input": {}},
        compat=compat,
    )
    sub = schema.submission
    async with store.engine.begin() as conn:
        await conn.execute(
            update(sub)
            .where(sub.c.session_id == session_id)
            .values(created_at=sub.c.created_at - age)
        )


async def backlog(env: BrokerEnv, compat: str, messages: int) -> None:
    """Wake-ups of other sessions waiting in ``compat``'s Brain queue."""
    for n in range(messages):
        wake = SessionWake(session_id=f"queued-{n}", compat=compat, reason="submission")
        await env.broker.publish(wake, env.topology.brain_queue(compat))


async def swept_sessions(env: BrokerEnv, compat: str) -> list[str]:
    """Take every message out of ``compat``'s Brain queue; return the sweeper's wake-ups."""
    woken = []
    async with env.broker.side_channel() as channel:
        queue = await channel.declare_queue(env.topology.brain_queue(compat), passive=True)
        while (incoming := await queue.get(no_ack=True, fail=False)) is not None:
            message = decode(incoming.body)
            assert isinstance(message, SessionWake)
            if message.reason == "sweeper":
                woken.append(message.session_id)
    return sorted(woken)


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_sessions_needing_attention_say_since_when(store: Store, env: BrokerEnv) -> None:
    await needs_attention(store, env, "recent", "v1", 5)
    await needs_attention(store, env, "old", "v2", 60)
    now = time.time()

    found = await sessions_needing_attention(store.engine, now=now, grace=PERIOD)

    assert [(r.session_id, r.compat) for r in found] == [("old", "v2"), ("recent", "v1")]
    assert now - 61 < found[0].since <= now - 60
    assert now - 6 < found[1].since <= now - 5


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_a_backlogged_queue_gets_only_wake_ups_older_than_the_backlog_grace(
    sweeper: Sweeper, store: Store, env: BrokerEnv, caplog: pytest.LogCaptureFixture
) -> None:
    await env.brain_queue("v1")
    await backlog(env, "v1", 3)
    await needs_attention(store, env, "young", "v1", 5)
    await needs_attention(store, env, "old", "v1", BACKLOG_GRACE + 5)

    with caplog.at_level(logging.INFO, logger="brainhands.sweeper"):
        sent = await sweeper.sweep_once()

    assert sent["session_woken"] == 1
    [held] = [r for r in caplog.records if getattr(r, "event", None) == "sweep_held_back"]
    assert (held.held_back, held.backlogs) == (1, {"v1": 3})  # type: ignore[attr-defined]
    # The one wake-up sent joins the backlog; the next sweep does not send it again.
    assert await sweeper.sweep_once() == {}
    assert await swept_sessions(env, "v1") == ["old"]


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_an_empty_or_missing_queue_gets_wake_ups_after_the_normal_grace(
    sweeper: Sweeper, store: Store, env: BrokerEnv
) -> None:
    empty, missing = env.topology.brain_queue("v1"), env.topology.brain_queue("new")
    await env.brain_queue("v1")
    await needs_attention(store, env, "waiting", "v1", 5)
    await needs_attention(store, env, "first-of-its-build", "new", 5)
    assert await env.broker.ready_count(empty) == 0
    assert await env.broker.ready_count(missing) == 0

    env.queues.append(missing)  # the sweeper's wake-up declares it
    sent = await sweeper.sweep_once()

    assert sent["session_woken"] == 2
    assert await swept_sessions(env, "v1") == ["waiting"]
    assert await swept_sessions(env, "new") == ["first-of-its-build"]


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_reading_a_depth_declares_nothing(env: BrokerEnv) -> None:
    missing = env.topology.brain_queue("nowhere")

    assert await env.broker.ready_count(missing) == 0

    with pytest.raises(ChannelNotFoundEntity):
        await env.message_count(missing)


async def lost_call(store: Store, task_id: str, tool_input: object) -> None:
    """A tool task waiting for a minute on a call whose job never reached Hands."""
    now = time.time()
    async with store.engine.begin() as conn:
        await conn.execute(
            insert(schema.task).values(
                id=task_id,
                session_id="s1",
                kind=TOOL_KIND,
                kind_version=1,
                input=tool_input,
                status="waiting",
                operation_id=f"op-{task_id}",
                created_at=now - 60,
                updated_at=now - 60,
            )
        )


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_a_malformed_tool_task_is_reported_once_and_the_other_calls_are_resent(
    sweeper: Sweeper, store: Store, env: BrokerEnv, caplog: pytest.LogCaptureFixture
) -> None:
    queue = await env.hands_queue("email")
    await store.create_session("s1", compat="v1")
    await lost_call(store, "t-bad", {"tool": "send_email"})  # no arguments, no pool
    await lost_call(store, "t-good", {"tool": "send_email", "arguments": {}, "pool": "email"})

    with caplog.at_level(logging.INFO, logger="brainhands.sweeper"):
        first = await sweeper.sweep_once()
        second = await sweeper.sweep_once()

    assert first["job_redispatched"] == second["job_redispatched"] == 1
    reported = [r for r in caplog.records if getattr(r, "event", None) == "sweep_unsendable"]
    assert [r.task_id for r in reported] == ["t-bad"]  # type: ignore[attr-defined]
    async with env.broker.side_channel() as channel:
        jobs = await channel.declare_queue(queue, passive=True)
        sent = []
        while (incoming := await jobs.get(no_ack=True, fail=False)) is not None:
            job = decode(incoming.body)
            assert isinstance(job, ToolJob)
            sent.append(job.task_id)
    assert sent == ["t-good", "t-good"]
