"""Attacks on decisions, replayed through the API with the keys of two tenants: a plain
signal forging or squatting a decision, approval skipped by a raw task submission, and a
submitter deciding for its own run under four eyes. Each asserts the refusal, and that the
rightful decider still decides.

The API runs in-process on a real PostgreSQL store and RabbitMQ; a session is run by one
in-process Brain pass at a time, so a test reads exactly what each pass dispatched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from brainhands.brain.approval import ApprovalRequest
from brainhands.brain.registry import TaskRegistry
from brainhands.examples.notify import tasks as notify_tasks
from brainhands.shared.messages import ToolJob, decode
from brainhands.shared.store import schema
from brainhands.shared.tenancy import session_key
from brainhands.shared.tools import load_tool_modules
from brainhands.shared.vocabulary import APPROVAL_KIND
from tests.helpers import kinds
from tests.helpers.inprocess_api import InProcessApi, inprocess_api
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ACME, GLOBEX = "acme", "globex"
BATCH = {
    "kind": "notice-batch",
    "input": {
        "recipients": ["ana@example.com", "bo@example.com"],
        "subject": "Notice",
        "body": "The approved text.",
    },
}
"""The notify example's batch, submitted as a task kind's raw input."""

Deploy = Callable[..., AbstractAsyncContextManager[InProcessApi]]


@pytest.fixture
async def deploy(postgres_url: str, rabbitmq_url: str, namespace: str) -> AsyncIterator[Deploy]:
    """``deploy(**api_settings)``: the API in-process, its Brain running the notify
    example's kinds and the tests' ``listener``; the example's sends declared as
    ``brainhands demo --approve`` declares them (approval needed)."""
    registry = TaskRegistry().include(notify_tasks.registry).include(kinds.registry)
    sends = [
        dataclasses.replace(spec.declaration(), approval=spec.name.startswith("send_email"))
        for spec in load_tool_modules(["brainhands.examples.notify.tools"])
    ]

    @asynccontextmanager
    async def made(**settings: object) -> AsyncIterator[InProcessApi]:
        async with inprocess_api(
            postgres_url, rabbitmq_url, namespace, registry, **settings
        ) as api:
            await api.declare(*sends)
            yield api

    yield made


async def sends_dispatched(api: InProcessApi, tenant: str, session_id: str) -> list[ToolJob]:
    """The jobs for the email pool the session's commits put in the outbox."""
    o = schema.outbox
    key = session_key(tenant, session_id)
    async with api.store.backend.engine.connect() as conn:
        rows = await conn.execute(select(o.c.body).where(o.c.session_id == key).order_by(o.c.id))
        messages = [decode(bytes(r.body)) for r in rows]
    return [m for m in messages if isinstance(m, ToolJob) and m.tool.startswith("send_email")]


async def pending(http: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    answer = await http.get("/approvals", params={"session_id": session_id})
    assert answer.status_code == 200, answer.text
    listed: list[dict[str, Any]] = answer.json()
    return sorted(listed, key=lambda a: str(a["arguments"].get("to")))


async def batch_waiting(api: InProcessApi, http: httpx.AsyncClient) -> list[dict[str, Any]]:
    """Submit the batch to acme's ``b1`` (``http`` may start tasks), run it until both its
    sends wait for approval; the two pending approvals, ana's first."""
    made = await http.post("/sessions/b1/submissions", json={"input": BATCH, "request_id": "r1"})
    assert made.status_code == 200, made.text

    async def both_wait() -> bool:
        await api.run(ACME, "b1")
        return len(await pending(http, "b1")) == 2

    await eventually(both_wait, within=30, what="both sends to wait for approval")
    return await pending(http, "b1")


async def approval_waiting(api: InProcessApi, http: httpx.AsyncClient) -> str:
    """An approval gate of acme's ``a1`` waiting for a decision (a send to ana, as an
    agent's call would make it), started by ``http``, which may start tasks; its id."""
    gate = ApprovalRequest(
        tool="send_email",
        arguments={"key": "k1", "to": "ana@example.com", "subject": "s", "body": "b"},
        call_id="call-1",
        agent="notifier",
    )
    made = await http.post(
        "/sessions/a1/submissions",
        json={"input": {"kind": APPROVAL_KIND, "input": gate.input()}, "request_id": "r1"},
    )
    assert made.status_code == 200, made.text

    async def waits() -> bool:
        await api.run(ACME, "a1")
        return len(await pending(http, "a1")) == 1

    await eventually(waits, within=30, what="the call to wait for approval")
    [waiting] = await pending(http, "a1")
    approval_id: str = waiting["approval_id"]
    return approval_id


async def run_until(
    api: InProcessApi, session_id: str, done: Callable[[], Awaitable[bool]]
) -> None:
    async def ran() -> bool:
        await api.run(ACME, session_id)
        return await done()

    await eventually(ran, within=30, what=f"session {session_id} to get there")


# 1. Decisions cannot be forged or squatted --------------------------------------------------


async def test_a_plain_signal_cannot_take_a_pending_approvals_decision(deploy: Deploy) -> None:
    async with deploy() as api:
        owner = await api.key(ACME, "read", "submit", "tasks")
        forger = await api.key(ACME, "read", "signal")
        approver = await api.key(ACME, "read", "approve")
        stranger = await api.key(GLOBEX, "read", "signal", "approve")
        async with api.http(owner) as http:
            gate = await approval_waiting(api, http)
        async with api.http(forger) as http:
            for signal_id in (
                f"decision:{gate}",  # the approval's own decision key
                f"approval:{gate}",  # a decision signal's namespace
                "brainhands.budget:r1",  # a budget raise's
                "brainhands.compensation:a1",  # an act on a failed undo's
            ):
                forged = await http.post(
                    "/sessions/a1/signals",
                    json={"name": "note", "signal_id": signal_id, "payload": {"verdict": "ok"}},
                )
                assert forged.status_code == 422, (signal_id, forged.text)
                assert "runtime's own" in forged.json()["detail"]
            assert [p["approval_id"] for p in await pending(http, "a1")] == [gate]
            listed = (await http.get("/sessions", params={"needs_action": True})).json()
            assert [s["id"] for s in listed["sessions"]] == ["a1"]
            # A signal key cannot decide either, by the route made for deciding.
            refused = await http.post(f"/sessions/a1/approvals/{gate}/approve")
            assert refused.status_code == 403
        async with api.http(stranger) as http:  # another tenant's keys see no such session
            other = await http.post(f"/sessions/a1/approvals/{gate}/approve")
            assert other.status_code == 404
            elsewhere = await http.post(
                "/sessions/a1/signals", json={"name": "note", "signal_id": "x"}
            )
            assert elsewhere.status_code == 404
        async with api.http(approver) as http:
            approved = await http.post(f"/sessions/a1/approvals/{gate}/approve")
        assert approved.status_code == 200, approved.text
        made = approved.json()
        assert (made["new"], made["principal"]) == (True, f"key:{approver.split('_')[1]}")
        await run_until(api, "a1", lambda: _sends_are(api, "a1", 1))
        [job] = await sends_dispatched(api, ACME, "a1")
        assert job.arguments["to"] == "ana@example.com"


async def _sends_are(api: InProcessApi, session_id: str, n: int) -> bool:
    return len(await sends_dispatched(api, ACME, session_id)) == n


async def test_an_id_an_approver_will_use_cannot_be_taken_first(deploy: Deploy) -> None:
    """docs/api.md's ``mgr-7``: a plain signal sent first under the id a manager will give
    a decision signal leaves that decision free, and it reaches the wait."""
    async with deploy() as api:
        owner = await api.key(ACME, "read", "submit", "tasks")
        squatter = await api.key(ACME, "signal")
        manager = await api.key(ACME, "signal", "approve")
        listener = {"kind": "listener", "input": {"names": ["manager-ok"], "decision": True}}
        async with api.http(owner) as http:
            made = await http.post(
                "/sessions/w1/submissions", json={"input": listener, "request_id": "r1"}
            )
            assert made.status_code == 200, made.text
        await api.run(ACME, "w1")
        async with api.http(squatter) as http:
            squat = await http.post(
                "/sessions/w1/signals", json={"name": "noise", "signal_id": "mgr-7"}
            )
            assert squat.status_code == 200, squat.text  # a plain id of its own, kept apart
        async with api.http(manager) as http:
            decided = await http.post(
                "/sessions/w1/signals",
                json={
                    "name": "manager-ok",
                    "signal_id": "mgr-7",
                    "payload": {"ok": True},
                    "decision": True,
                },
            )
            assert decided.status_code == 200, decided.text
            assert decided.json() == {"signal_id": "mgr-7", "created": True}
            again = await http.post(
                "/sessions/w1/signals",
                json={"name": "manager-ok", "signal_id": "mgr-7", "decision": True},
            )
            assert again.json() == {"signal_id": "mgr-7", "created": False}  # counted once

        async def answered() -> bool:
            record = await api.store.submissions.get(session_key(ACME, "w1"), "r1")
            return record.status == "answered"

        await run_until(api, "w1", answered)
        record = await api.store.submissions.get(session_key(ACME, "w1"), "r1")
        [heard] = record.answer  # type: ignore[misc]
        assert heard == {
            "name": "approval:manager-ok",
            "payload": {"ok": True},
            "signal_id": "mgr-7",
            "timed_out": False,
        }


async def test_a_decision_record_that_is_no_decision_answers_409_never_500(
    deploy: Deploy,
) -> None:
    """A record under an approval's key whose payload is incomplete (what a forged signal
    left before this was closed) is refused with a reason, by approve and deny alike."""
    async with deploy() as api:
        owner = await api.key(ACME, "read", "submit", "tasks")
        approver = await api.key(ACME, "approve")
        async with api.http(owner) as http:
            gate = await approval_waiting(api, http)
        left = f"decision:{gate}"
        await api.store.inbox.send_request(
            session_id=session_key(ACME, "a1"),
            kind="signal",
            key=left,
            name="note",
            body={"payload": {"verdict": "approved"}},
            wake=None,
        )
        async with api.http(approver) as http:
            approve = await http.post(f"/sessions/a1/approvals/{gate}/approve")
            deny = await http.post(f"/sessions/a1/approvals/{gate}/deny", json={"reason": "no"})
        for answer in (approve, deny):
            assert answer.status_code == 409, answer.text
            assert "holds no decision" in answer.json()["detail"]


# 2. Approval is enforced where a call is dispatched ------------------------------------------


async def test_a_raw_batch_submission_waits_for_approval_of_each_send(deploy: Deploy) -> None:
    """``notice-batch`` submitted directly, with the sends declared as ``--approve``
    declares them: nothing is sent until a decision; an approved send goes once, a
    denied one never, and the batch reads the denial as that send's failure."""
    async with deploy() as api:
        owner = await api.key(ACME, "read", "submit", "tasks")
        approver = await api.key(ACME, "read", "approve")
        async with api.http(owner) as http:
            ana, bo = await batch_waiting(api, http)
        assert await sends_dispatched(api, ACME, "b1") == []
        assert (ana["tool"], ana["agent"]) == ("send_email", "send-notice")
        assert ana["arguments"]["body"] == "The approved text."
        async with api.http(approver) as http:
            ok = await http.post(f"/sessions/b1/approvals/{ana['approval_id']}/approve")
            no = await http.post(
                f"/sessions/b1/approvals/{bo['approval_id']}/deny", json={"reason": "not bo"}
            )
            assert (ok.status_code, no.status_code) == (200, 200), (ok.text, no.text)
        await run_until(api, "b1", lambda: _sends_are(api, "b1", 1))
        [job] = await sends_dispatched(api, ACME, "b1")
        assert job.arguments["to"] == "ana@example.com"
        # The denial is the send's failure, as its task reads it: bo's notice was not sent
        # (the example's task, taking it for an unconfirmed send, may ask again: a new
        # approval, never a send without one).
        tasks, _ = await api.store.queries.history(session_key(ACME, "b1"))
        denied = next(t for t in tasks if t.id == bo["approval_id"])
        assert (denied.status, denied.outcome) == ("terminal", "failed")
        assert "denied by" in denied.error["error"]
        await api.run(ACME, "b1")
        assert [j.arguments["to"] for j in await sends_dispatched(api, ACME, "b1")] == [
            "ana@example.com"
        ]


async def test_an_approved_task_tools_own_sends_need_no_second_approval(deploy: Deploy) -> None:
    """``--approve`` through the agent: the batch it calls is approved as a whole (an
    approval gate of a task tool), and the sends made below that gate are what was
    approved: dispatched at once, not asked for again."""
    async with deploy() as api:
        owner = await api.key(ACME, "read", "submit", "tasks")
        approver = await api.key(ACME, "approve")
        gate = ApprovalRequest(
            tool="send_notice_batch",
            arguments=BATCH["input"],  # type: ignore[arg-type]
            call_id="call-1",
            agent="notifier",
            task_kind="notice-batch",
        )
        async with api.http(owner) as http:
            made = await http.post(
                "/sessions/g1/submissions",
                json={"input": {"kind": APPROVAL_KIND, "input": gate.input()}},
            )
            assert made.status_code == 200, made.text

            async def waits() -> bool:
                await api.run(ACME, "g1")
                return len(await pending(http, "g1")) == 1

            await eventually(waits, within=30, what="the batch to wait for approval")
            [batch] = await pending(http, "g1")
        async with api.http(approver) as http:
            ok = await http.post(f"/sessions/g1/approvals/{batch['approval_id']}/approve")
            assert ok.status_code == 200, ok.text
        await run_until(api, "g1", lambda: _sends_are(api, "g1", 2))
        async with api.http(owner) as http:
            assert await pending(http, "g1") == []


async def test_a_submit_only_key_cannot_start_a_task_kind(deploy: Deploy) -> None:
    async with deploy() as api:
        agent_only = await api.key(ACME, "read", "submit")
        async with api.http(agent_only) as http:
            refused = await http.post("/sessions/b1/submissions", json={"input": BATCH})
            assert refused.status_code == 403, refused.text
            assert "'tasks' scope" in refused.json()["detail"]
            assert (await http.get("/sessions/b1")).status_code == 404  # nothing was made
            message = await http.post(
                "/sessions/m1/submissions", json={"text": "hello", "agent": "notifier"}
            )
            assert message.status_code == 200, message.text  # what the key is for


# 5. Four eyes cover every decision act -------------------------------------------------------


async def test_four_eyes_keep_a_submitter_from_every_decision_on_its_run(deploy: Deploy) -> None:
    async with deploy(api_four_eyes=True) as api:
        submitter = await api.key(ACME, "read", "submit", "tasks", "signal", "approve")
        other = await api.key(ACME, "read", "signal", "approve")
        listener = {"kind": "listener", "input": {"names": ["go"], "decision": True}}
        async with api.http(submitter) as http:
            gate = await approval_waiting(api, http)
            made = await http.post("/sessions/w1/submissions", json={"input": listener})
            assert made.status_code == 200, made.text
            own = [
                await http.post(f"/sessions/a1/approvals/{gate}/approve"),
                await http.post(f"/sessions/a1/approvals/{gate}/deny", json={"reason": "x"}),
                await http.post("/sessions/w1/signals", json={"name": "go", "decision": True}),
                await http.post("/sessions/a1/budget", json={"tokens": 10}),
                await http.post(
                    "/sessions/a1/compensations/t1", json={"action": "retry", "reason": "x"}
                ),
                await http.post(
                    "/sessions/a1/compensations/t1", json={"action": "abandon", "reason": "x"}
                ),
            ]
            for answer in own:
                assert answer.status_code == 409, answer.text
                assert "four eyes" in answer.json()["detail"], answer.text
            plain = await http.post("/sessions/w1/signals", json={"name": "go"})
            assert plain.status_code == 200  # a plain signal decides nothing
        async with api.http(other) as http:
            approved = await http.post(f"/sessions/a1/approvals/{gate}/approve")
            assert approved.status_code == 200, approved.text
            decided = await http.post("/sessions/w1/signals", json={"name": "go", "decision": True})
            assert decided.status_code == 200, decided.text
            # Past four eyes, to the act's own check: there is nothing to raise or retry.
            raised = await http.post("/sessions/a1/budget", json={"tokens": 10})
            assert raised.status_code == 409 and "four eyes" not in raised.json()["detail"]
            retried = await http.post(
                "/sessions/a1/compensations/t1", json={"action": "retry", "reason": "x"}
            )
            assert retried.status_code == 409 and "four eyes" not in retried.json()["detail"]
