"""The API's doors, tried as an attacker with keys of two tenants (``acme``, ``globex``)
would, against a real ``brainhands api`` process: each attack of the hardening issue is
replayed and its refusal asserted (docs/security.md lists them)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from brainhands import ApiError, HttpClient, InvalidRequest, NotFoundError
from brainhands.api.keys import revoke_key
from brainhands.shared.storable import MAX_DEPTH
from tests.helpers.api import Api, events, key_for, start_api
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

STEPS = {"kind": "steps", "input": {"x": 1}}
ENDED_WITHIN = 5.0
"""Seconds within which an open stream ends once its credential has."""


async def _opened(http: httpx.AsyncClient, path: str) -> asyncio.Task[float]:
    """A stream of ``path`` once its first event came; the task ends when the stream does,
    with the time it ended."""
    stream = events(http, path)
    await asyncio.wait_for(anext(stream), 30)

    async def ended(stream: AsyncIterator[object]) -> float:
        async for _ in stream:
            pass
        return time.monotonic()

    return asyncio.create_task(ended(stream))


async def test_open_streams_end_once_their_key_is_revoked_or_their_token_expires(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains)
    acme = await key_for(brains, "acme", "read", "submit", "tasks")
    globex = await key_for(brains, "globex", "read", "submit", "tasks")
    short = await key_for(brains, "acme", "read")
    async with api.http(acme) as a, api.http(globex) as g, api.http(short) as s, api.http() as b:
        for http in (a, g):
            made = await http.post("/sessions/s1/submissions", json={"input": STEPS})
            assert made.status_code == 200, made.text
        token = (await a.post("/stream-tokens", json={"session_id": "s1"})).json()["token"]
        revoked = [
            await _opened(a, "/sessions/s1/events"),  # the key in a header
            await _opened(b, f"/sessions/s1/events?token={token}"),  # a browser's, its token
            await _opened(a, "/events"),  # the sessions list
        ]
        kept = await _opened(g, "/sessions/s1/events")  # another tenant's key, not revoked
        minted = (await s.post("/stream-tokens", json={"ttl": 2})).json()
        expiring = await _opened(b, f"/events?token={minted['token']}")

        await revoke_key(brains.store, acme.split("_")[1])
        at = time.monotonic()
        done, _ = await asyncio.wait(revoked, timeout=ENDED_WITHIN + 1)
        assert done == set(revoked), "a revoked key's stream still runs"
        assert max(t.result() for t in revoked) - at <= ENDED_WITHIN
        ended = await asyncio.wait_for(expiring, 2 + ENDED_WITHIN + 1)
        assert ended - at <= 2 + ENDED_WITHIN  # expired at most 2 s after the revocation
        assert not kept.done()  # a live key's stream goes on
        kept.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await kept
        assert (await a.get("/sessions/s1")).status_code == 401  # and the key itself is out


async def test_long_polls_hold_one_of_the_keys_streams_and_wake_on_the_change_feed(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains, BRAINHANDS_API_MAX_STREAMS="2")
    key = await key_for(brains, "acme", "read", "submit", "tasks")
    other = await key_for(brains, "acme", "read")
    async with api.http(key) as http, api.http(other) as calm:
        made = await http.post(
            "/sessions/s1/submissions", json={"input": STEPS, "request_id": "r1"}
        )
        assert made.status_code == 200, made.text
        path = "/sessions/s1/submissions/r1"
        waits = [asyncio.create_task(http.get(path, params={"wait": 45})) for _ in range(2)]

        async def third_refused() -> bool:
            third = await http.get(path, params={"wait": 0.1})
            if third.status_code == 429:
                return True
            # The probe came first and took a wait's place: that wait was refused; again.
            for i, wait in enumerate(waits):
                if wait.done():
                    waits[i] = asyncio.create_task(http.get(path, params={"wait": 45}))
            return False

        await eventually(third_refused, within=10, what="a third wait to be refused")
        refused = await http.get(path, params={"wait": 0.1})
        assert "streams open" in refused.json()["detail"] and "retry-after" in refused.headers
        assert (await http.get("/events")).status_code == 429  # streams and waits: one cap
        assert (await http.get(path)).status_code == 200  # a read without a wait holds none
        assert (await calm.get(path, params={"wait": 0.1})).status_code == 200  # another key

        brains.start_brain()  # the answer's commit wakes both waits, long before 45 s
        answered = await asyncio.wait_for(asyncio.gather(*waits), 40)
        assert [w.json()["status"] for w in answered] == ["answered", "answered"]
        assert (await http.get(path, params={"wait": 1})).status_code == 200  # caps given back


async def test_input_no_view_could_show_is_refused_at_the_door_naming_the_limit(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains, BRAINHANDS_API_MAX_BODY="65536")
    key = await key_for(brains, "acme", "admin")
    deep = "[" * 600 + "]" * 600
    raw = {"content-type": "application/json"}
    async with api.http(key) as http:
        ok = await http.post("/sessions/s1/submissions", json={"input": STEPS, "request_id": "r1"})
        assert ok.status_code == 200
        attacks = [
            ("/sessions/s1/submissions", f'{{"input": {{"kind": "steps", "input": {deep}}}}}',
             f"nested deeper than {MAX_DEPTH} levels"),
            ("/sessions/s1/submissions", '{"text": "\\ud800", "agent": "a"}', "lone surrogate"),
            ("/sessions/s1/submissions", '{"input": {"x": Infinity}}', "Infinity is not a finite"),
            ("/sessions/s1/submissions", '{"input": {"x": 1e999}}', "inf is not a finite"),
            ("/sessions/s1/submissions", '{"text": "a", "agent": "a", "budget": {"cost": NaN}}',
             "NaN is not a finite"),
            ("/sessions/s1/budget", '{"cost": Infinity}', "Infinity is not a finite"),
            ("/sessions/s1/signals", f'{{"name": "go", "payload": {deep}}}', "nested deeper"),
            ("/sessions/s1/signals", '{"name": "go", "payload": {"\\udfff": 1}}', "surrogate"),
        ]  # fmt: skip
        for path, body, says in attacks:
            refused = await http.post(path, content=body.encode(), headers=raw)
            assert refused.status_code == 422, (path, body[:80], refused.text)
            assert says in refused.json()["detail"], refused.json()
        chunked = await http.post("/sessions/s1/signals", content=_chunks(70_000), headers=raw)
        assert chunked.status_code == 413 and "65536" in chunked.json()["detail"]
        view = await http.get("/sessions/s1")  # nothing of it was stored: the view stands
        assert view.status_code == 200 and len(view.json()["submissions"]) == 1
    async with api.http() as http:
        forged = await http.get("/sessions/s1/events", params={"token": "bhs_abc.\u00e9"})
        assert forged.status_code == 401, forged.text
    # The Python clients refuse the same before anything is sent or stored.
    async with brains.client(tenant="acme") as client:
        with pytest.raises(InvalidRequest, match="not a finite number"):
            await client.submit("s1", {"kind": "steps", "input": {"x": float("nan")}})
        with pytest.raises(InvalidRequest, match="lone surrogate"):
            await client.signal("s1", "go", ["\ud800"])
    async with HttpClient(api.url, key) as remote:
        with pytest.raises(InvalidRequest, match=f"nested deeper than {MAX_DEPTH}"):
            await remote.submit("s1", json.loads(deep))
    logged = await asyncio.to_thread(Path(api.log).read_text)
    assert '"request_failed"' not in logged  # not one of them was a failure inside


async def _chunks(size: int) -> AsyncIterator[bytes]:
    """``size`` bytes of a body sent in chunks, with no ``Content-Length``."""
    for _ in range(size // 1000):
        yield b" " * 1000


async def test_without_keys_only_the_developers_own_pages_and_no_operator_act_get_in(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains, BRAINHANDS_API_AUTH="none")
    operator = await key_for(brains, "ops", "operator")
    async with api.http() as http:
        made = await http.post(
            "/sessions/s1/submissions", json={"input": STEPS, "request_id": "r1"}
        )
        assert made.status_code == 200, made.text
        cancel = "/sessions/s1/submissions/r1/cancel"
        for headers in (
            {"Origin": "https://evil.example"},  # a body-less cross-site POST
            {"Origin": "null"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"},
        ):
            refused = await http.post(cancel, headers=headers)
            assert refused.status_code == 403, (headers, refused.text)
            assert "another site's page" in refused.json()["detail"]
        assert (
            await http.get("/sessions/s1", headers={"Origin": "https://evil.example"})
        ).is_success
        # The API's own page, a script or the CLI (no Origin) still write.
        own = await http.post(cancel, headers={"Origin": api.url, "Sec-Fetch-Site": "same-origin"})
        assert own.status_code == 200, own.text
        budget = await http.put("/tenants/acme/budget", json={"tokens": 1})
        assert budget.status_code == 401, budget.text  # an operator's act needs its key
        assert (await http.get("/metrics")).status_code == 401
    async with api.http(operator) as http:
        assert (await http.put("/tenants/acme/budget", json={"tokens": 1})).status_code == 200
    # And it does not listen beyond the loopback interface at all.
    log = brains.tmp_path / "open-api.log"
    env = brains.settings(BRAINHANDS_API_AUTH="none", BRAINHANDS_API_HOST="0.0.0.0")
    proc = spawn_module("brainhands", "api", "--port", "0", env=env, log=log)
    brains.processes.append(proc)
    assert await asyncio.to_thread(proc.wait, 30) == 2
    said = await asyncio.to_thread(log.read_text)
    assert "BRAINHANDS_API_AUTH=none" in said and "'0.0.0.0'" in said


async def test_only_an_operator_reads_the_metrics_and_keyless_requests_are_rate_limited(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains, BRAINHANDS_API_RATE="0.2", BRAINHANDS_API_BURST="3")
    admins = [await key_for(brains, t, "admin") for t in ("acme", "globex")]
    operator = await key_for(brains, "ops", "operator")
    for admin in admins:  # each tenant's admin: everything within its tenant, not this
        async with api.http(admin) as http:
            metrics = await http.get("/metrics")
            assert metrics.status_code == 403 and "'operator' scope" in metrics.json()["detail"]
    async with api.http(operator) as http:
        metrics = await http.get("/metrics")
        assert metrics.status_code == 200 and "python_info" in metrics.text
    async with api.http() as http:
        for path in ("/docs", "/redoc", "/openapi.json"):  # nothing loaded from elsewhere
            assert (await http.get(path)).status_code == 404, path
        guesses = [
            (await http.get("/sessions", headers={"Authorization": f"Bearer bh_{n}_guess"}))
            for n in range(4)
        ]
        assert [g.status_code for g in guesses] == [401, 401, 401, 429]
        assert "retry-after" in guesses[-1].headers
        tokens = await http.get("/events", params={"token": "bhs_x.y"})
        assert tokens.status_code == 429  # a stream token guessed counts the same
    async with api.http(admins[0]) as http:  # a key has its own rate, not the address's
        assert (await http.get("/sessions")).status_code == 200


async def test_an_id_is_one_path_segment_and_never_reaches_another_route(
    brains: BrainHarness,
) -> None:
    api: Api = await start_api(brains)
    acme = await key_for(brains, "acme", "read", "submit", "tasks")
    globex = await key_for(brains, "globex", "read", "submit", "tasks")
    async with HttpClient(api.url, acme) as client:
        await client.submit("errand-2", STEPS, request_id="r1")
    async with HttpClient(api.url, globex) as client:
        await client.submit("errand-2", STEPS, request_id="r1")
        for forged in (
            "errand-2/../../approvals?session_id=errand-2",
            "errand-2/documents/notes",
            "errand-2?x=1",
            "errand-2#frag",
            "..",
            "errand-2/..",
            "érrand-2",
        ):
            with pytest.raises((NotFoundError, InvalidRequest, ApiError)) as refused:
                await client.session(forged)
            assert not isinstance(refused.value, ApiError) or refused.value.status == 400
        with pytest.raises((NotFoundError, InvalidRequest, ApiError)):
            await client.cancel("errand-2", "r1/../../../approvals")
        assert (await client.session("errand-2")).submissions[0].request_id == "r1"
