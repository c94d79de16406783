"""The HTTP API as an application reaches it: a real ``brainhands api`` process in front of
real Brain (and Hands) processes, keys of two tenants, and the event stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from brainhands.shared.store import schema
from brainhands.shared.tenancy import DEFAULT_TENANT
from tests.helpers.agent_run import AgentRun, agent_run
from tests.helpers.api import events, key_for, start_api, watched_message
from tests.helpers.brains import BrainHarness
from tests.helpers.chat_server import ChatServer, chunks_of, events_of, message, text
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]
__all__ = ["agent_run"]  # the fixture

STEPS = {"kind": "steps", "input": {"x": 1}}  # tests.helpers.kinds: three phases, an answer


async def test_submit_over_http_once_per_request_id_and_read_the_answer(
    brains: BrainHarness,
) -> None:
    brains.start_brain()
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks")
    async with api.http(key) as http:
        first = await http.post(
            "/sessions/s1/submissions", json={"input": STEPS, "request_id": "r1"}
        )
        again = await http.post(
            "/sessions/s1/submissions", json={"input": STEPS, "request_id": "r1"}
        )
        assert (first.status_code, first.json()["created"]) == (200, True)
        assert again.json()["created"] is False  # the same request id: nothing new started

        answered = await http.get("/sessions/s1/submissions/r1", params={"wait": 30})
        assert answered.json()["status"] == "answered"
        assert answered.json()["answer"] == {
            "state": {"from": "one", "then": "two"},
            "input": {"x": 1},
        }

        # Submit and wait in one request: the answer comes back with the submission.
        body = {"input": STEPS, "request_id": "r2"}
        waited = await http.post("/sessions/s1/submissions", params={"wait": 30}, json=body)
        replayed = await http.post("/sessions/s1/submissions", params={"wait": 30}, json=body)
        for response, created in ((waited, True), (replayed, False)):
            got = response.json()
            assert (got["status"], got["created"]) == ("answered", created), got
            assert got["answer"]["input"] == {"x": 1}

        view = (await http.get("/sessions/s1")).json()
        assert view["session"]["id"] == "s1" and view["version"] >= 1
        assert [t["kind"] for t in view["tasks"]] == ["steps", "steps"]
        assert view["needs_action"] is False
        listed = (await http.get("/sessions", params={"status": "idle"})).json()
        assert [s["id"] for s in listed["sessions"]] == ["s1"]
        assert (await http.get("/sessions", params={"status": "open"})).json()["sessions"] == []


async def test_a_tenants_session_ids_are_its_own_and_say_nothing_of_another_tenants(
    brains: BrainHarness,
) -> None:
    brains.start_brain()
    api = await start_api(brains)
    acme = await key_for(brains, "acme", "read", "submit", "tasks")
    globex = await key_for(brains, "globex", "read", "submit", "tasks")
    async with api.http(acme) as http:
        made = await http.post(
            "/sessions/s1/submissions", json={"input": STEPS, "request_id": "r1"}
        )
        assert made.status_code == 200, made.text
        assert made.json()["session_id"] == "s1"

    async with api.http(globex) as http:
        # acme's s1 and an id no one used look the same: no oracle of another's ids.
        for path in ("/sessions/{}", "/sessions/{}/submissions/r1", "/sessions/{}/events"):
            taken, free = [await http.get(path.format(i)) for i in ("s1", "never-made")]
            assert (taken.status_code, free.status_code) == (404, 404), path
            assert taken.json()["detail"] == free.json()["detail"].replace("never-made", "s1")
            assert taken.headers["content-type"] == "application/problem+json"
        assert (await http.get("/sessions")).json()["sessions"] == []
        # The same id is globex's own session: created, with nothing of acme's in it.
        own = await http.post(
            "/sessions/s1/submissions", params={"wait": 30}, json={"input": STEPS}
        )
        assert (own.status_code, own.json()["created"]) == (200, True), own.text
        assert own.json()["status"] == "answered"
        view = (await http.get("/sessions/s1")).json()
        assert view["session"]["id"] == "s1" and view["session"]["tenant"] == "globex"
        assert [s["request_id"] for s in view["submissions"]] == [own.json()["request_id"]]
        assert all(s["session_id"] == "s1" for s in view["submissions"])
        # Squatting: a predictable id taken first by globex is still acme's to use.
        squat = await http.post("/sessions/order-123/submissions", json={"input": STEPS})
        assert squat.status_code == 200

    async with api.http(acme) as http:
        mine = (await http.get("/sessions/s1")).json()
        assert [s["request_id"] for s in mine["submissions"]] == ["r1"]
        late = await http.post("/sessions/order-123/submissions", json={"input": STEPS})
        assert (late.status_code, late.json()["created"]) == (200, True)
        listed = (await http.get("/sessions")).json()["sessions"]
        assert sorted(s["id"] for s in listed) == ["order-123", "s1"]
    s = schema.session
    async with brains.store.backend.snapshot() as conn:
        keys = dict((await conn.execute(select(s.c.id, s.c.tenant))).all())
    assert keys == {
        "acme/s1": "acme", "globex/s1": "globex", "globex/order-123": "globex",
        "acme/order-123": "acme",
    }  # fmt: skip


async def test_a_key_needs_the_scope_of_what_it_does(brains: BrainHarness) -> None:
    api = await start_api(brains, BRAINHANDS_API_DOCS="true")
    submitter = await key_for(brains, "acme", "read", "submit", "tasks")
    signaller = await key_for(brains, "acme", "signal")
    reader = await key_for(brains, "acme", "read")
    async with api.http(submitter) as http:
        assert (await http.post("/sessions/s1/submissions", json={"input": STEPS})).is_success
        refused = await http.post("/sessions/s1/signals", json={"name": "go"})
        assert refused.status_code == 403 and "'signal' scope" in refused.json()["detail"]
        metrics = await http.get("/metrics")
        assert metrics.status_code == 403 and "'operator' scope" in metrics.json()["detail"]
    async with api.http(signaller) as http:
        sent = await http.post("/sessions/s1/signals", json={"name": "go"})
        assert sent.status_code == 200, sent.text
        # A decision is an approval's: the signal scope alone does not give one.
        decision = await http.post("/sessions/s1/signals", json={"name": "go", "decision": True})
        assert decision.status_code == 403 and "'approve' scope" in decision.json()["detail"]
    async with api.http(reader) as http:
        refused = await http.post("/sessions/s2/submissions", json={"input": STEPS})
        assert refused.status_code == 403
        assert "lacks the 'submit' scope" in refused.json()["detail"]
        assert (await http.get("/sessions/s1")).status_code == 200
    async with api.http() as http:
        missing = await http.get("/sessions")
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert (await http.get("/metrics")).status_code == 401
    async with api.http("bh_nope_nothing") as http:
        assert (await http.get("/sessions")).status_code == 401
    async with api.http(reader) as http:
        document = (await http.get("/openapi.json")).json()  # for any key, when turned on
    assert document["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
    operations = {
        f"{method.upper()} {path}": op
        for path, item in document["paths"].items()
        for method, op in item.items()
    }
    assert operations["GET /healthz"].get("security") is None
    assert operations["POST /sessions/{session_id}/submissions"]["x-scope"] == "submit"
    assert operations["POST /sessions/{session_id}/signals"]["x-scope"] == "signal"
    assert operations["GET /metrics"]["x-scope"] == "operator"
    assert operations["POST /sessions/{session_id}/approvals/{approval_id}/deny"]["x-scope"] == (
        "approve"
    )
    for name, op in operations.items():
        if not name.endswith(("/healthz", "/readyz")):
            assert op["security"] == [{"apiKey": []}], name
            assert op["x-scope"] in {"read", "submit", "signal", "approve", "admin", "operator"}, (
                name
            )
    logged = await asyncio.to_thread(Path(api.log).read_text)
    assert submitter.split("_")[-1] not in logged  # no secret in the logs


async def _chunked(size: int) -> AsyncIterator[bytes]:
    """A body of ``size`` bytes sent in chunks, with no ``Content-Length``."""
    for _ in range(size // 1024):
        yield b"[" * 1024


async def test_bad_input_gets_a_problem_saying_what_is_wrong(brains: BrainHarness) -> None:
    api = await start_api(brains, BRAINHANDS_API_MAX_BODY="2048")
    key = await key_for(brains, "acme", "admin")
    async with api.http(key) as http:
        cases = [
            (await http.post("/sessions/s1/submissions", content=b"{not json",
                             headers={"content-type": "application/json"}), 422, "JSON"),
            (await http.post("/sessions/s1/submissions", json={"input": STEPS, "colour": "red"}),
             422, "InputSubmission.colour: Extra inputs are not permitted"),
            (await http.post("/sessions/s1/submissions", json={"text": "a", "input": STEPS}),
             422, "Extra inputs are not permitted"),
            (await http.post("/sessions/s1/submissions", json={"text": "x" * 5000}), 413, "2048"),
            (await http.post("/sessions/s1/submissions", content=_chunked(3 * 1024),
                             headers={"content-type": "application/json"}), 413, "2048"),
            (await http.post("/sessions/s1/submissions", content=b'{"input": {"x": NaN}}',
                             headers={"content-type": "application/json"}), 422,
             "body: NaN is not a finite number"),
            (await http.post("/sessions/bad%20id/submissions", json={"input": STEPS}), 422,
             "session_id"),
            (await http.get("/sessions/nobody"), 404, "session nobody does not exist"),
            (await http.get("/sessions", params={"after": "garbage"}), 422, "query.after"),
            (await http.post("/sessions/s1/submissions",
                             json={"input": STEPS, "callback_url": "ftp://x"}), 422,
             "callback_url"),
            (await http.post("/sessions/s1/submissions",
                             json={"input": STEPS, "callback_url": "https://hooks.example/x"}),
             400, "no BRAINHANDS_WEBHOOK_SECRET"),
        ]  # fmt: skip
        await http.post("/sessions/s1/submissions", json={"input": STEPS})
        cases.append(
            (
                await http.post("/sessions/s1/approvals/nope/approve", json={}),
                404,
                "has no approval 'nope'",
            )
        )
    for response, status, says in cases:
        assert response.status_code == status, (response.status_code, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        body = response.json()
        assert body["status"] == status and says in body["detail"], body


async def test_the_event_stream_resumes_after_the_last_event_id_even_on_another_api_process(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks")
    async with api.http(key) as http:
        await http.post("/sessions/s1/submissions", json={"input": STEPS, "request_id": "r1"})
        stream = events(http, "/sessions/s1/events")
        first = await anext(stream)
        assert (first["event"], first["id"]) == ("view", "0")  # the current view at once
        assert first["data"]["version"] == 0
        brains.start_brain()
        seen = [first]
        while seen[-1]["data"]["submissions"][0]["status"] != "answered":
            seen.append(await asyncio.wait_for(anext(stream), 30))
        await stream.aclose()
    ids = [int(e["id"]) for e in seen]
    assert ids == sorted(set(ids))  # each version once, in order
    last = seen[-1]["id"]

    api.proc.kill()  # the API process the watcher talked to dies
    other = await start_api(brains)
    async with other.http(key) as http:
        await http.post("/sessions/s1/submissions", json={"input": STEPS, "request_id": "r2"})
        resumed = events(http, "/sessions/s1/events", last_event_id=last)
        after = await asyncio.wait_for(anext(resumed), 30)
        await resumed.aclose()
        assert int(after["id"]) > int(last)  # nothing repeated: what came after, at once

        # Up to date: a watcher that saw the latest version is sent nothing until the next.
        await http.get("/sessions/s1/submissions/r2", params={"wait": 30})
        current = str((await http.get("/sessions/s1")).json()["version"])
        caught_up = events(http, "/sessions/s1/events", last_event_id=current)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(caught_up), 1.5)
        await caught_up.aclose()


async def test_the_sessions_list_stream_shows_its_tenants_changes_and_no_others(
    brains: BrainHarness,
) -> None:
    brains.start_brain()  # its commits are what the list streams hear of
    api = await start_api(brains)
    acme = await key_for(brains, "acme", "read", "submit", "tasks")
    globex = await key_for(brains, "globex", "read", "submit", "tasks")
    seen: list[list[dict[str, Any]]] = [[] for _ in range(3)]

    async def watch(http: httpx.AsyncClient, into: list[dict[str, Any]]) -> None:
        async for event in events(http, "/events"):
            into.append(event["data"])

    async with api.http(acme) as mine, api.http(globex) as theirs:
        readers = [asyncio.create_task(watch(mine, into)) for into in seen]
        try:
            await eventually(lambda: all(seen), within=30, what="each stream's first page")
            assert all(s == [{"sessions": []}] for s in seen)
            await theirs.post(
                "/sessions/g1/submissions", json={"input": STEPS}, params={"wait": 30}
            )
            await mine.post("/sessions/a1/submissions", json={"input": STEPS}, params={"wait": 30})
            await eventually(
                lambda: all(len(s) >= 2 for s in seen), within=30, what="acme's session shown"
            )
            await asyncio.sleep(1)  # a1's last commits shown too
            shown = [len(s) for s in seen]
            for s in seen:  # only acme's: globex's session never reaches acme's stream
                assert all([r["id"] for r in page["sessions"]] == ["a1"] for page in s[1:])
                assert s[-1]["sessions"][0]["open"] is False  # its run ended, and it shows
            await theirs.post(
                "/sessions/g2/submissions", json={"input": STEPS}, params={"wait": 30}
            )
            await asyncio.sleep(1)
            assert [len(s) for s in seen] == shown  # globex committed: acme is sent nothing
        finally:
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)


async def test_a_stopping_api_ends_its_event_streams_and_exits(brains: BrainHarness) -> None:
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks")
    async with api.http(key) as http:
        await http.post("/sessions/s1/submissions", json={"input": STEPS})
        streams = [events(http, "/sessions/s1/events"), events(http, "/events")]
        for stream in streams:
            await asyncio.wait_for(anext(stream), 30)  # open, each sent its first event
        api.proc.terminate()
        for stream in streams:  # each ends, rather than holding the server up
            with pytest.raises(StopAsyncIteration):
                await asyncio.wait_for(anext(stream), 10)
    assert await asyncio.to_thread(api.proc.wait, 10) == 0


async def errand_waiting_for_two_approvals(http: httpx.AsyncClient) -> tuple[str, str]:
    """Submit the ``guarded`` agent's errand to ``s1`` (request ``r1``) and wait for its two
    calls to wait for approval: their ids, the call to ana's first, then bo's."""
    made = await http.post(
        "/sessions/s1/submissions",
        json={"text": "please do the errand", "agent": "guarded", "request_id": "r1"},
    )
    assert made.status_code == 200, made.text

    async def two_pending() -> bool:
        return len((await http.get("/approvals", params={"session_id": "s1"})).json()) == 2

    await eventually(two_pending, within=60, what="two calls waiting for approval")
    pending = sorted((await http.get("/approvals")).json(), key=lambda a: a["arguments"]["to"])
    ana, bo = (p["approval_id"] for p in pending)
    return ana, bo


async def test_approve_and_deny_over_http(agent_run: AgentRun) -> None:
    brains = agent_run.brains
    agent_run.start_brain()
    agent_run.start_hands()
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks", "approve")

    async def declared() -> bool:
        return "guarded" in await brains.store.declarations.agents("v1")

    await eventually(declared, within=30, what="the Brain to declare its agents")
    async with api.http(key) as http:
        # A message for an agent no Brain serves is refused at the door, naming those served.
        unknown = await http.post(
            "/sessions/s9/submissions", json={"text": "hi", "agent": "nobody"}
        )
        assert unknown.status_code == 400, unknown.text
        assert "no agent 'nobody'" in unknown.json()["detail"]
        assert "guarded" in unknown.json()["detail"]
        unnamed = await http.post("/sessions/s9/submissions", json={"text": "hi"})
        assert unnamed.status_code == 422 and "agent" in unnamed.json()["detail"]
        assert (await http.get("/sessions/s9")).status_code == 404  # nothing was made
        ana, bo = await errand_waiting_for_two_approvals(http)
        listed = (await http.get("/sessions", params={"needs_action": True})).json()
        assert [s["id"] for s in listed["sessions"]] == ["s1"]
        approved = await http.post(f"/sessions/s1/approvals/{ana}/approve", json={"by": "ops"})
        assert (approved.status_code, approved.json()["verdict"]) == (200, "approved")
        denied = await http.post(f"/sessions/s1/approvals/{bo}/deny", json={"reason": "no"})
        assert denied.json()["by"] == "acme"  # the key's name when no one is named
        late = await http.post(f"/sessions/s1/approvals/{bo}/approve", json={})
        assert late.status_code == 409 and "already denied" in late.json()["detail"]
        no_reason = await http.post(f"/sessions/s1/approvals/{bo}/deny", json={})
        assert no_reason.status_code == 422

        answered = await http.get("/sessions/s1/submissions/r1", params={"wait": 60})
        assert answered.json()["status"] == "answered"
    ledger = await agent_run.email.ledger()
    assert [s["recipient"] for s in ledger["sends"]] == ["ana@example.com"]
    refusal = json.loads(json.loads(agent_run.requests()[1])["messages"][-1]["content"])
    assert refusal == {"status": "denied", "error": "call of 'send_safe' denied by acme: no"}


async def test_approve_with_edited_arguments_over_http(agent_run: AgentRun) -> None:
    """The ``invoicer``'s call over its tool's condition waits; an edit that does not fit
    the tool's schema gets 422 with the reason and leaves it pending; an edit that fits is
    what runs, and the decision answered says so."""
    brains = agent_run.brains
    agent_run.start_brain()
    agent_run.start_hands()
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks", "approve")
    async with api.http(key) as http:
        made = await http.post(
            "/sessions/s1/submissions",
            json={"text": "send the invoices", "agent": "invoicer", "request_id": "r1"},
        )
        assert made.status_code == 200, made.text

        async def one_pending() -> bool:
            return len((await http.get("/approvals", params={"session_id": "s1"})).json()) == 1

        await eventually(one_pending, within=60, what="the call over 100 to wait")
        [waiting] = (await http.get("/approvals")).json()
        assert waiting["arguments"] == {"to": "bo@example.com", "amount": 500}
        assert waiting["reason"] == "the call meets the approval condition amount > 100"
        approve = f"/sessions/s1/approvals/{waiting['approval_id']}/approve"
        bad = await http.post(approve, json={"arguments": {"to": "bo@example.com"}})
        assert bad.status_code == 422, bad.text
        assert bad.json()["detail"] == (
            "edited arguments of 'send_invoice' are invalid: "
            'arguments: "amount" is a required property'
        )
        not_an_object = await http.post(approve, json={"arguments": [1]})
        assert not_an_object.status_code == 422
        assert len((await http.get("/approvals")).json()) == 1  # still pending

        edit = {"to": "bo@example.com", "amount": 250}
        approved = await http.post(approve, json={"arguments": edit, "by": "ops"})
        assert approved.status_code == 200, approved.text
        assert (approved.json()["verdict"], approved.json()["arguments"]) == ("approved", edit)
        other = await http.post(approve, json={"arguments": {**edit, "amount": 1}})
        assert other.status_code == 409 and "other edited arguments" in other.json()["detail"]
        again = await http.post(approve, json={"arguments": edit})
        assert (again.status_code, again.json()["new"]) == (200, False)  # counted once

        answered = await http.get("/sessions/s1/submissions/r1", params={"wait": 60})
        assert answered.json()["status"] == "answered"
    ledger = await agent_run.email.ledger()
    assert sorted((s["recipient"], s["subject"]) for s in ledger["sends"]) == [
        ("ana@example.com", "invoice 50"),
        ("bo@example.com", "invoice 250"),
    ]


async def test_who_decided_is_the_key_and_four_eyes_keep_a_submitter_from_deciding(
    agent_run: AgentRun,
) -> None:
    brains = agent_run.brains
    agent_run.start_brain()
    agent_run.start_hands()
    api = await start_api(brains, BRAINHANDS_API_FOUR_EYES="true")
    asker = await key_for(brains, "acme", "read", "submit", "tasks", "approve")
    checker = await key_for(brains, "acme", "approve")
    async with api.http(asker) as http:
        ana, bo = await errand_waiting_for_two_approvals(http)
        own = await http.post(f"/sessions/s1/approvals/{ana}/approve", json={"by": "the boss"})
        assert own.status_code == 409 and "four eyes" in own.json()["detail"], own.text
    async with api.http(checker) as http:
        approved = await http.post(f"/sessions/s1/approvals/{ana}/approve", json={"by": "Bo"})
        denied = await http.post(f"/sessions/s1/approvals/{bo}/deny", json={"reason": "no"})
    checker_id = checker.split("_")[1]
    for response, verdict in ((approved, "approved"), (denied, "denied")):
        assert response.status_code == 200, response.text
        made_by = response.json()
        assert (made_by["verdict"], made_by["principal"]) == (verdict, f"key:{checker_id}")
    assert approved.json()["by"] == "Bo"  # what the body says is only a name to show
    async with api.http(asker) as http:
        answered = await http.get("/sessions/s1/submissions/r1", params={"wait": 60})
        assert answered.json()["status"] == "answered"
        view = (await http.get("/sessions/s1")).json()
    decisions = [r for r in view["inbox"] if r["key"].startswith("decision:")]
    assert {r["body"]["payload"]["principal"] for r in decisions} == {f"key:{checker_id}"}
    ledger = await agent_run.email.ledger()
    assert [s["recipient"] for s in ledger["sends"]] == ["ana@example.com"]


async def test_a_wait_declared_a_decision_is_reached_only_by_a_key_that_may_approve(
    brains: BrainHarness,
) -> None:
    brains.start_brain()
    await brains.submit("listener", {"names": ["manager-ok"], "decision": True})
    api = await start_api(brains)
    signaller = await key_for(brains, DEFAULT_TENANT, "signal", "read")
    manager = await key_for(brains, DEFAULT_TENANT, "signal", "approve")
    async with api.http(signaller) as http:
        # A plain signal of that name is kept, and never reaches the decision's wait.
        plain = await http.post("/sessions/s1/signals", json={"name": "manager-ok"})
        assert plain.status_code == 200, plain.text
        forged = await http.post(
            "/sessions/s1/signals", json={"name": "manager-ok", "decision": True}
        )
        assert forged.status_code == 403
    async with api.http(manager) as http:
        decided = await http.post(
            "/sessions/s1/signals",
            json={"name": "manager-ok", "payload": {"ok": True}, "decision": True},
        )
        assert decided.status_code == 200, decided.text
    record = await brains.answer(within=60)
    [heard] = record.answer
    assert (heard["name"], heard["payload"]) == ("approval:manager-ok", {"ok": True})
    inbox = {r.name: r for r in await brains.store.inbox.of_session("s1")}
    assert inbox["manager-ok"].applied_at is None  # the plain one reached nothing
    assert inbox["approval:manager-ok"].body["sender"] == f"key:{manager.split('_')[1]}"


async def test_a_tools_progress_notes_reach_the_watchers_live_and_are_not_stored(
    agent_run: AgentRun,
) -> None:
    seen = await watched_message(
        agent_run.brains,
        "errand",
        "please do the errand",
        lambda: (agent_run.start_brain(), agent_run.start_hands()),
    )
    notes = [e for e in seen if e["event"] == "progress"]
    assert len(notes) >= 3  # the tests' sends say "accepted", one note per email
    assert {n["data"]["message"] for n in notes} == {"accepted"}
    assert all(n["data"]["operation_id"] and "id" not in n for n in notes)  # not resumable
    views = [int(e["id"]) for e in seen if e["event"] == "view"]
    assert views == sorted(set(views))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_streaming_models_text_reaches_the_watchers_before_its_answer_is_stored(
    brains: BrainHarness, provider: str
) -> None:
    answer = "Echoing is not needed: here is your answer, in five pieces."
    chat = ChatServer()
    if provider == "openai":
        chat.stream(chunks_of({"role": "assistant", "content": answer}, pieces=5), delay=0.3)
    else:
        chat.stream(events_of(message(text(answer)), pieces=5), delay=0.3, done=False)
    try:
        await brains.declare_tools()
        seen = await watched_message(
            brains,
            "by_settings",
            "say it",
            lambda: brains.start_brain(
                tasks=None,
                agents="tests.helpers.agents",
                BRAINHANDS_MODEL_PROVIDER=provider,
                BRAINHANDS_MODEL_BASE_URL=chat.base_url,
                BRAINHANDS_MODEL_NAME="test-model",
                BRAINHANDS_MODEL_STREAM="true",
            ),
        )
    finally:
        chat.close()
    pieces = [e for e in seen if e["event"] == "model"]
    assert "".join(p["data"]["message"] for p in pieces) == answer
    assert [p["data"]["data"]["seq"] for p in pieces] == list(range(len(pieces)))
    assert len(pieces) == 5 and all("id" not in p for p in pieces)  # live only: not resumable
    # Every piece came before the view in which the model's answer is first stored.
    stored = next(
        i
        for i, e in enumerate(seen)
        if e["event"] == "view" and any(x["kind"] == "model" for x in e["data"]["entries"])
    )
    assert max(seen.index(p) for p in pieces) < stored
    # Stored: the answer as the server would have sent it whole, once; nothing per piece.
    state = await brains.store.load("acme/s1")  # the key of tenant acme's s1
    assert [e.kind for e in state.entries] == ["user", "model"]
    raw = state.entries[1].body["raw"]
    if provider == "openai":
        assert raw["choices"][0]["message"]["content"] == answer
    else:
        assert raw == message(text(answer))
