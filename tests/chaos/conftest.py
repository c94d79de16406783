from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brainhands.shared.store import Store
from tests.helpers.cluster import CHAOS_REPORT, Cluster
from tests.helpers.harness import start_email_service
from tests.helpers.rabbit import broker_env
from tests.helpers.stores import StoreTarget


@pytest.fixture
async def cluster(
    store_target: StoreTarget, rabbitmq_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    """A whole deployment on each backend: the chaos suite runs on SQLite and PostgreSQL."""
    target = store_target
    store = await Store.open(target.url, upgrade=True, db_schema=target.schema)
    service, email_url = await start_email_service(tmp_path)
    async with broker_env(rabbitmq_url, namespace) as env:
        await env.brain_queue("v1")
        await env.hands_queue("email")
        deployment = Cluster(store, target, env, redis_url, email_url, tmp_path)
        try:
            yield deployment
        finally:
            deployment.stop_all()
            service.kill()
            service.wait()
            await store.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not CHAOS_REPORT:
        return
    terminalreporter.section("chaos suite: kills made and invariants checked")
    for row in CHAOS_REPORT:
        kills = ", ".join(f"{k} x{v}" for k, v in sorted(row["kills"].items())) or "faults only"
        terminalreporter.write_line(
            f"{row['test']:<48} sessions={row['sessions']:<3} emails={row['emails']:<4} "
            f"failed={row['failed']:<2} {kills}"
        )
    terminalreporter.write_line(f"invariants on every run: {CHAOS_REPORT[0]['invariants']}")
