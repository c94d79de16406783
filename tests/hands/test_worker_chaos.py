"""Hands workers killed and frozen mid-call; the email service's ledger is the judge."""

from __future__ import annotations

import asyncio
import json
import random
import signal

import pytest

from tests.hands.test_worker import claimed_and_interrupted
from tests.helpers.harness import HandsHarness
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(180)]


@pytest.mark.parametrize("hands", ["quorum", "classic"], indirect=True)
@pytest.mark.parametrize("tool", ["send_safe", "send_query", "send_unsafe"])
async def test_worker_killed_after_the_effect_before_the_outcome(
    hands: HandsHarness, tool: str
) -> None:
    first = hands.start_worker()
    job = hands.job(tool, {"to": "ann@example.com", "pause_after": 30})
    await hands.publish(job)
    await eventually(lambda: hands.service_has(job.operation_id), what="the email to be sent")
    first.send_signal(signal.SIGKILL)  # the email went out; the receipt was never recorded
    first.wait()
    hands.start_worker()  # RabbitMQ redelivers the unacked job to this one

    op = await hands.outcome(job.operation_id)
    ledger = await hands.email.ledger()

    if tool == "send_safe":
        # Run again with the same key: the service deduped, one email.
        [sent] = ledger["sends"]
        assert (op.status, op.attempts, sent["attempts"]) == ("succeeded", 2, 2)
        assert op.result["receipt"] == sent["receipt"]
    elif tool == "send_query":
        # Asked the service instead of sending again: one call in all.
        [sent] = ledger["sends"]
        assert (op.status, op.attempts, sent["attempts"]) == ("succeeded", 1, 1)
        assert op.result["receipt"] == sent["receipt"]
    else:
        # Cannot be asked and must not be repeated: uncertain, and one call at the service.
        assert op.status == "uncertain"
        assert op.error["type"] == "Interrupted"
        assert len(ledger["unsafe_sends"]) == 1
    assert [r.status for r in hands.results] == [op.status]


@pytest.mark.parametrize("hands", ["quorum", "classic"], indirect=True)
async def test_query_tool_killed_before_the_effect_is_sent_once(hands: HandsHarness) -> None:
    await hands.email.set_faults(delay=30)  # the call hangs before the service accepts it
    first = hands.start_worker()
    job = hands.job("send_query", {"to": "ben@example.com"})
    await hands.publish(job)

    # A query call commits no started mark: the worker's log says when it goes out.
    await eventually(lambda: '"event": "started"' in hands.log(first), what="the call to go out")
    first.send_signal(signal.SIGKILL)
    first.wait()
    await hands.email.set_faults(delay=0)
    hands.start_worker()

    op = await hands.outcome(job.operation_id)

    # The query said "not sent", so the tool ran again: one email, sent by attempt 2.
    # (The killed request may still land at the service later; it carries the same key.)
    assert (op.status, op.attempts) == ("succeeded", 2)
    [sent] = (await hands.email.ledger())["sends"]
    assert op.result["receipt"] == sent["receipt"]


async def test_frozen_worker_is_superseded_and_cannot_record(hands: HandsHarness) -> None:
    frozen = hands.start_worker(concurrency=1)  # holds no other delivery while frozen
    job = hands.job("send_safe", {"to": "cat@example.com", "pause_after": 1.0})
    await hands.publish(job)
    await eventually(lambda: hands.service_has(job.operation_id), what="the call to go out")
    frozen.send_signal(signal.SIGSTOP)
    await asyncio.sleep(hands.lease_ttl_ms / 1000 + 0.5)  # its lease expires
    successor = hands.start_worker()
    await hands.publish(job)  # the sweeper's re-dispatch, as a duplicate job

    op = await hands.outcome(job.operation_id)
    assert op.status == "succeeded"

    frozen.send_signal(signal.SIGCONT)
    await eventually(
        lambda: (
            '"event": "lease_lost"' in hands.log(frozen) or '"event": "stale"' in hands.log(frozen)
        ),
        within=20,
        what="the frozen worker to notice it was superseded",
    )
    await asyncio.sleep(1.0)
    after = await hands.ledger.get(job.operation_id)
    # The outcome is the successor's, untouched (a handed-back job only republishes it).
    assert (after.status, after.result, after.finished_at) == (
        "succeeded",
        op.result,
        op.finished_at,
    )
    outcomes = [json.loads(line) for line in hands.log(frozen).splitlines()]
    assert not [o for o in outcomes if o.get("event") == "outcome"]  # it recorded nothing
    [sent] = (await hands.email.ledger())["sends"]
    assert sent["attempts"] == 2  # both calls carried the same key: one email
    assert successor.poll() is None


async def test_a_worker_frozen_in_its_backoff_wakes_superseded_and_does_not_call(
    hands: HandsHarness,
) -> None:
    # An earlier holder claimed the call and died three times: the next holder counts that,
    # then waits 2 s before it runs it again, its start to be marked after the wait.
    job = hands.job("send_safe", {"to": "hal@example.com"})
    await claimed_and_interrupted(hands, job, 3)
    frozen = hands.start_worker(concurrency=1)
    await hands.publish(job)
    await eventually(lambda: '"event": "rerun"' in hands.log(frozen), what="its backoff")
    frozen.send_signal(signal.SIGSTOP)
    await asyncio.sleep(hands.lease_ttl_ms / 1000 + 0.5)  # its lease and its backoff run out
    successor = hands.start_worker()
    await hands.publish(job)  # the sweeper's re-dispatch, as a duplicate job
    await eventually(lambda: '"event": "started"' in hands.log(successor), what="the takeover")

    frozen.send_signal(signal.SIGCONT)  # wakes with its backoff over, its lease another's
    await eventually(
        lambda: any(f'"event": "{e}"' in hands.log(frozen) for e in ("lease_lost", "stale")),
        within=20,
        what="the frozen worker to find its lease gone or its mark refused",
    )
    op = await hands.outcome(job.operation_id)

    assert '"event": "started"' not in hands.log(frozen)  # it never made the call
    # The frozen holder settled the row before its backoff and never reached the tool: its
    # successor found nothing interrupted, only the three earlier holders and the first.
    assert (op.status, op.interruptions) == ("succeeded", 4)
    [sent] = (await hands.email.ledger())["sends"]
    assert sent["attempts"] == 1  # one call at the service, the successor's


async def test_a_burst_of_500_jobs_across_3_workers_sends_each_email_once(
    hands: HandsHarness,
) -> None:
    # 48 calls at once overload this 2-core machine: renewals of the harness's 1.5 s leases
    # then come back late, and a lost lease makes an unsafe call 'uncertain' by design. This
    # test is about dedupe under a burst, so its leases get a TTL more like production's.
    hands.lease_ttl_ms = 5000
    for _ in range(3):
        hands.start_worker(concurrency=16)
    jobs = [hands.job("send_unsafe", {"to": f"user{n}@example.com"}) for n in range(500)]
    await asyncio.gather(*(hands.publish(job) for job in jobs))

    # Result events may come twice (a redelivery): count the calls they are for.
    await eventually(
        lambda: len({r.operation_id for r in hands.results}) >= 500,
        within=150,
        what="results for 500 calls",
    )
    assert {r.status for r in hands.results} == {"succeeded"}
    ledger = await hands.email.ledger()
    keys = [s["key"] for s in ledger["unsafe_sends"]]
    assert sorted(keys) == sorted(job.operation_id for job in jobs)  # each exactly once
    worked = [hands.log(w).count('"event": "outcome"') for w in hands.workers]
    assert sum(worked) == 500 and min(worked) > 0, worked


async def test_a_tool_that_kills_its_worker_ends_failed_not_in_a_crash_loop(
    hands: HandsHarness,
) -> None:
    hands.start_worker()
    poison = hands.job("crash_worker", {})
    fine = hands.job("send_safe", {"to": "dan@example.com"})
    await hands.publish(poison)
    await hands.publish(fine)

    async def keep_two_workers() -> bool:
        # A supervisor's job, done by the test: replace each dead worker.
        for proc in list(hands.workers):
            if proc.poll() is not None:
                hands.workers.remove(proc)
                hands.start_worker()
        try:
            op = await hands.ledger.get(poison.operation_id)
        except Exception:
            return False
        return op.status == "failed"

    await eventually(keep_two_workers, within=90, what="the poison job to be given up")
    op = await hands.outcome(poison.operation_id)
    assert op.error["type"] == "Interrupted"
    # Its first attempt and two reruns, each cut short: the interruption budget, then no more.
    assert (op.attempts, op.interruptions) == (3, 3)
    assert "interrupted 3 times" in op.error["message"]
    assert (await hands.outcome(fine.operation_id)).status == "succeeded"


@pytest.mark.delivery_limit(100)
async def test_a_long_call_outlives_a_churning_fleet_and_takes_effect_once(
    hands: HandsHarness,
) -> None:
    # Three workers; every 2-3 s one is SIGKILLed and replaced: the first four times the one
    # running the call (more than the tool's 3 attempts), then a random one. The 6 s call is
    # cut short again and again: its workers' deaths spend the interruption budget, not the
    # tool's own attempts, so it finishes.
    for _ in range(3):
        hands.start_worker()
    job = hands.job("send_after_work", {"to": "eve@example.com", "pause_after": 6})
    await hands.publish(job)
    chaos = random.Random(7)
    kills = targeted = 0

    async def done() -> bool:
        op = await hands.ledger.get(job.operation_id) if kills else None
        return op is not None and op.status in ("succeeded", "failed", "uncertain")

    deadline = asyncio.get_running_loop().time() + 150
    while not await done():
        assert asyncio.get_running_loop().time() < deadline, "the call never finished"
        await asyncio.sleep(chaos.uniform(2, 3))
        alive = [w for w in hands.workers if w.poll() is None]
        running = [w for w in alive if '"event": "started"' in hands.log(w)]
        if targeted < 4 and not running:
            continue  # between attempts: the next kill goes to the next one to start it
        victim = running[0] if targeted < 4 else chaos.choice(alive)
        targeted += victim in running
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        kills += 1
        hands.start_worker()

    op = await hands.outcome(job.operation_id)
    [sent] = (await hands.email.ledger())["sends"]
    assert op.status == "succeeded", op.error
    assert op.result["receipt"] == sent["receipt"]
    assert sent["key"] == job.operation_id  # one email, under the call's one key
    assert op.interruptions >= 4
    assert op.attempts - op.interruptions <= 1  # no attempt failed on the tool's account
