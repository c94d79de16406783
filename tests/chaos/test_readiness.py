"""Every worker's health port, against real services: readiness follows RabbitMQ and Redis,
and the metrics count what a run did."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import urllib.error
import urllib.request

import pytest

from tests.helpers.cluster import Cluster
from tests.helpers.polling import eventually
from tests.helpers.rabbit import broker_stopped
from tests.shared.test_fencing_chaos import restart_redis

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(240)]

ROLES = ("brain-0", "hands-0", "sweeper-0")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def get(port: int, path: str) -> tuple[int, str]:
    def fetch() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return 0, ""

    return await asyncio.to_thread(fetch)


async def readiness(ports: dict[str, int]) -> dict[str, int]:
    return {name: (await get(port, "/readyz"))[0] for name, port in ports.items()}


def start_with_ports(cluster: Cluster) -> dict[str, int]:
    ports = {name: free_port() for name in ROLES}
    for name, port in ports.items():
        cluster.start(name, BRAINHANDS_HTTP_PORT=str(port))
    return ports


async def all_ready(ports: dict[str, int]) -> bool:
    return set((await readiness(ports)).values()) == {200}


async def none_ready(ports: dict[str, int]) -> bool:
    return set((await readiness(ports)).values()) == {503}


async def test_readyz_follows_rabbitmq_and_redis(cluster: Cluster) -> None:
    ports = start_with_ports(cluster)
    await eventually(lambda: all_ready(ports), within=30, what="every worker ready")
    for port in ports.values():
        assert (await get(port, "/healthz"))[0] == 200

    async with broker_stopped():
        await eventually(lambda: none_ready(ports), within=30, what="unready without RabbitMQ")
        _, body = await get(ports["hands-0"], "/readyz")
        assert json.loads(body)["rabbitmq"] is False
        assert (await get(ports["hands-0"], "/healthz"))[0] == 200  # alive all the same
    cluster.kills["restart rabbitmq"] += 1
    await eventually(lambda: all_ready(ports), within=60, what="ready after RabbitMQ")

    await restart_redis(cluster.redis_url)
    cluster.kills["restart redis"] += 1
    await eventually(lambda: all_ready(ports), within=60, what="ready after Redis")
    # Redis came back empty and fast; check once more that a missing Redis shows too.
    import subprocess

    await asyncio.to_thread(subprocess.run, ["redis-cli", "shutdown", "nosave"], check=False)
    try:
        await eventually(lambda: none_ready(ports), within=30, what="unready without Redis")
        _, body = await get(ports["brain-0"], "/readyz")
        assert json.loads(body)["redis"] is False
    finally:
        await restart_redis(cluster.redis_url)
    await eventually(lambda: all_ready(ports), within=60, what="ready after Redis again")

    await cluster.submit_batches(1)
    await cluster.wait_done()
    await cluster.check_invariants("readiness across RabbitMQ and Redis restarts")


async def test_metrics_count_what_the_run_did(cluster: Cluster) -> None:
    ports = start_with_ports(cluster)
    await eventually(lambda: all_ready(ports), within=30, what="every worker ready")
    await cluster.submit_batches(4)  # 20 emails: 20 jobs, 20 acks
    await cluster.wait_done()
    await cluster.check_invariants("metrics match the run")

    _, hands = await get(ports["hands-0"], "/metrics")
    _, brain = await get(ports["brain-0"], "/metrics")

    def value(text: str, metric: str) -> float:
        found = re.findall(rf"^{re.escape(metric)} ([0-9.e+]+)$", text, re.M)
        return float(found[0]) if found else 0.0

    # A job whose call went quiet on a slow run is sent again by the sweeper, and the
    # idempotency key absorbs it: every delivery is one the run made, and each is settled.
    _, sweeper = await get(ports["sweeper-0"], "/metrics")
    resent = value(sweeper, 'brainhands_sweeper_recoveries_total{kind="job_redispatched"}')
    assert value(hands, 'brainhands_jobs_received_total{pool="email"}') == 20 + resent
    assert value(hands, 'brainhands_jobs_acked_total{pool="email"}') == 20 + resent
    assert (
        value(hands, 'brainhands_tool_outcomes_total{status="succeeded",tool="send_email"}') == 20
    )
    assert value(hands, 'brainhands_lease_acquisitions_total{resource="operation"}') >= 20
    assert value(brain, "brainhands_sessions_advanced_total") >= 4
    assert value(brain, 'brainhands_phases_total{kind="send-notice"}') >= 40
