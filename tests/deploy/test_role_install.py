"""A Hands image is the core and the Hands alone: ``brainhands-core`` and ``brainhands-hands``
installed from this checkout into a fresh virtual environment (no Brain, no model adapters,
no API) run a real tool worker, which takes a job from RabbitMQ and records its outcome."""

from __future__ import annotations

import subprocess
import textwrap
import venv
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brainhands.shared.config import normalize_database_url
from brainhands.shared.store import Store
from tests.helpers.distributions import copy_sources
from tests.helpers.harness import HandsHarness
from tests.helpers.rabbit import broker_env
from tests.helpers.stores import StoreTarget, drop_schema

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

TOOLS = '''
from pydantic import BaseModel

from brainhands import ToolContext, tool


class Stamp(BaseModel):
    text: str


@tool(pool="email", policy="safe")
async def stamp(args: Stamp, ctx: ToolContext) -> dict[str, str]:
    """Stamps a text with the operation that ran it."""
    return {"stamped": f"{args.text}@{ctx.operation_id}"}
'''


@pytest.fixture(scope="module")
def hands_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment with brainhands-core and brainhands-hands (and their
    dependencies) installed, not editable, from this checkout: its Python."""
    home = tmp_path_factory.mktemp("hands-only")
    sources = copy_sources(home / "sources")
    venv.create(home / "venv", with_pip=True)
    python = home / "venv" / "bin" / "python"
    done = subprocess.run(
        [python, "-m", "pip", "install", "-q", str(sources / "shared"), str(sources / "hands")],
        capture_output=True,
        text=True,
        timeout=360,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return python


def run_in(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_the_hands_install_has_no_brain_api_or_model_code(hands_only: Path, tmp_path: Path) -> None:
    seen = run_in(
        hands_only,
        """
        import importlib.metadata as md, importlib.util as iu
        names = sorted(d.metadata["Name"].lower() for d in md.distributions())
        print(names)
        for module in ("brainhands.brain", "brainhands.api", "brainhands.client"):
            print(module, iu.find_spec(module) is not None)
        for module in ("fastapi", "httpx"):
            print(module, iu.find_spec(module) is not None)
        try:
            from brainhands import Agent
        except ImportError as missing:
            print(missing)
        """,
        tmp_path,
    )
    assert seen.returncode == 0, seen.stderr
    lines = seen.stdout.splitlines()
    installed = set(eval(lines[0]))  # a list of names, printed by repr
    assert {"brainhands-core", "brainhands-hands"} <= installed
    assert not installed & {"brainhands", "brainhands-brain", "fastapi", "uvicorn", "httpx"}
    assert lines[1:6] == [
        "brainhands.brain False",
        "brainhands.api False",
        "brainhands.client False",
        "fastapi False",
        "httpx False",
    ]
    assert lines[6] == "brainhands.Agent comes with brainhands-brain, which is not installed"


@pytest.fixture
async def harness(
    postgres_url: str, rabbitmq_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[HandsHarness]:
    target = StoreTarget(normalize_database_url(postgres_url), namespace)
    store = await Store.open(target.url, upgrade=True, db_schema=target.schema)
    async with broker_env(rabbitmq_url, namespace) as env:
        harness = HandsHarness(store, target, env, "http://127.0.0.1:9", redis_url, tmp_path)
        await harness.start()
        try:
            yield harness
        finally:
            harness.kill_all()
            await store.close()
            await drop_schema(target.url, namespace)


def start_worker(
    python: Path, env: dict[str, str], cwd: Path, log: Path
) -> subprocess.Popen[bytes]:
    """``python -m brainhands.hands`` of the fresh environment, serving ``stamp_tools``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [python, "-m", "brainhands.hands", "--pool", "email", "--tools", "stamp_tools"],
            cwd=cwd,
            env={**env, "PATH": "/usr/bin:/bin"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def test_the_hands_alone_run_a_tool_worker(
    hands_only: Path, harness: HandsHarness, tmp_path: Path
) -> None:
    (tmp_path / "stamp_tools.py").write_text(TOOLS)
    log = tmp_path / "hands-only.log"
    worker = start_worker(hands_only, harness.worker_env(), tmp_path, log)
    harness.workers.append(worker)
    job = harness.job("stamp", {"text": "hello"})
    await harness.publish(job)
    done = await harness.outcome(job.operation_id, within=60)
    assert done.status == "succeeded", log.read_text()
    assert done.result == {"stamped": f"hello@{job.operation_id}"}
    assert worker.poll() is None, log.read_text()
    assert '"event": "consuming"' in log.read_text()
