"""The running calls of a Hands worker: one object per call, and how each hears of a cancel."""

from __future__ import annotations

import asyncio
import time

import pytest
from pydantic import BaseModel
from redis.asyncio import Redis

from brainhands.hands.context import ToolContext
from brainhands.hands.running import RunningCall, RunningCalls, lease_vouched
from brainhands.shared.errors import LeaseLost
from brainhands.shared.keys import Keys, operation_resource
from brainhands.shared.lease import LeaseManager
from brainhands.shared.messages import ToolJob
from brainhands.shared.tools import declare


class _Args(BaseModel):
    to: str


async def _send(args: _Args, ctx: ToolContext) -> None:
    return None


SPEC = declare(
    _send,
    name="send",
    pool="email",
    policy="safe",
    query=None,
    timeout=5,
    retry=None,
    description="send",
)


def _call(operation_id: str) -> RunningCall:
    job = ToolJob(
        operation_id=operation_id,
        tool="send",
        arguments={"to": "a@example.com"},
        session_id="s-1",
        task_id=f"task-{operation_id}",
        compat="v1",
        pool="email",
    )
    return RunningCall(job, 7, SPEC, _Args(to="a@example.com"))


def test_the_context_carries_the_calls_key_fence_and_attempt() -> None:
    running = RunningCalls()
    call = _call("op-1")
    with running.attempt(call) as cancel:
        ctx = call.context(3, cancel)
        assert (ctx.operation_id, ctx.session_id, ctx.fence, ctx.attempt) == ("op-1", "s-1", 7, 3)
        assert not ctx.cancelled()
        running.cancel("op-1")
        assert ctx.cancelled()


def test_a_call_counts_as_running_only_during_an_attempt() -> None:
    running = RunningCalls()
    call = _call("op-1")
    with running.attempt(call) as first:
        assert len(running) == 1
    assert len(running) == 0
    running.cancel("op-1")  # not running here: nothing to tell
    assert not first.is_set()


def test_each_attempt_has_its_own_cancel_event() -> None:
    running = RunningCalls()
    call = _call("op-1")
    with running.attempt(call) as first:
        running.cancel_all()  # the worker shuts down during the first attempt
    with running.attempt(call) as second:
        assert first.is_set()
        assert not second.is_set()


def test_a_notice_stops_only_its_own_call_and_shutdown_stops_all() -> None:
    running = RunningCalls()
    one, two = _call("op-1"), _call("op-2")
    with running.attempt(one) as first, running.attempt(two) as second:
        running.cancel("op-2")
        assert (first.is_set(), second.is_set()) == (False, True)
        running.cancel_all()
        assert first.is_set()


@pytest.mark.integration
@pytest.mark.timeout(20)
async def test_a_holder_stalled_past_its_ttl_is_not_vouched_for_before_the_renewer_hears_of_it(
    redis_url: str, namespace: str
) -> None:
    # A pause the body wakes from first: the loop stalls (as under SIGSTOP) with the body
    # ready to run, so the renewer's expiry timer has not fired when it checks its lease.
    # Not vouched for, its call must go out marked: the mark's fenced write refuses it if
    # another holder claimed the call meanwhile.
    redis = Redis.from_url(redis_url)
    try:
        manager = LeaseManager(redis, Keys(namespace), ttl_ms=1000)
        lease = await manager.acquire(operation_resource("op-stall"))
        assert lease is not None
        holding = manager.hold(lease)
        vouched = []
        with pytest.raises(LeaseLost):
            async with holding:
                vouched.append(lease_vouched(holding))  # fresh: the call may go out unmarked
                await asyncio.sleep(1.5)  # past the first TTL: it counts from the renewals
                vouched.append(lease_vouched(holding))
                time.sleep(1.2)  # noqa: ASYNC251 -- stalled past the TTL, no await between
                vouched.append(lease_vouched(holding))
                await asyncio.sleep(1.0)  # the renewer hears of it now: the body is stopped
        assert vouched == [True, True, False]
        # Redis let the lease go meanwhile: another holder could have it.
        assert await manager.acquire(lease.resource) is not None
    finally:
        async for key in redis.scan_iter(match=f"{namespace}:*"):
            await redis.delete(key)
        await redis.aclose()
