"""The sweeper's wake-ups: sent once a need outlives its grace, held back while the session's
Brain queue holds a backlog (where its own wake-up most likely still waits) until the queue's
delivery mark has passed the need, or, without a mark, for a time that doubles after each
wake-up the sweeper already sent it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aio_pika.exceptions import ChannelNotFoundEntity
from redis.asyncio import Redis
from sqlalchemy import insert, update

from brainhands.brain.decide import TOOL_KIND
from brainhands.brain.retention import Retention
from brainhands.brain.sweeper import (
    MARK_MARGIN,
    MAX_BACKLOG_BACKOFF,
    Sweeper,
    Watch,
    due_rechecks,
    plan_wake_ups,
    watch_sessions,
)
from brainhands.shared.delivery import Delivery
from brainhands.shared.errors import NotFoundError
from brainhands.shared.keys import Keys
from brainhands.shared.lease import LeaseManager
from brainhands.shared.messages import SessionWake, ToolJob, ToolResult, decode
from brainhands.shared.progress import QueueProgress
from brainhands.shared.store import Draft, Store, schema
from brainhands.shared.store.queries import SessionRef
from brainhands.shared.workspace_trees import FileEntry, object_hash
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually
from tests.helpers.rabbit import BrokerEnv, broker_env
from tests.helpers.submitting import submit_input

PERIOD = 1.0
BACKLOG_GRACE = 30.0
NOW = 1_000.0


CLEAR = Watch(clear_since=NOW - 60)
"""A session whose outbox was seen empty a minute ago, never woken by the sweeper."""


def plan(
    sessions: list[SessionRef],
    backlogs: dict[str, int],
    watched: dict[str, Watch] | None = None,
    marks: dict[str, float] | None = None,
    grace: float = PERIOD,
    backlog_grace: float = BACKLOG_GRACE,
) -> tuple[list[str], list[str]]:
    """Wake-ups and holds of ``sessions``, each ``CLEAR`` unless ``watched`` says otherwise."""
    wake, hold = plan_wake_ups(
        sessions,
        watched={**{r.session_id: CLEAR for r in sessions}, **(watched or {})},
        backlogs=backlogs,
        marks=marks or {},
        now=NOW,
        grace=grace,
        backlog_grace=backlog_grace,
    )
    return [r.session_id for r in wake], [r.session_id for r in hold]


def test_an_empty_queue_wakes_every_session_past_the_grace() -> None:
    sessions = [SessionRef("a", "v1", NOW - 2), SessionRef("b", "v2", NOW - 60)]

    assert plan(sessions, {"v1": 0}) == (["a", "b"], [])  # v2 unknown: taken as empty


def test_a_need_younger_than_the_grace_waits_whatever_the_mark() -> None:
    need = SessionRef("a", "v1", NOW - PERIOD / 2)

    assert plan([need], {"v1": 0}) == ([], ["a"])
    assert plan([need], {"v1": 40}, marks={"v1": NOW + 60}) == ([], ["a"])


def test_a_session_with_rows_in_the_outbox_is_left_to_the_relays() -> None:
    need = SessionRef("a", "v1", NOW - 5)
    sending = {"a": Watch(clear_since=None)}

    assert plan([need], {"v1": 0}, sending) == ([], ["a"])
    assert plan([need], {"v1": 0}, sending, marks={"v1": NOW}) == ([], ["a"])
    # ... but not for ever: a stuck outbox gets the time-based fallback.
    stuck = SessionRef("a", "v1", NOW - BACKLOG_GRACE)
    assert plan([stuck], {"v1": 0}, sending) == (["a"], [])
    stuck_long = SessionRef("a", "v1", NOW - MAX_BACKLOG_BACKOFF * BACKLOG_GRACE)
    assert plan([stuck_long], {"v1": 0}, sending, marks={"v1": NOW}) == (["a"], [])


def test_without_a_mark_a_backlog_holds_back_needs_younger_than_the_backlog_grace() -> None:
    young = SessionRef("young", "v1", NOW - 5)
    old = SessionRef("old", "v1", NOW - BACKLOG_GRACE)
    elsewhere = SessionRef("elsewhere", "v2", NOW - 5)

    assert plan([young, old, elsewhere], {"v1": 40, "v2": 0}) == (
        ["old", "elsewhere"],
        ["young"],
    )


def test_without_a_mark_a_backlog_holds_back_a_session_the_sweeper_woke_recently() -> None:
    old = SessionRef("old", "v1", NOW - 120)
    woken = Watch(clear_since=NOW - 120, woken_at=NOW - 10, woken=0)

    assert plan([old], {"v1": 40}, {"old": woken}) == ([], ["old"])
    long_ago = dataclasses.replace(woken, woken_at=NOW - BACKLOG_GRACE)
    assert plan([old], {"v1": 40}, {"old": long_ago}) == (["old"], [])
    assert plan([old], {"v1": 0}, {"old": woken}) == (["old"], [])


def test_each_wake_up_under_a_backlog_doubles_the_next_hold_up_to_a_cap() -> None:
    old = SessionRef("old", "v1", NOW - 3600)

    def woken_again(times: int, waited: float) -> bool:
        watch = Watch(clear_since=NOW - 3600, woken_at=NOW - waited, woken=times)
        wake, _ = plan([old], {"v1": 40}, {"old": watch})
        return wake == ["old"]

    for times, graces in ((1, 2), (2, 4), (3, MAX_BACKLOG_BACKOFF), (10, MAX_BACKLOG_BACKOFF)):
        assert not woken_again(times, graces * BACKLOG_GRACE - 1)
        assert woken_again(times, graces * BACKLOG_GRACE)
    # Without a backlog the normal grace applies, however often the session was woken.
    tired = Watch(clear_since=NOW - 3600, woken_at=NOW - PERIOD, woken=10)
    assert plan([old], {"v1": 0}, {"old": tired}) == (["old"], [])


def test_the_backlog_grace_is_never_shorter_than_the_grace() -> None:
    need = SessionRef("a", "v1", NOW - 3)

    assert plan([need], {"v1": 1}, grace=5.0, backlog_grace=2.0) == ([], ["a"])


def test_a_delivery_mark_past_the_session_releases_it_before_the_backlog_grace() -> None:
    need = SessionRef("a", "v1", NOW - 5)
    seen = {"a": Watch(clear_since=NOW - 4)}
    passed, short = NOW - 4 + MARK_MARGIN, NOW - 4 + MARK_MARGIN - 0.5

    assert plan([need], {"v1": 40}, seen, marks={"v1": passed}) == (["a"], [])
    assert plan([need], {"v1": 40}, seen, marks={"v1": short}) == ([], ["a"])
    assert plan([need], {"v1": 40}, seen, marks={"v2": NOW}) == ([], ["a"])  # another queue


def test_a_delivery_mark_must_also_pass_the_sweepers_own_last_wake_up() -> None:
    need = SessionRef("a", "v1", NOW - 20)
    woken = {"a": Watch(clear_since=NOW - 20, woken_at=NOW - 3, woken=1)}

    assert plan([need], {"v1": 40}, woken, marks={"v1": NOW - 4}) == ([], ["a"])
    assert plan([need], {"v1": 40}, woken, marks={"v1": NOW - 3 + MARK_MARGIN}) == (["a"], [])


def test_a_mark_behind_the_session_holds_it_up_to_the_cap() -> None:
    cap = MAX_BACKLOG_BACKOFF * BACKLOG_GRACE
    held, stuck = SessionRef("a", "v1", NOW - cap + 1), SessionRef("b", "v1", NOW - cap)

    assert plan([held, stuck], {"v1": 40}, marks={"v1": NOW - 3600}) == (["b"], ["a"])


def test_a_watch_starts_when_the_outbox_is_first_seen_empty_and_ends_with_the_need() -> None:
    a, b = SessionRef("a", "v1", NOW - 9), SessionRef("b", "v1", NOW - 9)

    first = watch_sessions({}, [a, b], unsent={"a"}, now=NOW)
    assert first == {"a": Watch(clear_since=None), "b": Watch(clear_since=NOW)}
    woken_b = {**first, "b": Watch(clear_since=NOW, woken_at=NOW, woken=1)}
    later = watch_sessions(woken_b, [a, b], unsent=set(), now=NOW + 1)
    # b keeps the time its outbox was first seen empty, and its wake-ups.
    assert later == {"a": Watch(clear_since=NOW + 1), "b": woken_b["b"]}
    # b's need was met; a has rows in the outbox again.
    assert watch_sessions(later, [a], unsent={"a"}, now=NOW + 2) == {"a": Watch()}


def test_a_blocked_session_is_looked_at_again_after_the_recheck_then_ever_more_rarely() -> None:
    blocked = [SessionRef("fresh", "v1", NOW - 5, blocked=True)]
    blocked.append(SessionRef("old", "v1", NOW - 3600, blocked=True))

    def due(watched: dict[str, Watch]) -> list[str]:
        return [r.session_id for r in due_rechecks(blocked, watched=watched, now=NOW, recheck=60)]

    assert due({}) == ["old"]  # "fresh" was blocked 5 s ago: its Brain just looked
    assert due({"old": Watch(woken_at=NOW - 90, woken=1)}) == []  # next look after 120 s
    assert due({"old": Watch(woken_at=NOW - 120, woken=1)}) == ["old"]
    capped = Watch(woken_at=NOW - 60 * MAX_BACKLOG_BACKOFF, woken=20)
    assert due({"old": capped}) == ["old"]


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
async def progress(
    leases: LeaseManager, redis_url: str, namespace: str
) -> AsyncIterator[QueueProgress]:
    # Its key goes with the lease keys (same namespace, same Redis).
    redis = Redis.from_url(redis_url)
    yield QueueProgress(redis, Keys(namespace))
    await redis.aclose()


@pytest.fixture
def sweeper(store: Store, env: BrokerEnv, leases: LeaseManager, progress: QueueProgress) -> Sweeper:
    return Sweeper(
        store=store,
        broker=env.broker,
        leases=leases,
        period=PERIOD,
        backlog_grace=BACKLOG_GRACE,
        progress=progress,
    )


async def needs_attention(
    store: Store, env: BrokerEnv, session_id: str, compat: str, age: float, sent: bool = True
) -> None:
    """A session whose submission has waited ``age`` seconds, its wake-up lost after it left
    the outbox (``sent``) or still in the outbox."""
    await submit_input(
        store,
        env.topology,
        session_id=session_id,
        request_id="r1",
        input={"kind": "steps", "input": {}},
        compat=compat,
    )
    sub = schema.submission
    async with store.backend.engine.begin() as conn:
        await conn.execute(
            update(sub)
            .where(sub.c.session_id == session_id)
            .values(created_at=sub.c.created_at - age)
        )
        if sent:
            out = schema.outbox
            await conn.execute(
                update(out).where(out.c.session_id == session_id).values(sent_at=time.time())
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

    found = await store.queries.sessions_needing_attention(now=now, grace=PERIOD)

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
async def test_a_backlogged_session_is_woken_once_its_queue_was_delivered_past_it(
    sweeper: Sweeper, store: Store, env: BrokerEnv, progress: QueueProgress
) -> None:
    queue = await env.brain_queue("v1")
    await backlog(env, "v1", 1)
    await needs_attention(store, env, "lost", "v1", 5)
    await needs_attention(store, env, "unsent", "v1", 5, sent=False)
    # Both needs are younger than the backlog grace, and no mark says their queue moved.
    assert await sweeper.sweep_once() == {}
    await asyncio.sleep(MARK_MARGIN + 1.5)
    await backlog(env, "v1", 3)
    # A Brain takes two wake-ups, one published just now, and shares the queue's mark.
    async with env.broker.side_channel() as channel:
        declared = await channel.declare_queue(queue, passive=True)
        for _ in range(2):
            progress.note(queue, Delivery(await declared.get(no_ack=True)).published_at)
    await progress.share()
    await needs_attention(store, env, "late", "v1", 1.5)

    sent = await sweeper.sweep_once()

    # Only "lost" was woken: all that was published for it has been delivered; "unsent"
    # still has its wake-up in the outbox, and "late" was first seen after the mark.
    assert sent["session_woken"] == 1
    assert await swept_sessions(env, "v1") == ["lost"]


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_a_session_is_held_until_both_its_queues_were_delivered_past_it(
    sweeper: Sweeper, store: Store, env: BrokerEnv, progress: QueueProgress
) -> None:
    wakes, results = await env.brain_queue("v1"), await env.results_queue("v1")
    await backlog(env, "v1", 1)
    await needs_attention(store, env, "lost", "v1", 5)
    assert await sweeper.sweep_once() == {}  # held: the queue has a backlog, and no mark
    await asyncio.sleep(MARK_MARGIN + 1.5)
    await backlog(env, "v1", 2)
    for n in range(2):  # results of other sessions, waiting in the result queue
        result = ToolResult(
            operation_id=f"op-{n}",
            session_id=f"running-{n}",
            task_id="t",
            compat="v1",
            status="succeeded",
        )
        await env.broker.publish(result, results)

    async def deliver(queue: str, messages: int) -> None:
        async with env.broker.side_channel() as channel:
            declared = await channel.declare_queue(queue, passive=True)
            for _ in range(messages):
                progress.note(queue, Delivery(await declared.get(no_ack=True)).published_at)
        await progress.share()

    # The wake-up queue was delivered past the need (the old wake-up and a new one), the
    # result queue not yet: the session's trigger may still be a result in it.
    await deliver(wakes, 2)
    assert await sweeper.sweep_once() == {}
    await deliver(results, 1)
    assert (await sweeper.sweep_once())["session_woken"] == 1
    assert await swept_sessions(env, "v1") == ["lost"]


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
    async with store.backend.engine.begin() as conn:
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
    assert [job.task_id for job in await sent_jobs(env, queue)] == ["t-good", "t-good"]


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_a_call_with_arguments_by_reference_is_resent_by_reference(
    sweeper: Sweeper, store: Store, env: BrokerEnv
) -> None:
    queue = await env.hands_queue("email")
    await store.create_session("s1", compat="v1")
    by_reference = {"arguments": {}, "arguments_blob_id": "blob-1"}
    await lost_call(store, "t-1", {"tool": "send_email", **by_reference, "pool": "email"})

    await sweeper.sweep_once()

    [job] = await sent_jobs(env, queue)
    assert (job.arguments, job.arguments_blob_id, job.schema_version) == ({}, "blob-1", 2)


async def sent_jobs(env: BrokerEnv, queue: str) -> list[ToolJob]:
    """Take every job out of a Hands queue."""
    async with env.broker.side_channel() as channel:
        jobs = await channel.declare_queue(queue, passive=True)
        sent = []
        while (incoming := await jobs.get(no_ack=True, fail=False)) is not None:
            job = decode(incoming.body)
            assert isinstance(job, ToolJob)
            sent.append(job)
    return sent


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_a_blocked_task_does_not_get_its_session_woken_every_period(
    brains: BrainHarness,
) -> None:
    recheck = 1.0  # two sweeper periods
    brains.start_brain(BRAINHANDS_SWEEPER_BLOCKED_RECHECK=str(recheck))
    await brains.store.create_session("stuck", compat="v1")
    await brains.store.claim_session_fence("stuck", 1)
    draft = Draft("stuck", version=0, fence=1)
    draft.add_task(kind="gone", kind_version=7, input={}, phase="start")
    await brains.store.commit(draft)  # no wake-up sent: the sweeper finds it

    def events(name: str) -> list[dict[str, Any]]:
        lines = (json.loads(line) for line in brains.log(0).splitlines() if line.startswith("{"))
        return [e for e in lines if e.get("event") == name]

    def rechecks() -> list[float]:
        return [e["ts"] for e in events("swept") if "blocked_rechecked" in e]

    await eventually(lambda: len(rechecks()) >= 2, within=30, what="two rechecks")

    [block] = events("blocked")  # the rechecks found the same: nothing was committed
    first, second = rechecks()[:2]
    assert first - block["ts"] >= recheck - 0.2
    assert second - first >= 2 * recheck - 0.2
    # Over those six periods at least, the session was woken for nothing else.
    between = [e for e in events("swept") if block["ts"] < e["ts"] <= second]
    assert [e.get("blocked_rechecked") for e in between] == [1, 1]
    assert not any("session_woken" in e for e in between)


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_a_parked_job_is_not_the_only_record_of_its_call_which_is_sent_again(
    sweeper: Sweeper, store: Store, env: BrokerEnv
) -> None:
    queue = await env.hands_queue("email")
    await store.create_session("s1", compat="v1")
    tool_input = {"tool": "send_email", "arguments": {"to": "a@example.com"}, "pool": "email"}
    await lost_call(store, "t-parked", tool_input)
    job = ToolJob(
        operation_id="op-t-parked",
        session_id="s1",
        task_id="t-parked",
        compat="v1",
        **tool_input,  # type: ignore[arg-type]
    )
    await env.park_after_the_delivery_limit(queue, [job])
    # What says the call is still to be made is the store, not the parked message.
    [call] = await store.queries.calls_without_outcome(older_than=time.time())
    assert call.task.id == "t-parked" and call.operation_status is None
    assert await env.message_count(queue) == 0

    sent = await sweeper.sweep_once()

    assert sent["job_redispatched"] == 1
    async with env.broker.side_channel() as channel:
        jobs = await channel.declare_queue(queue, passive=True)
        incoming = await jobs.get(no_ack=True)
    assert decode(incoming.body) == job


@pytest.mark.integration
async def test_workspace_objects_no_version_names_are_collected_past_their_margin(
    store: Store, env: BrokerEnv, leases: LeaseManager, progress: QueueProgress
) -> None:
    named, orphan = b"named by a version\n", b"captured by a call that never committed\n"
    manifest = {"a.txt": FileEntry("f", object_hash(named), len(named))}
    await store.workspaces.create("acme/s1", "repo", manifest, {object_hash(named): named})
    await store.workspaces.put("acme", {object_hash(orphan): orphan})
    sweeper = Sweeper(
        store=store,
        broker=env.broker,
        leases=leases,
        progress=progress,
        workspace_collect_every=0.0,
        workspace_margin=0.5,
    )

    assert "workspace_objects_collected" not in await sweeper.sweep_once()  # within margin
    await asyncio.sleep(0.6)
    assert (await sweeper.sweep_once())["workspace_objects_collected"] == 1
    with pytest.raises(NotFoundError):
        await store.workspaces.objects("acme", [object_hash(orphan)])
    head = await store.workspaces.head("acme/s1", "repo")
    assert len(await store.workspaces.objects("acme", [head.root, object_hash(named)])) == 2


@pytest.mark.integration
async def test_an_erased_sessions_redis_keys_go_and_finished_sessions_expire_by_tenant(
    store: Store,
    env: BrokerEnv,
    leases: LeaseManager,
    progress: QueueProgress,
    redis_url: str,
    namespace: str,
) -> None:
    # A session run and erased: its lease, fence and witness keys, and its call's, remain.
    await store.create_session("acme/s1", compat="v1")
    intent = {"session_id": "acme/s1", "task_id": "t1", "tool": "t", "pool": "p", "arguments": {}}
    await store.ledger.claim("op-1", 1, intent=intent)
    for resource in ("session:acme/s1", "operation:op-1"):
        lease = await leases.acquire(resource)
        assert lease is not None
        await leases.release(lease, witness=1)
    redis = Redis.from_url(redis_url)
    left = [k async for k in redis.scan_iter(match=f"{namespace}:*")]
    assert len([k for k in left if b"acme/s1" in k or b"op-1" in k]) == 4
    await store.erasures.erase("acme/s1", principal="operator")
    # Finished sessions last changed 3 days ago: acme keeps 2 days, globex 10 (default: 2).
    for session_id in ("acme/old", "globex/old", "old"):
        await store.create_session(session_id, compat="v1")
    async with store.backend.transaction() as conn:
        await conn.execute(update(schema.session).values(updated_at=time.time() - 3 * 86400))
    sweeper = Sweeper(
        store=store,
        broker=env.broker,
        leases=leases,
        progress=progress,
        retention=Retention(2, {"globex": 10}),
    )

    sent = await sweeper.sweep_once()

    assert sent["erased_session_keys_deleted"] == 3  # acme/s1, then the two expired
    assert sent["session_expired"] == 2
    left = [k async for k in redis.scan_iter(match=f"{namespace}:*")]
    assert not [k for k in left if b"acme/s1" in k or b"op-1" in k or b"old" in k], left
    await redis.aclose()
    [record] = await store.erasures.records("acme/old")
    assert (record["principal"], record["reason"], record["resources"]) == (
        "sweeper",
        "expired",
        None,
    )
    await store.load("globex/old")  # kept: its tenant keeps 10 days
    with pytest.raises(NotFoundError):
        await store.load("old")
    assert "session_expired" not in await sweeper.sweep_once()
