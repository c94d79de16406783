from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.helpers.cluster import CHAOS_REPORT, Cluster, deployment
from tests.helpers.stores import StoreTarget


@pytest.fixture
async def cluster(
    request: pytest.FixtureRequest,
    store_target: StoreTarget,
    rabbitmq_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
) -> AsyncIterator[Cluster]:
    """A whole deployment on each backend: the chaos suite runs on SQLite and PostgreSQL.
    Parametrized indirectly, the fixture's parameter is the queue type (quorum by default)."""
    queue_type = getattr(request, "param", "quorum")
    async with deployment(
        store_target, rabbitmq_url, redis_url, namespace, tmp_path, queue_type
    ) as made:
        yield made


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
