"""Each role started while a service it needs resets every connection (a ``Gate`` in front of
it): one line says what it waits for, ``/readyz`` says it too while ``/healthz`` stays alive,
and the process serves once the service answers; a service that stays away ends the start
at its deadline, with that line and no traceback. The waiting itself is one shared path
(``shared.startup``, tested without services in ``test_startup.py``); here each role runs it
once, each behind another service."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.helpers.brains import BrainHarness
from tests.helpers.gate import Gate, gated
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_email_hands, spawn_module

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

FAST = {"BRAINHANDS_STARTUP_RETRY_MAX": "0.2", "BRAINHANDS_STARTUP_DEADLINE": "30"}
"""Short pauses, so that a healed service is found within a fraction of a second."""


def text(log: Path) -> str:
    return log.read_text() if log.exists() else ""


def lines(log: Path) -> list[dict[str, object]]:
    found = []
    for line in text(log).splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


def waiting(log: Path) -> list[object]:
    """The services the process logged that it waits for, one entry per line."""
    return [line["service"] for line in lines(log) if line.get("event") == "startup_waiting"]


async def health_port(log: Path, proc: subprocess.Popen[bytes]) -> int:
    port: list[int] = []

    def listening() -> bool:
        port.extend(int(str(x["port"])) for x in lines(log) if x.get("event") == "health_listening")
        assert proc.poll() is None, text(log)
        return bool(port)

    await eventually(listening, within=20, what="the health port")
    return port[0]


async def get(port: int, path: str) -> tuple[int, str]:
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            answer = await http.get(f"http://127.0.0.1:{port}{path}")
    except httpx.TransportError:
        return 0, ""
    return answer.status_code, answer.text


async def waits_then_serves(
    proc: subprocess.Popen[bytes], log: Path, gate: Gate, service: str, port: int | None = None
) -> int:
    """Check that the process waits for ``service`` behind the closed ``gate``, saying so,
    then open the gate; its health port once it answers ready."""
    port = port or await health_port(log, proc)
    await eventually(lambda: waiting(log) == [service], what=f"the line waiting for {service}")
    assert await get(port, "/readyz") == (503, json.dumps({"ready": False, "waiting_for": service}))
    assert (await get(port, "/healthz"))[0] == 200  # alive all the same
    assert gate.resets > 0 and proc.poll() is None

    gate.open()

    async def ready() -> bool:
        assert proc.poll() is None, text(log)
        return (await get(port, "/readyz"))[0] == 200

    await eventually(ready, within=30, what=f"ready once {service} answers")
    assert waiting(log) == [service], "one line, not one per attempt"
    assert [x["msg"] for x in lines(log) if x["level"] == "error"] == []
    assert "Traceback" not in text(log)
    return port


async def test_hands_wait_for_a_store_that_resets(brains: BrainHarness) -> None:
    """The case that died with a ``ConnectionResetError`` in ``wait_for_schema``."""
    log = brains.tmp_path / "hands.log"
    async with gated(brains.target.url) as gate:
        proc = spawn_email_hands(
            env=brains.settings(BRAINHANDS_DATABASE_URL=gate.url, **FAST), log=log
        )
        brains.processes.append(proc)
        await waits_then_serves(proc, log, gate, "store")
    [line] = [x for x in lines(log) if x.get("event") == "startup_waiting"]
    assert f"waiting for store at {gate.url}" in str(line["msg"])


async def test_a_brain_waits_for_rabbitmq(brains: BrainHarness) -> None:
    async with gated(brains.env.url) as gate:
        proc = brains.start_brain(BRAINHANDS_RABBITMQ_URL=gate.url, **FAST)
        log = brains.tmp_path / "brain0.log"
        await waits_then_serves(proc, log, gate, "rabbitmq")
    assert "guest:***@" in next(str(x["msg"]) for x in lines(log) if x.get("service"))


async def test_a_sweeper_waits_for_redis(brains: BrainHarness) -> None:
    log = brains.tmp_path / "sweeper.log"
    async with gated(brains.redis_url) as gate:
        env = brains.settings(BRAINHANDS_REDIS_URL=gate.url, **FAST)
        proc = spawn_module("brainhands", "sweeper", env=env, log=log)
        brains.processes.append(proc)
        await waits_then_serves(proc, log, gate, "redis")


async def test_the_api_waits_for_its_store(brains: BrainHarness) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    log = brains.tmp_path / "api.log"
    async with gated(brains.target.url) as gate:
        env = brains.settings(BRAINHANDS_DATABASE_URL=gate.url, BRAINHANDS_API_AUTH="none", **FAST)
        proc = spawn_module("brainhands", "api", "--port", str(port), env=env, log=log)
        brains.processes.append(proc)
        await eventually(lambda: waiting(log) == ["store"], what="the API waiting for its store")
        assert (await get(port, "/metrics"))[0] == 404  # for an admin key, once serving
        await waits_then_serves(proc, log, gate, "store", port)
        assert await get(port, "/readyz") == (200, "ready")  # the API's own, once serving


async def test_a_relay_gives_up_at_the_deadline_with_one_line(brains: BrainHarness) -> None:
    log = brains.tmp_path / "relay.log"
    async with gated(brains.target.url) as gate:
        env = brains.settings(
            BRAINHANDS_DATABASE_URL=gate.url,
            BRAINHANDS_STARTUP_DEADLINE="1.5",
            BRAINHANDS_STARTUP_RETRY_MAX="0.2",
        )
        proc = spawn_module("brainhands", "relay", env=env, log=log)
        brains.processes.append(proc)
        await eventually(lambda: proc.poll() is not None, within=20, what="the relay to give up")
    output = text(log)
    assert proc.returncode == 2, output
    assert waiting(log) == ["store"]
    last = output.strip().splitlines()[-1]
    assert last.startswith(f"brainhands relay: gave up waiting for store at {gate.url}: ")
    assert "within 1.5 s (BRAINHANDS_STARTUP_DEADLINE)" in last
    assert "Traceback" not in output


async def test_a_store_that_refuses_the_process_ends_it_at_once(brains: BrainHarness) -> None:
    log = brains.tmp_path / "hands.log"
    missing = brains.target.url.rsplit("/", 1)[0] + "/no_such_database"
    proc = spawn_email_hands(env=brains.settings(BRAINHANDS_DATABASE_URL=missing, **FAST), log=log)
    brains.processes.append(proc)
    await eventually(lambda: proc.poll() is not None, within=20, what="the Hands to stop")
    output = text(log)
    assert proc.returncode == 2, output
    assert waiting(log) == []
    assert output.strip().splitlines()[-1] == (
        f"brainhands hands: store at {missing} refused this process: "
        'StoreError: store error: database "no_such_database" does not exist'
    )
