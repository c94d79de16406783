"""Scaling a Hands pool out on one machine: workers join while a backlog drains, throughput
rises with each, and nothing is lost or done twice (the email service's ledger says so)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from brainhands.shared.messages import ToolJob
from tests.helpers.cluster import Cluster
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(300)]

JOBS = 600
STEP = 8.0  # seconds between added workers


# A claim about throughput, not durability: a single SQLite file serializes every writer,
# so the curve is measured where a scaled-out deployment keeps its store.
@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_adding_hands_workers_drains_a_backlog_faster(cluster: Cluster) -> None:
    # Tools wait on I/O (the service answers after 0.4 s), as real tools do; each worker
    # runs two calls at once, so a worker drains 5 jobs/s and the pool's capacity is its
    # number of workers, far below what the two cores and the service's one SQLite file
    # can take (a faster tool measures the machine's load, not the pool).
    await cluster.email.set_faults(delay=0.4)
    queue = cluster.env.topology.hands_queue("email")
    jobs = [
        ToolJob(
            operation_id=f"scale-{n}",
            tool="send_unsafe",
            arguments={"to": f"u{n}@example.com"},
            session_id="scale",
            task_id=f"t{n}",
            compat="v1",
            pool="email",
        )
        for n in range(JOBS)
    ]
    for start in range(0, JOBS, 200):
        await asyncio.gather(
            *(cluster.env.broker.publish(j, queue) for j in jobs[start : start + 200])
        )

    began = time.time()
    for n in range(4):
        cluster.start(f"hands-{n}", BRAINHANDS_CONCURRENCY="2")
        await asyncio.sleep(STEP)
    await eventually(lambda: done_count(cluster) >= JOBS, within=180, what="the backlog drained")

    finished = sorted(outcome_times(cluster))
    # Jobs per second in each window, from the second after a worker joined to the next one.
    rates = []
    for n in range(4):
        lo, hi = began + n * STEP + 2, began + (n + 1) * STEP
        rates.append(sum(lo <= t < hi for t in finished) / (hi - lo))
    print(
        "\nscale-out curve (jobs/s):", " -> ".join(f"{n + 1}w {r:.0f}" for n, r in enumerate(rates))
    )
    # Added workers add throughput: the second doubles it, and every later window keeps
    # well above one worker's rate.
    assert rates[1] > 1.5 * rates[0], rates
    assert all(later > 1.5 * rates[0] for later in rates[2:]), rates

    ledger = await cluster.email.ledger()
    keys = [s["key"] for s in ledger["unsafe_sends"]]
    assert sorted(keys) == sorted(j.operation_id for j in jobs)  # nothing lost or doubled


def outcome_times(cluster: Cluster) -> list[float]:
    times = []
    for name in (f"hands-{n}" for n in range(4)):
        if name not in cluster.procs:
            continue
        for line in cluster.log(name).splitlines():
            if '"event": "outcome"' in line:
                times.append(json.loads(line)["ts"])
    return times


def done_count(cluster: Cluster) -> int:
    return len(outcome_times(cluster))
