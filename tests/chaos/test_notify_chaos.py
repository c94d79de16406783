"""The chaos suite: the notify example under every fault the design claims to survive.

Each case breaks something real -- kills or freezes worker processes, restarts RabbitMQ or
Redis, loses or duplicates messages, drops the email service's answers -- and then checks
the run against the email service's own ledger and the store (``Cluster.check_invariants``).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time

import pytest

from brainhands.shared.messages import SessionWake, ToolResult
from tests.helpers.cluster import Cluster
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module
from tests.helpers.rabbit import broker_stopped
from tests.helpers.relay_victim import __name__ as relay_victim

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(240)]


def start_pool(cluster: Cluster, brains: int = 2, hands: int = 2) -> None:
    for n in range(brains):
        cluster.start(f"brain-{n}")
    for n in range(hands):
        cluster.start(f"hands-{n}")


@pytest.mark.parametrize(
    "rule",
    [
        "before:3",
        "after:3",
        "before:6",
        "after:6",
        "before:10",
        "after:10",
        "before:16",
    ],
)
async def test_1_brain_killed_just_before_and_after_its_commits(
    cluster: Cluster, rule: str
) -> None:
    victim = cluster.start("brain-victim", victim=rule)
    cluster.start("hands-0")
    await cluster.submit_batches(1)
    await eventually(lambda: victim.poll() is not None, within=60, what=f"death at {rule}")
    cluster.kills[f"SIGKILL brain ({rule})"] += 1
    cluster.start("brain-0")
    await cluster.wait_done()
    await cluster.check_invariants(f"1 brain killed {rule}")


async def test_1b_brain_killed_after_a_batch_commit_before_any_publish(
    cluster: Cluster,
) -> None:
    # Three sessions at once: their passes commit together (group commit). The victim dies
    # right after its first such transaction, before the relay saw a row of it or a pass
    # learned that its draft is durable.
    victim = cluster.start("brain-victim", victim="after-batch:1")
    cluster.start("hands-0")
    await cluster.submit_batches(3)
    await eventually(lambda: victim.poll() is not None, within=60, what="death after a batch")
    assert victim.returncode == 9  # its own exit, at the kill point
    cluster.kills["SIGKILL brain (after a batch)"] += 1
    cluster.start("brain-0")
    await cluster.wait_done()
    await cluster.check_invariants("1b brain killed after a batch commit")


async def test_1c_brain_killed_after_a_batch_of_session_claims(cluster: Cluster) -> None:
    # Three sessions woken at once: their leases and fence claims go together. The victim
    # dies right after the claims' round trip: every fence is raised, no pass has run.
    victim = cluster.start("brain-victim", victim="after-claims:1")
    cluster.start("hands-0")
    await cluster.submit_batches(3)
    await eventually(lambda: victim.poll() is not None, within=60, what="death after claims")
    assert victim.returncode == 9  # its own exit, at the kill point
    cluster.kills["SIGKILL brain (after a batch of claims)"] += 1
    cluster.start("brain-0")  # its tokens outrank the dead claims' once their leases lapse
    await cluster.wait_done()
    await cluster.check_invariants("1c brain killed after a batch of session claims")


async def test_2_relay_killed_between_confirm_and_mark(cluster: Cluster) -> None:
    await cluster.submit_batches(2)  # their wake-ups wait in the outbox
    marker = cluster.tmp_path / "confirmed"
    victim = spawn_module(
        relay_victim, str(marker), env=cluster.settings(), log=cluster.tmp_path / "relay-victim.log"
    )
    await eventually(marker.exists, within=30, what="the relay to publish and freeze")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    cluster.kills["SIGKILL relay"] += 1
    start_pool(cluster)  # their relays publish the same rows again: duplicates, harmless
    await cluster.wait_done()
    await cluster.check_invariants("2 relay killed between confirm and mark")


async def test_2b_relay_killed_in_the_middle_of_a_publish_wave(cluster: Cluster) -> None:
    await cluster.env.brain_queue("v1")  # where the wave goes, as a running pool declares it
    await cluster.submit_batches(3)  # their three wake-ups wait in the outbox: one wave
    marker = cluster.tmp_path / "mid-wave"
    victim = spawn_module(
        relay_victim,
        str(marker),
        "--mid-wave",
        env=cluster.settings(),
        log=cluster.tmp_path / "relay-victim.log",
    )
    await eventually(marker.exists, within=30, what="the relay to freeze mid-wave")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    cluster.kills["SIGKILL relay (mid-wave)"] += 1
    # The wave's first wake-up reached the broker, the other two never left the victim.
    assert await cluster.env.message_count(cluster.env.topology.brain_queue("v1")) == 1
    start_pool(cluster)  # and none is marked sent: all three are published again
    await cluster.wait_done()
    await cluster.check_invariants("2b relay killed in the middle of a publish wave")


async def test_3_rabbitmq_restarted_mid_run(cluster: Cluster) -> None:
    await cluster.email.set_faults(delay=0.3)
    start_pool(cluster)
    await cluster.submit_batches(3)
    await eventually(lambda: cluster.operations_started(2), within=60, what="calls in flight")
    async with broker_stopped():
        await asyncio.sleep(2)
    cluster.kills["restart rabbitmq"] += 1
    await cluster.email.set_faults(delay=0)
    await cluster.wait_done(within=150)
    await cluster.check_invariants("3 rabbitmq restarted mid-run")


@pytest.mark.parametrize("tool", ["send_email", "send_email_unsafe"])
async def test_4_hands_killed_mid_tool(cluster: Cluster, tool: str) -> None:
    await cluster.email.set_faults(delay=1.5)
    cluster.start("brain-0")
    cluster.start("hands-0")
    await cluster.submit_batches(1, tool=tool)
    await eventually(lambda: cluster.operations_started(3), within=60, what="calls in flight")
    cluster.kill("hands-0")
    await cluster.email.set_faults(delay=0)
    cluster.start("hands-1")
    await cluster.wait_done()
    unsafe = tool == "send_email_unsafe"
    failed = await count_failed(cluster) if unsafe else 0
    await cluster.check_invariants(
        f"4 hands killed mid-tool ({tool})", unsafe=unsafe, expect_failed=failed
    )


async def count_failed(cluster: Cluster) -> int:

    tasks, _ = await cluster.store.queries.history(cluster.sessions[0])
    return sum(t.kind == "send-notice" and t.outcome != "succeeded" for t in tasks)


async def test_5_hands_killed_after_the_outcome_before_the_ack(cluster: Cluster) -> None:
    cluster.start("brain-0")
    victim = cluster.start("hands-victim", victim="after-outcome")
    await cluster.submit_batches(1)
    await eventually(lambda: victim.poll() is not None, within=60, what="the victim's death")
    cluster.kills["SIGKILL hands after outcome"] += 1
    cluster.start("hands-0")  # gets the unacked job again: republishes, sends nothing
    await cluster.wait_done()
    await cluster.check_invariants("5 hands killed after outcome, before ack")


@pytest.mark.parametrize("cluster", ["classic"], indirect=True)
async def test_5d_on_classic_queues_a_brain_and_a_hands_killed_with_deliveries_unacked(
    cluster: Cluster,
) -> None:
    # Classic queues count no deliveries: the workers do (a redelivered message is published
    # again with its count). Both workers die holding a delivery; the copies finish the run.
    # Whichever dies first is replaced at once (the other may need it to reach its point).
    victims = {
        "brain-0": (cluster.start("brain-victim", victim="after:6"), "SIGKILL brain (after:6)"),
        "hands-0": (
            cluster.start("hands-victim", victim="after-outcome"),
            "SIGKILL hands after outcome",
        ),
    }
    await cluster.submit_batches(1)
    while victims:
        await eventually(
            lambda: any(proc.poll() is not None for proc, _ in victims.values()),
            within=60,
            what=f"the death of the victim replaced by {' or '.join(victims)}",
        )
        for successor, (proc, kill) in list(victims.items()):
            if proc.poll() is not None:
                cluster.kills[kill] += 1
                cluster.start(successor)
                del victims[successor]
    await cluster.wait_done()
    await cluster.check_invariants("5d classic queues: brain and hands killed")


async def test_5b_hands_killed_after_a_batch_of_outcomes_before_any_publish_or_ack(
    cluster: Cluster,
) -> None:
    # Fifteen emails at once: their outcomes commit together (group commit). The victim
    # dies right after its first such transaction: every outcome in it is durable, none of
    # its result events published, none of its jobs acked.
    cluster.start("brain-0")
    victim = cluster.start("hands-victim", victim="after-batch:1")
    await cluster.submit_batches(3)
    await eventually(lambda: victim.poll() is not None, within=60, what="death after a batch")
    assert victim.returncode == 9  # its own exit, at the kill point
    cluster.kills["SIGKILL hands (after a batch of outcomes)"] += 1
    cluster.start("hands-0")  # gets the unacked jobs again: republishes, sends nothing
    await cluster.wait_done()
    await cluster.check_invariants("5b hands killed after a batch of outcomes")


async def test_5c_hands_killed_after_a_batch_of_claims_before_any_start(
    cluster: Cluster,
) -> None:
    # Fifteen emails at once: their operations are claimed together. The victim dies right
    # after the claims' round trip: rows exist, fences are raised, no call went out.
    cluster.start("brain-0")
    victim = cluster.start("hands-victim", victim="after-claims:1")
    await cluster.submit_batches(3)
    await eventually(lambda: victim.poll() is not None, within=60, what="death after claims")
    assert victim.returncode == 9  # its own exit, at the kill point
    cluster.kills["SIGKILL hands (after a batch of claims)"] += 1
    cluster.start("hands-0")  # gets the unacked jobs again: claims above, sends each once
    await cluster.wait_done()
    await cluster.check_invariants("5c hands killed after a batch of claims")


async def test_6_hands_frozen_past_its_lease_then_resumed(cluster: Cluster) -> None:
    await cluster.email.set_faults(delay=1.0)
    cluster.start("brain-0")
    frozen = cluster.start("hands-frozen", BRAINHANDS_CONCURRENCY="2")
    await cluster.submit_batches(1)
    await eventually(lambda: cluster.operations_started(2), within=60, what="calls in flight")
    cluster.kill("hands-frozen", signal.SIGSTOP)
    await asyncio.sleep(2.0)  # past the 1.5 s lease: the sweeper re-sends the jobs
    cluster.start("hands-0")
    await cluster.email.set_faults(delay=0)
    await asyncio.sleep(5)
    frozen.send_signal(signal.SIGCONT)
    await cluster.wait_done()
    await eventually(  # it noticed on waking, and recorded nothing late
        lambda: (
            '"lease_lost"' in cluster.log("hands-frozen")
            or '"stale"' in cluster.log("hands-frozen")
        ),
        within=20,
        what="the frozen worker to notice it was superseded",
    )
    assert '"event": "outcome"' not in cluster.log("hands-frozen")
    await cluster.check_invariants("6 hands SIGSTOPped past its lease")


@pytest.mark.parametrize("how", ["flushall", "restart", "pause"])
async def test_7_redis_flushed_restarted_or_unresponsive_mid_run(
    cluster: Cluster, how: str
) -> None:
    from redis.asyncio import Redis

    from tests.shared.test_fencing_chaos import restart_redis

    # Unresponsive: calls are slow enough to hold their leases through the whole pause.
    await cluster.email.set_faults(delay=2.0 if how == "pause" else 0.5)
    start_pool(cluster)
    await cluster.submit_batches(2)
    await eventually(lambda: cluster.operations_started(2), within=60, what="calls in flight")
    if how == "restart":
        await restart_redis(cluster.redis_url)
    else:
        redis = Redis.from_url(cluster.redis_url)
        if how == "flushall":
            await redis.flushall()
        else:
            # Every client's commands wait 4 s, well past the 1.5 s lease TTL; this one's too.
            await redis.execute_command("CLIENT", "PAUSE", 4000, "ALL")
        await redis.aclose()
    cluster.kills[f"redis {how}"] += 1
    if how == "pause":
        hands = [name for name in cluster.procs if name.startswith("hands")]
        await eventually(
            lambda: any('"event": "lease_lost"' in cluster.log(name) for name in hands),
            within=20,
            what="a Hands worker to stop work when its renewal went unanswered (fail closed)",
        )
    await cluster.email.set_faults(delay=0)
    await cluster.wait_done(within=120)
    await cluster.check_invariants(f"7 redis {how} mid-run")


async def test_8_a_poison_job_fails_its_task_and_the_session_goes_on(cluster: Cluster) -> None:
    cluster.start("brain-0")
    for n in range(3):
        cluster.start(f"hands-{n}")
    await cluster.submit_batches(1, tool="crash_worker", recipients=["poison"])
    await cluster.submit_batches(1)

    async def replace_dead_hands() -> bool:
        for name, proc in list(cluster.procs.items()):
            if name.startswith("hands") and proc.poll() is not None:
                cluster.kills["poison crash hands"] += 1
                cluster.start(name)
        return await cluster.all_done()

    await eventually(replace_dead_hands, within=150, what="both sessions to finish")
    await cluster.check_invariants("8 poison job", expect_failed=1)


async def test_9_wakeups_duplicated_dropped_and_reordered(cluster: Cluster) -> None:
    start_pool(cluster)
    queue = cluster.env.topology.brain_queue("v1")
    results = await cluster.env.results_queue("v1")  # purged before a Brain may declare it
    await cluster.submit_batches(3)
    rng = random.Random(9)
    stale: list[ToolResult] = []
    deadline = time.monotonic() + 60
    while not await cluster.all_done() and time.monotonic() < deadline:
        session = rng.choice(cluster.sessions)
        wake = SessionWake(session_id=session, compat="v1", reason="duplicate")
        for _ in range(3):
            await cluster.env.broker.publish(wake, queue)  # duplicated
        if rng.random() < 0.3:
            await cluster.env.purge(queue)  # dropped: wake-ups
            await cluster.env.purge(results)  # and results
            cluster.kills["purge brain queues"] += 1
        if stale and rng.random() < 0.5:
            await cluster.env.broker.publish(rng.choice(stale), results)  # reordered: old news
        stale.append(
            ToolResult(
                operation_id="op-old",
                session_id=session,
                task_id="t",
                compat="v1",
                status="succeeded",
            )
        )
        await asyncio.sleep(0.2)
    await cluster.wait_done()
    await cluster.check_invariants("9 wake-ups duplicated, dropped, reordered")


async def test_10_the_service_accepts_a_send_and_drops_the_receipt(cluster: Cluster) -> None:
    await cluster.email.set_faults(drop_next=3)
    start_pool(cluster, brains=1, hands=1)
    await cluster.submit_batches(1)
    await cluster.wait_done()

    tasks, _ = await cluster.store.queries.history(cluster.sessions[0])
    hows = sorted(t.result["how"] for t in tasks if t.kind == "send-notice")
    assert hows.count("confirmed by query") == 3  # asked, not sent again
    await cluster.check_invariants("10 receipt dropped in flight")


SOAK = 45.0
"""Seconds of random kills in the suite's soak; the long soak, through every infrastructure
fault too, is ``bench/faults.py``."""


# Kills for SOAK seconds, then up to three minutes for the sessions to finish
# (``wait_done``): the file's 240 s would cut that wait short, which a loaded machine can
# need more than. On PostgreSQL alone: every kill point above runs on both backends, and
# the soak's random kills test the processes, not the store's dialect.
@pytest.mark.timeout(360)
@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_11_soak_random_kills_of_every_process(cluster: Cluster) -> None:
    names = ["brain-0", "brain-1", "hands-0", "hands-1", "hands-2", "sweeper-0"]
    for name in names:
        cluster.start(name)
    await cluster.email.set_faults(delay=0.05)
    rng = random.Random(11)
    started = time.monotonic()
    restart_at: dict[str, float] = {}
    while time.monotonic() - started < SOAK:
        now = time.monotonic()
        # 20 sessions spread over the soak, so work is always in flight.
        while len(cluster.sessions) < min(20, 1 + (now - started) * 20 / SOAK):
            await cluster.submit_batches(1)
        for name, when in list(restart_at.items()):
            if now >= when:
                cluster.start(name)
                del restart_at[name]
        alive = [n for n in names if n not in restart_at]
        by_role = {r: [n for n in alive if n.startswith(r)] for r in ("brain", "hands")}
        victims = [n for n in alive if n.startswith("sweeper") or len(by_role[n.split("-")[0]]) > 1]
        if victims:
            victim = rng.choice(victims)
            cluster.kill(victim)
            restart_at[victim] = now + rng.uniform(0.5, 2.0)
        await asyncio.sleep(rng.uniform(1.0, 3.0))
    for name in restart_at:
        cluster.start(name)
    await cluster.wait_done(within=180)
    await cluster.check_invariants("11 soak: 20 sessions x 5 emails under kills")
