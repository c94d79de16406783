"""The running calls of a Hands worker: one object per call, and how each hears of a cancel."""

from __future__ import annotations

from pydantic import BaseModel

from brainhands.hands.context import ToolContext
from brainhands.hands.running import RunningCall, RunningCalls
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
