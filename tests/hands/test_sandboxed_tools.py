"""Sandboxed tools served by a real ``brainhands hands`` process: a call's commands run in
its sandbox, and a command the sandbox stops ends the call with the reason."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.helpers.harness import HandsHarness, pool_on_postgres
from tests.helpers.processes import WORKDIR

TOOLS = ("--tools", "tests.helpers.sandboxed_tools")

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="needs bubblewrap: apt install bubblewrap"
    ),
]


@pytest.fixture
async def hands(
    postgres_url: str, rabbitmq_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[HandsHarness]:
    async with pool_on_postgres(
        postgres_url, rabbitmq_url, redis_url, namespace, tmp_path, pool="sandboxed", tools=TOOLS[1]
    ) as harness:
        yield harness


@pytest.mark.integration
async def test_a_sandboxed_tool_runs_its_command_and_a_stopped_one_fails_with_the_reason(
    hands: HandsHarness,
) -> None:
    hands.start_worker()
    works = hands.job("shell", {"script": "echo made > f; cat f; ls -A /tmp | wc -l"})
    floods = hands.job("shell", {"script": "yes"})
    escapes = hands.job("shell", {"script": "echo x > /etc/escaped && echo wrote"})
    refused = hands.job("undeclared", {"script": "true"})
    for job in (works, floods, escapes, refused):
        await hands.publish(job)

    done = await hands.outcome(works.operation_id)
    assert (done.status, done.result) == ("succeeded", {"status": 0, "stdout": "made\n1\n"})
    flooded = await hands.outcome(floods.operation_id)
    assert flooded.status == "failed" and flooded.attempts == 1  # not retried: same limit
    assert flooded.error["type"] == "SandboxStopped"
    assert flooded.error["message"] == "sh -c yes: output over 64 KiB"
    escaped = await hands.outcome(escapes.operation_id)
    assert escaped.result == {"status": 2, "stdout": ""}
    assert not await asyncio.to_thread(Path("/etc/escaped").exists)
    undeclared = await hands.outcome(refused.operation_id)
    assert undeclared.status == "failed"
    assert "declares no sandbox" in undeclared.error["message"]


def test_a_hands_that_cannot_make_a_sandbox_refuses_to_start(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BRAINHANDS_")}
    missing = str(tmp_path / "no-bwrap-here")
    done = subprocess.run(
        [sys.executable, "-m", "brainhands", "hands", "--pool", "sandboxed", *TOOLS],
        cwd=WORKDIR,
        env={**clean, "BRAINHANDS_SANDBOX_BWRAP": missing},
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert done.returncode == 2
    assert "shell run commands in a sandbox, and none can be made here" in done.stderr
    assert f"{missing} cannot be run" in done.stderr
    assert "BRAINHANDS_SANDBOX_BWRAP" in done.stderr
