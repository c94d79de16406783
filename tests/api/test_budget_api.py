"""Budgets over HTTP: a submission's budget, the session's view when its run stops at it
(``budget_exhausted``, needing action), and the raise that resumes it, allowed to a key
that may approve and to no other, and refused (409) while no run is stopped. Real API,
Brain and Hands processes."""

from __future__ import annotations

import pytest

from tests.helpers.agent_run import AgentRun, agent_run
from tests.helpers.api import key_for, start_api
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]
__all__ = ["agent_run"]  # the fixture


async def test_a_run_stopped_at_its_budget_shows_in_the_view_and_a_raise_resumes_it(
    agent_run: AgentRun,
) -> None:
    brains = agent_run.brains
    brains.start_brain(tasks=None, agents="tests.brain.budget_agents", **agent_run.extra)
    agent_run.start_hands()
    api = await start_api(brains)
    operator = await key_for(brains, "acme", "read", "submit", "tasks", "approve")
    submitter = await key_for(brains, "acme", "read", "submit", "tasks")

    async def declared() -> bool:
        return "frugal" in await brains.store.declarations.agents("v1")

    await eventually(declared, within=30, what="the Brain to declare its agents")
    async with api.http(operator) as http, api.http(submitter) as plain:
        bad = await http.post(
            "/sessions/s1/submissions",
            json={"text": "go", "agent": "frugal", "budget": {"tokens": -5}},
        )
        assert bad.status_code == 422, bad.text
        made = await plain.post(
            "/sessions/s1/submissions",
            json={"text": "go", "agent": "frugal", "request_id": "r1", "budget": {"tokens": 10**6}},
        )
        assert made.status_code == 200, made.text

        async def exhausted() -> bool:
            return (await http.get("/sessions/s1")).json()["status"] == "budget_exhausted"

        await eventually(exhausted, within=60, what="the view to say budget_exhausted")
        view = (await http.get("/sessions/s1")).json()
        assert view["needs_action"] is True
        stop = view["budget_exhausted"]
        assert stop["limit"] == "tool_calls"
        assert stop["budget"] == {"tool_calls": 1, "tokens": 10**6}  # the agent's and the body's
        assert view["usage"]["model_calls"] == 1 and view["operations"] == []
        listed = (await http.get("/sessions", params={"needs_action": "true"})).json()
        assert [s["id"] for s in listed["sessions"]] == ["s1"]  # the console's list shows it

        refused = await plain.post("/sessions/s1/budget", json={"tool_calls": 5})
        assert refused.status_code == 403, refused.text  # raising is an operator's act
        unknown = await http.post("/sessions/s1/budget", json={"turns": 5})
        assert unknown.status_code == 422, unknown.text
        raised = await http.post("/sessions/s1/budget", json={"tool_calls": 5, "raise_id": "x1"})
        assert (raised.status_code, raised.json()["created"]) == (200, True), raised.text
        again = await http.post("/sessions/s1/budget", json={"tool_calls": 5, "raise_id": "x1"})
        assert again.json()["created"] is False

        answered = await http.get("/sessions/s1/submissions/r1", params={"wait": 60})
        assert answered.json()["status"] == "answered", answered.text
        view = (await http.get("/sessions/s1")).json()
        assert (view["status"], view["budget_exhausted"], view["needs_action"]) == (
            "idle",
            None,
            False,
        )
        # No run is stopped: a raise is refused rather than kept for a later stop; the
        # retry of the one that was sent is still the same raise.
        late = await http.post("/sessions/s1/budget", json={"tool_calls": 50})
        assert late.status_code == 409, late.text
        assert late.json()["detail"] == "no run of this session is stopped at its budget"
        retried = await http.post("/sessions/s1/budget", json={"tool_calls": 5, "raise_id": "x1"})
        assert (retried.status_code, retried.json()["created"]) == (200, False), retried.text
    assert len((await agent_run.email.ledger())["sends"]) == 3
