"""Hands worker processes against real services; effects are observed at the email service."""

from __future__ import annotations

import asyncio
import dataclasses
import signal

import pytest
from sqlalchemy import insert, update

from brainhands.shared.calls import ToolCallIntent
from brainhands.shared.messages import ToolJob
from brainhands.shared.store import schema
from brainhands.shared.store.records import TaskRecord
from tests.helpers.harness import HandsHarness
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_a_job_runs_the_tool_records_the_outcome_and_publishes_the_result(
    hands: HandsHarness,
) -> None:
    hands.start_worker()
    job = hands.job("send_safe", {"to": "ada@example.com"})
    await hands.publish(job)

    op = await hands.outcome(job.operation_id)

    assert op.status == "succeeded" and op.attempts == 1
    receipt = await hands.email.lookup(job.operation_id)
    assert op.result == {"receipt": receipt, "attempt": 1}
    assert [r.status for r in hands.results] == ["succeeded"]

    async def marked() -> bool:  # the relay marks what it published a moment after
        return bool((await hands.store.status())["outbox_unsent"] == 0)

    await eventually(marked, within=5, what="the result's outbox row marked sent")


async def test_a_job_delivered_three_times_runs_the_effect_once(hands: HandsHarness) -> None:
    hands.start_worker()
    job = hands.job("send_unsafe", {"to": "bob@example.com"})
    for _ in range(3):
        await hands.publish(job)

    op = await hands.outcome(job.operation_id)
    await eventually(lambda: len(hands.results) == 3, what="a result per delivery")

    ledger = await hands.email.ledger()
    assert len(ledger["unsafe_sends"]) == 1  # a non-idempotent API saw exactly one call
    assert (op.status, op.attempts) == ("succeeded", 1)
    assert {r.status for r in hands.results} == {"succeeded"}


async def test_unknown_tools_and_bad_arguments_fail_clearly_and_the_worker_goes_on(
    hands: HandsHarness,
) -> None:
    hands.start_worker()
    unknown = hands.job("no_such_tool", {})
    invalid = hands.job("send_safe", {"to": 42, "extra": True})
    fine = hands.job("send_safe", {"to": "cy@example.com"})
    for job in (unknown, invalid, fine):
        await hands.publish(job)

    bad_tool = await hands.outcome(unknown.operation_id)
    bad_args = await hands.outcome(invalid.operation_id)
    good = await hands.outcome(fine.operation_id)

    assert bad_tool.status == "failed"
    assert bad_tool.error["type"] == "UnknownToolError"
    assert "no_such_tool" in bad_tool.error["message"]
    assert bad_args.status == "failed"
    assert bad_args.error["type"] == "InvalidArguments"
    assert "to" in bad_args.error["message"]
    assert good.status == "succeeded"


async def test_retryable_failures_are_retried_with_backoff(hands: HandsHarness) -> None:
    await hands.email.set_faults(fail_next=2)
    hands.start_worker()
    job = hands.job("send_safe", {"to": "dee@example.com"})
    await hands.publish(job)

    op = await hands.outcome(job.operation_id)

    assert (op.status, op.attempts) == ("succeeded", 3)
    assert op.result["attempt"] == 3


async def test_retries_stop_at_the_limit_and_the_count_survives_a_kill(
    hands: HandsHarness,
) -> None:
    await hands.email.set_faults(fail_next=100)
    first = hands.start_worker()
    job = hands.job("send_safe", {"to": "eve@example.com"})
    await hands.publish(job)

    async def two_attempts_failed() -> bool:
        try:
            op = await hands.ledger.get(job.operation_id)
        except Exception:
            return False
        return op.attempts == 2 and op.status == "intended"

    await eventually(two_attempts_failed, what="two failed attempts")
    first.send_signal(signal.SIGKILL)
    first.wait()
    hands.start_worker()

    op = await hands.outcome(job.operation_id)

    # The kill came while the worker waited out its backoff, the row settled by the retry it
    # scheduled: it interrupted nothing, and the successor's third attempt went out marked.
    # The tool's own four failed attempts end the call: 4 in all, not 2 + 4.
    assert (op.status, op.interruptions, op.attempts - op.interruptions) == ("failed", 0, 4)
    assert op.error["retryable"] is True
    faults = await hands.email.set_faults()
    assert faults["fail_next"] == 100 - 4  # the service saw exactly four calls


async def test_an_unsafe_call_whose_response_is_lost_is_uncertain_and_never_sent_again(
    hands: HandsHarness,
) -> None:
    hands.start_worker()
    await hands.email.set_faults(drop_next=1)  # stored, then the connection closes unanswered
    job = hands.job("pay_unsafe", {"to": "ivy@example.com"})
    await hands.publish(job)

    op = await hands.outcome(job.operation_id)

    assert op.status == "uncertain" and op.attempts == 1
    assert op.error["type"] == "RemoteDisconnected"
    ledger = await hands.email.ledger()
    assert ledger["unsafe_calls"] == 1  # one call reached the service
    assert [s["key"] for s in ledger["unsafe_sends"]] == [job.operation_id]


async def test_a_query_call_whose_response_is_lost_asks_before_sending_again(
    hands: HandsHarness,
) -> None:
    hands.start_worker()
    await hands.email.set_faults(drop_next=1)
    job = hands.job("pay_query", {"to": "joe@example.com"})
    await hands.publish(job)

    op = await hands.outcome(job.operation_id)

    assert (op.status, op.attempts) == ("succeeded", 1)  # found by its query, not re-run
    assert (await hands.email.ledger())["calls"] == 1
    assert '"via": "query"' in hands.log(hands.workers[0])


async def test_a_tool_past_its_timeout_is_cancelled_and_recorded_uncertain(
    hands: HandsHarness,
) -> None:
    hands.start_worker()
    job = hands.job("hang", {"to": "x@example.com"})
    await hands.publish(job)

    op = await hands.outcome(job.operation_id)

    assert op.status == "uncertain"
    assert op.error["type"] == "TimeoutError" and "timeout of 0.5s" in op.error["message"]


async def test_a_large_result_is_stored_once_as_a_blob(hands: HandsHarness) -> None:
    hands.start_worker(BRAINHANDS_MAX_INLINE_RESULT="2048")
    small = hands.job("big_result", {"size": 100})
    large = hands.job("big_result", {"size": 50_000})
    await hands.publish(small)
    await hands.publish(large)

    inline = await hands.outcome(small.operation_id)
    stored = await hands.outcome(large.operation_id)

    assert inline.result == {"data": "x" * 100} and inline.blob_id is None
    assert stored.result is None and stored.blob_id is not None
    assert await hands.ledger.read_blob(stored.blob_id) == b'{"data": "' + b"x" * 50_000 + b'"}'


async def test_sigterm_lets_the_running_tool_finish_then_exits_0(hands: HandsHarness) -> None:
    worker = hands.start_worker()
    job = hands.job("send_safe", {"to": "fay@example.com", "pause_after": 1.5})
    await hands.publish(job)
    await eventually(lambda: hands.service_has(job.operation_id), what="the tool to start")

    worker.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(worker.wait, 30)

    assert code == 0
    op = await hands.ledger.get(job.operation_id)
    assert op.status == "succeeded"  # finished within the grace period, result committed
    await eventually(lambda: len(hands.results) == 1, what="the result published on the way out")
    assert '"event": "draining"' in hands.log(worker)
    # Acked before the exit: a job left unacked would be back in the queue.
    assert await hands.env.message_count(hands.env.topology.hands_queue("email")) == 0


async def test_a_running_call_hears_of_its_cancel_from_the_store_without_a_notice(
    hands: HandsHarness,
) -> None:
    # The Brain committed the cancel and died before any notice went out: the store says so.
    hands.start_worker()
    job = hands.job("wait_for_cancel", {})
    await add_tool_task(hands, job)
    await hands.publish(job)

    # A safe call commits no started mark: the worker's log says when it goes out.
    worker = hands.workers[0]
    await eventually(lambda: '"event": "started"' in hands.log(worker), what="the call to start")
    await commit_cancel(hands, job)

    op = await hands.outcome(job.operation_id, within=15)

    assert op.result == {"stopped_by_cancel": True}  # told, and it stopped: its real outcome
    assert '"cancel found in the store"' in hands.log(hands.workers[0])


async def test_a_cancel_committed_during_an_interruption_backoff_stops_the_call(
    hands: HandsHarness,
) -> None:
    # An earlier holder claimed the call and died four times: the next run waits 4 s first
    # (send_safe's 0.25 s backoff, doubled per interruption), long after the claim read
    # that no cancel was requested.
    job = hands.job("send_safe", {"to": "gil@example.com"})
    await add_tool_task(hands, job)
    await claimed_and_interrupted(hands, job, 4)
    worker = hands.start_worker()
    await hands.publish(job)
    await eventually(lambda: '"event": "rerun"' in hands.log(worker), what="the backoff to start")
    assert '"delay": 4.0' in hands.log(worker)

    await commit_cancel(hands, job)  # no notice: only the store says so

    op = await hands.outcome(job.operation_id, within=20)
    assert (op.status, op.error["type"]) == ("cancelled", "Cancelled")
    assert not await hands.service_has(job.operation_id)  # the email never went out
    assert '"event": "started"' not in hands.log(worker)


async def claimed_and_interrupted(hands: HandsHarness, job: ToolJob, interruptions: int) -> None:
    """The job's call as an earlier holder left it: claimed (fence 1), ``interruptions``
    times cut short by its workers' deaths, never recorded."""
    intent = ToolCallIntent.of_job(job).operation_columns()
    await hands.ledger.claim(job.operation_id, 1, intent=intent)
    async with hands.store.backend.engine.begin() as conn:
        await conn.execute(
            update(schema.operation)
            .where(schema.operation.c.operation_id == job.operation_id)
            .values(interruptions=interruptions)
        )


async def add_tool_task(hands: HandsHarness, job: ToolJob) -> None:
    """The tool task the job is for, as a Brain would have committed it."""
    await hands.store.create_session(job.session_id, compat="v1")
    task = TaskRecord.new(
        id=job.task_id,
        session_id=job.session_id,
        kind="tool",
        kind_version=1,
        input={},
        status="waiting",
    )
    async with hands.store.backend.engine.begin() as conn:
        await conn.execute(insert(schema.task).values(**dataclasses.asdict(task)))


async def commit_cancel(hands: HandsHarness, job: ToolJob) -> None:
    """The Brain's cancel of the job's task, committed (no notice sent)."""
    async with hands.store.backend.engine.begin() as conn:
        await conn.execute(
            update(schema.task).where(schema.task.c.id == job.task_id).values(cancel_requested=True)
        )
