"""``brainhands.HttpClient`` against a real ``brainhands api`` in front of real Brains: an
application with an API key and no store or broker credentials."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from brainhands import (
    AnswerTimeout,
    ApiError,
    Decision,
    DecisionRefused,
    HttpClient,
    InvalidRequest,
    NotFoundError,
    PendingApproval,
    SessionView,
    SubmissionFailed,
    SyncHttpClient,
)
from brainhands.client.http import _path
from tests.helpers.agent_run import AgentRun, agent_run
from tests.helpers.api import key_for, start_api
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]
__all__ = ["agent_run"]  # the fixture

STEPS = {"kind": "steps", "input": {"x": 1}}


async def test_submit_wait_read_and_follow_a_session_over_http(brains: BrainHarness) -> None:
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks", "signal")
    async with HttpClient(api.url, key) as client:
        handle = await client.submit("s1", STEPS, request_id="r1")
        assert handle.created and (await handle.status()).status == "queued"
        with pytest.raises(AnswerTimeout):
            await handle.result(timeout=0.5)  # no Brain runs yet
        brains.start_brain()
        assert (await handle.result(timeout=60))["input"] == {"x": 1}
        again = await client.submit("s1", STEPS, request_id="r1")
        assert not again.created and (await again.result(timeout=5))["input"] == {"x": 1}

        view = await client.session("s1")
        assert isinstance(view, SessionView)  # the typed view Client gives, named as acme does
        assert (view.session.id, view.session.tenant, view.status) == ("s1", "acme", "idle")
        assert [s.request_id for s in view.submissions] == ["r1"]
        for n in range(2, 5):
            await (await client.submit(f"s{n}", STEPS)).result(timeout=60)
        # Page after page, over sessions that no longer change: a session a Brain commits
        # while the pages are read moves to the front, after the pages that passed it.
        listed = [s["id"] async for s in client.sessions(limit=2)]
        assert sorted(listed) == ["s1", "s2", "s3", "s4"]

        # The stream resumes after the last view seen: nothing repeated, nothing missed.
        events = client.stream("s1")
        first = await anext(events)
        assert first.event == "view" and first.id == str(view.session.version)
        await events.aclose()
        later = client.stream("s1", last_event_id=first.id)
        resumed = asyncio.ensure_future(anext(later))
        await asyncio.sleep(0.5)
        assert not resumed.done()  # nothing new: nothing sent again
        await client.submit("s1", STEPS, request_id="r2")
        newer = await asyncio.wait_for(resumed, 30)
        assert newer.event == "view" and int(newer.id or 0) > int(first.id or 0)
        await later.aclose()

        with pytest.raises(NotFoundError, match="session nobody does not exist"):
            await client.session("nobody")
        assert await client.signal("s1", "go", {"n": 1}, signal_id="g1")
        assert not await client.signal("s1", "go", {"n": 1}, signal_id="g1")  # counted once
        with pytest.raises(ApiError) as refused:
            await client.signal("s1", "go", decision=True)
        assert refused.value.status == 403


async def test_cancel_and_decide_over_http(agent_run: AgentRun) -> None:
    brains = agent_run.brains
    agent_run.start_brain(tasks="tests.helpers.kinds")
    agent_run.start_hands()
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks", "approve")
    async with HttpClient(api.url, key) as client:
        asked = await client.submit("s1", "please do the errand", agent="guarded")

        async def two_pending() -> bool:
            return len(await client.pending_approvals("s1")) == 2

        await eventually(two_pending, within=60, what="two calls waiting for approval")
        ana, bo = sorted(await client.pending_approvals(), key=lambda a: a.arguments["to"])
        assert isinstance(ana, PendingApproval) and ana.session_id == "s1"
        [approved] = await client.approve("s1", ana.approval_id, by="ops")
        [denied] = await client.deny("s1", [bo.approval_id], reason="no")
        assert isinstance(approved, Decision)
        assert (approved.verdict, denied.verdict) == ("approved", "denied")
        assert approved.principal == f"key:{key.split('_')[1]}"
        with pytest.raises(DecisionRefused, match="already denied"):
            await client.approve("s1", bo.approval_id)
        assert await asked.result(timeout=60)

        slow = await client.submit("s2", {"kind": "napper", "input": {"seconds": 30}})
        assert await slow.cancel() in {"requested", "cancelled"}
        with pytest.raises(SubmissionFailed) as ended:
            await slow.result(timeout=60)
        assert ended.value.record.status == "cancelled"


async def test_code_that_is_not_async_uses_the_blocking_client(brains: BrainHarness) -> None:
    brains.start_brain()
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks")

    def application() -> tuple[Any, Any, list[str], bool]:
        """What a script without an event loop writes."""
        with SyncHttpClient(api.url, key) as client:
            handle = client.submit("s1", STEPS, request_id="r1")
            answer = handle.result(timeout=60)
            view = client.session("s1")
            listed = [s["id"] for s in client.sessions()]
            try:
                client.session("nobody")
            except NotFoundError:
                missing = True
            else:
                missing = False
        return answer, view, listed, missing

    answer, view, listed, missing = await asyncio.to_thread(application)
    assert answer["input"] == {"x": 1}
    assert [s.status for s in view.submissions] == ["answered"]
    assert listed == ["s1"] and missing


@pytest.mark.parametrize(
    ("segments", "path"),
    [
        (("sessions", "s1"), "/sessions/s1"),
        (
            ("sessions", "a/../../approvals?session_id=x"),
            "/sessions/a%2F..%2F..%2Fapprovals%3Fsession_id%3Dx",
        ),
        (("sessions", "..", "events"), "/sessions/%2E%2E/events"),
        (("sessions", ".", "budget"), "/sessions/%2E/budget"),
        (("sessions", "x#frag", "é 100%"), "/sessions/x%23frag/%C3%A9%20100%25"),
    ],
)
def test_every_id_is_one_encoded_path_segment(segments: tuple[str, ...], path: str) -> None:
    assert _path(*segments) == path


def _deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("payload", [float("nan"), {"x": float("inf")}, "\ud800", _deep(70)])
async def test_a_payload_no_view_could_show_is_refused_before_it_is_sent(payload: Any) -> None:
    # Nothing listens there: a request sent would fail otherwise.
    async with HttpClient("http://127.0.0.1:9", "bh_x_y") as client:
        with pytest.raises(InvalidRequest, match=r"^body\.payload"):
            await client.signal("s1", "go", payload)
