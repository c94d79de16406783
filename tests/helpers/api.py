"""The HTTP API as a real process for tests, its keys, and a reader of its event streams."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from brainhands.api.keys import Scope, create_key
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module


@dataclass
class Api:
    proc: subprocess.Popen[bytes]
    url: str
    log: str

    def http(self, key: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30)


async def start_api(brains: BrainHarness, **env: str) -> Api:
    """``brainhands api`` on a free port, against the harness's store and broker."""
    n = len(brains.processes)
    log = brains.tmp_path / f"api{n}.log"
    proc = spawn_module("brainhands", "api", "--port", "0", env=brains.settings(**env), log=log)
    brains.processes.append(proc)
    port: list[int] = []

    def listening() -> bool:
        for line in log.read_text().splitlines() if log.exists() else []:
            if '"api_listening"' in line:
                port.append(json.loads(line)["port"])
                return True
        assert proc.poll() is None, log.read_text()
        return False

    await eventually(listening, within=30, what="the API to listen")
    return Api(proc, f"http://127.0.0.1:{port[0]}", str(log))


async def key_for(brains: BrainHarness, tenant: str, *scopes: Scope) -> str:
    _, key = await create_key(brains.store, tenant=tenant, scopes=list(scopes), name=tenant)
    return key


async def events(
    http: httpx.AsyncClient, path: str, *, last_event_id: str | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The server-sent events of ``path``: ``{"id", "event", "data"}`` each, data decoded."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id is not None else {}
    async with http.stream("GET", path, headers=headers, timeout=None) as response:
        assert response.status_code == 200, await response.aread()
        event: dict[str, Any] = {}
        async for line in response.aiter_lines():
            if not line:
                if "data" in event:
                    event["data"] = json.loads(event["data"])
                    yield event
                event = {}
                continue
            if line.startswith(":"):
                continue  # a keep-alive
            field, _, value = line.partition(":")
            event[field] = value.removeprefix(" ")


async def seen_until_answered(
    http: httpx.AsyncClient, session_id: str, start: Callable[[], object]
) -> list[dict[str, Any]]:
    """The events of ``session_id``'s stream from its first view, ``start()`` called once
    that view came, until a view shows its (first) submission answered."""
    stream = events(http, f"/sessions/{session_id}/events")
    seen = [await anext(stream)]
    start()
    while seen[-1]["event"] != "view" or seen[-1]["data"]["submissions"][0]["status"] != "answered":
        seen.append(await asyncio.wait_for(anext(stream), 60))
    await stream.aclose()
    return seen


async def watched_message(
    brains: BrainHarness, agent: str, text: str, start: Callable[[], object]
) -> list[dict[str, Any]]:
    """Through a new API process, with a key of tenant ``acme``: submit ``text`` for
    ``agent`` to session ``s1`` (request ``r1``), and return what its event stream showed
    (``seen_until_answered``, ``start()`` called once the first view came)."""
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks")
    async with api.http(key) as http:
        made = await http.post(
            "/sessions/s1/submissions",
            json={"text": text, "agent": agent, "request_id": "r1"},
        )
        assert made.status_code == 200, made.text
        return await seen_until_answered(http, "s1", start)
