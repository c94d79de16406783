"""The main job, run as the README says: agents keep their promises under worker kills."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(200)]


@pytest.mark.parametrize("approve", [False, True], ids=["plain", "with-approval"])
async def test_demo_passes_its_verdict_while_killing_workers(
    rabbitmq_url: str, redis_url: str, tmp_path: Path, approve: bool
) -> None:
    """With ``--approve`` the batch waits for a decision the demo gives through the
    client while workers are being killed."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BRAINHANDS_")},
        "BRAINHANDS_RABBITMQ_URL": rabbitmq_url,
        "BRAINHANDS_REDIS_URL": redis_url,
    }
    done = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "brainhands",
            "demo",
            "--seed",
            "7",
            "--recipients",
            "6",
            "--timeout",
            "150",
            *(["--approve"] if approve else []),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=190,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "VERDICT: PASS" in done.stdout
    assert "chaos: SIGKILL" in done.stdout  # it really killed workers
    assert "console (no login, local only): http://127.0.0.1:" in done.stdout
    table = done.stdout.split("VERDICT")[0]
    assert table.count("@customer-") >= 6
    if approve:
        assert "approval needed: send_notice_batch to 6 recipients" in done.stdout
        assert "1 decision(s) recorded, applied once: True" in done.stdout
