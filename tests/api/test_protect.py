"""What the API tells browsers and whom it answers, on a real ``brainhands api`` process:
security headers, opt-in CORS, the Host allow-list, query parameters it ignores, a failure
inside answered as a problem, and what one key may take (rate, streams, key checks)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from sqlalchemy import text

from brainhands.api.keys import VerifiedKeys, revoke_key
from tests.helpers.api import key_for, start_api
from tests.helpers.brains import BrainHarness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

STEPS = {"kind": "steps", "input": {"x": 1}}


async def test_every_page_tells_browsers_to_run_only_its_own_code_and_never_frame_it(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read")
    async with api.http(key) as http:
        for path in ("/console", "/sessions", "/sessions/nobody", "/healthz", "/docs"):
            headers = (await http.get(path)).headers
            assert headers["x-content-type-options"] == "nosniff", path
            assert headers["x-frame-options"] == "DENY", path
            policy = headers["content-security-policy"]
            assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy, path
        # No page loads code from elsewhere: FastAPI's documentation pages are not served.
        assert [(await http.get(p)).status_code for p in ("/docs", "/redoc")] == [404, 404]


async def test_the_openapi_document_is_off_by_default_and_for_a_key_when_on(
    brains: BrainHarness,
) -> None:
    key = await key_for(brains, "acme", "read")
    api = await start_api(brains)
    async with api.http(key) as http:
        assert (await http.get("/openapi.json")).status_code == 404
    api = await start_api(brains, BRAINHANDS_API_DOCS="true")
    async with api.http() as http:
        assert (await http.get("/openapi.json")).status_code == 401
    async with api.http(key) as http:
        document = await http.get("/openapi.json")
        assert document.status_code == 200 and "/sessions" in document.json()["paths"]


async def test_without_keys_only_loopback_host_names_are_answered(brains: BrainHarness) -> None:
    api = await start_api(brains, BRAINHANDS_API_AUTH="none")
    port = api.url.rsplit(":", 1)[1]
    async with api.http() as http:
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "[::1]"):
            response = await http.get("/sessions", headers={"Host": host})
            assert response.status_code == 200, (host, response.text)
        # A page elsewhere whose DNS name was rebound to 127.0.0.1 sends its own name.
        rebound = await http.get("/sessions", headers={"Host": f"attacker.example:{port}"})
        assert rebound.status_code == 400
        assert rebound.headers["content-type"] == "application/problem+json"
        assert "'attacker.example'" in rebound.json()["detail"]
    named = await start_api(brains, BRAINHANDS_API_ALLOWED_HOSTS="agents.example.com")
    key = await key_for(brains, "acme", "read")
    async with named.http(key) as http:
        ok = await http.get("/sessions", headers={"Host": "agents.example.com"})
        assert ok.status_code == 200
        assert (await http.get("/sessions")).status_code == 400  # 127.0.0.1 is not named


async def test_only_the_configured_origins_may_call_it_from_a_page(brains: BrainHarness) -> None:
    allowed = "https://console.example.com"
    api = await start_api(brains, BRAINHANDS_API_CORS_ORIGINS=f"{allowed}, https://b.example")
    key = await key_for(brains, "acme", "read")
    preflight = {"Access-Control-Request-Method": "GET",
                 "Access-Control-Request-Headers": "authorization,last-event-id"}  # fmt: skip
    async with api.http(key) as http:
        ok = await http.options("/sessions", headers={"Origin": allowed, **preflight})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == allowed
        assert "authorization" in ok.headers["access-control-allow-headers"].lower()
        other = await http.options(
            "/sessions", headers={"Origin": "https://evil.example", **preflight}
        )
        assert "access-control-allow-origin" not in other.headers
        read = await http.get("/sessions", headers={"Origin": allowed})
        assert read.headers["access-control-allow-origin"] == allowed
    plain = await start_api(brains)  # no origins configured: no page elsewhere may call it
    async with plain.http(key) as http:
        read = await http.get("/sessions", headers={"Origin": allowed})
        assert read.status_code == 200 and "access-control-allow-origin" not in read.headers


async def test_an_unknown_query_parameter_is_ignored_and_a_repeated_one_refused(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks")
    async with api.http(key) as http:
        made = await http.post(
            "/sessions/s1/submissions", params={"_": "123"}, json={"input": STEPS}
        )
        assert made.status_code == 200, made.text  # a browser's cache-buster
        listed = await http.get("/sessions", params={"_": "1", "utm_source": "mail"})
        assert [s["id"] for s in listed.json()["sessions"]] == ["s1"]
        twice = await http.get("/sessions", params=[("limit", "1"), ("limit", "2")])
        assert twice.status_code == 422
        assert twice.json()["errors"] == [
            {"where": "query.limit", "problem": "Given more than once"}
        ]


async def test_a_failure_inside_is_a_problem_with_an_incident_the_log_explains(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read")
    async with api.http(key) as http:
        assert (await http.get("/sessions")).status_code == 200
        async with brains.store.backend.transaction() as conn:  # the store loses a table
            await conn.execute(text("ALTER TABLE task RENAME TO task_gone"))
        try:
            failed = await http.get("/sessions")
        finally:
            async with brains.store.backend.transaction() as conn:
                await conn.execute(text("ALTER TABLE task_gone RENAME TO task"))
    assert failed.status_code == 500
    assert failed.headers["content-type"] == "application/problem+json"
    problem = failed.json()
    assert problem["status"] == 500 and problem["incident"] in problem["detail"]
    assert "task" not in problem["detail"]  # nothing of the inside leaks to the caller
    logged = await asyncio.to_thread(Path(api.log).read_text)
    [line] = [json.loads(x) for x in logged.splitlines() if '"request_failed"' in x]
    assert line["incident"] == problem["incident"] and line["path"] == "/sessions"
    assert "task" in json.dumps(line)  # the operator's log says what broke


async def test_a_key_over_its_rate_or_its_streams_is_told_when_to_come_back(
    brains: BrainHarness,
) -> None:
    api = await start_api(
        brains, BRAINHANDS_API_RATE="0.5", BRAINHANDS_API_BURST="4", BRAINHANDS_API_MAX_STREAMS="1"
    )
    busy = await key_for(brains, "acme", "read")
    calm = await key_for(brains, "acme", "read")
    async with api.http(busy) as http:
        answers = [await http.get("/sessions") for _ in range(5)]
        assert [a.status_code for a in answers] == [200, 200, 200, 200, 429]
        over = answers[-1]
        assert over.headers["content-type"] == "application/problem+json"
        assert 1 <= int(over.headers["retry-after"]) <= 2, over.headers
        assert "rate" in over.json()["detail"]
    async with api.http(calm) as http:  # another key is not slowed; 4 requests, its burst
        async with http.stream("GET", "/events") as first:
            assert first.status_code == 200
            second = await http.get("/events")
            assert second.status_code == 429 and "streams open" in second.json()["detail"]
        await asyncio.sleep(0.2)  # the server sees the first stream closed
        async with http.stream("GET", "/events") as again:
            assert again.status_code == 200


async def test_checking_a_key_reads_the_key_table_at_most_once_a_ttl(brains: BrainHarness) -> None:
    keys = VerifiedKeys(brains.store, ttl=0.5)
    known = await key_for(brains, "acme", "read")
    assert (await keys.verify(known)) is not None
    # With the key table gone, unknown and malformed keys are still answered, from memory.
    async with brains.store.backend.transaction() as conn:
        await conn.execute(text("ALTER TABLE api_key RENAME TO api_key_gone"))
    try:
        for junk in ("bh_0123456789abcdef_nope", "bh_x_y", "nothing", known + "x"):
            assert await keys.verify(junk) is None, junk
        assert (await keys.verify(known)) is not None
    finally:
        async with brains.store.backend.transaction() as conn:
            await conn.execute(text("ALTER TABLE api_key_gone RENAME TO api_key"))
    # A key revoked is refused once the table is read again.
    await revoke_key(brains.store, known.split("_")[1])
    await asyncio.sleep(0.6)
    assert await keys.verify(known) is None
