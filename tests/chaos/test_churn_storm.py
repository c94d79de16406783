"""Churn alone fails no call (issue 49): a storm of worker kills and Redis restarts, judged
at the email service's own ledger (on PostgreSQL: what the storm strikes is the processes and
Redis; the kill points of every commit run on both backends in test_notify_chaos.py).

2 Brains, 3 Hands and a sweeper; one random worker SIGKILLed every 0.3-1 s and started again
0.5-2 s later, the deployment's Redis state dropped twice; 40 sessions, half sending through
the notify example's ``send_email`` (``query``, fast), half through the same send after 4.5 s
of work (three lease TTLs: a call the storm cuts short again and again). Only a holder that
reached the tool spends an interruption, and the backoff between reruns grows: every email
is sent exactly once and none fails. A poison call that kills its worker every time still
ends ``failed`` after its budget, in the same storm.

The long storm (three minutes) is ``bench/faults.py --faults churn-storm``.
"""

from __future__ import annotations

import random

import pytest

from brainhands.shared.store import schema
from tests.helpers.cluster import Cluster
from tests.helpers.storm import kill_storm, supervised_until_done

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

STORM = 25.0
"""Seconds of kills in the suite (the bench's storm lasts three minutes)."""
WORKERS = ["brain-0", "brain-1", "hands-0", "hands-1", "hands-2", "sweeper-0"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_a_storm_of_kills_and_redis_restarts_fails_no_call(cluster: Cluster) -> None:
    for name in WORKERS:
        cluster.start(name)
    for n in range(20):
        await cluster.submit_batches(1, tool="send_email_after_work", recipients=[f"slow{n}-"])
        await cluster.submit_batches(1, tool="send_email", recipients=[f"fast{n}-"])
    await cluster.submit_batches(1, tool="crash_worker", recipients=["poison"])

    await kill_storm(
        cluster, WORKERS, seconds=STORM, rng=random.Random(49), redis_wipes_at=(8.0, 16.0)
    )
    await supervised_until_done(cluster, WORKERS, within=150)

    checked = await cluster.check_invariants(
        "churn storm: kills + 2 redis restarts", expect_failed=1
    )
    assert checked["emails"] == 41
    o = schema.operation
    async with cluster.store.backend.engine.connect() as conn:
        rows = (await conn.execute(o.select())).all()
    failed = [(r.tool, r.error["message"]) for r in rows if r.status != "succeeded"]
    # The poison calls alone (each of its email's sends), every one after its budget of two
    # interruptions: each a real start.
    assert failed and all(
        tool == "crash_worker" and "interrupted 3 times" in message for tool, message in failed
    ), failed
    slow = [r for r in rows if r.tool == "send_email_after_work"]
    assert len(slow) == 20 and all(r.interruptions < 20 for r in slow)
    assert sum(r.interruptions for r in slow) > 0, "the storm cut no slow call short"
