"""An operator's act on a failed undo over HTTP: the session's view and the list show it
(``requires_action``, needing action), the act is an operator's (a key that may approve),
of the key's tenant only (404 to another), refused (409) while nothing waits for it, and
counted once. A real API process; the trip's Brain passes run in-process against the same
store, the test standing in for Hands (``tests.brain.test_undo_acts``)."""

from __future__ import annotations

import asyncio

import pytest

from brainhands.client.http import HttpClient, SyncHttpClient
from brainhands.shared.errors import DecisionRefused
from tests.brain.test_undo_acts import Trip
from tests.helpers.api import key_for, start_api
from tests.helpers.brains import BrainHarness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_a_failed_undo_is_retried_over_http_once_by_an_operator_of_its_tenant(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains)
    operator = await key_for(brains, "acme", "read", "submit", "tasks", "approve")
    reader = await key_for(brains, "acme", "read", "submit", "tasks")
    stranger = await key_for(brains, "other", "read", "submit", "tasks", "approve")
    trip = Trip(brains.store, "acme/trip-1")
    root, hotel = await trip.stuck()
    path = f"/sessions/trip-1/compensations/{root.id}"
    act = {"action": "retry", "reason": "the service is back", "action_id": "x1"}

    async with api.http(operator) as http, api.http(reader) as plain, api.http(stranger) as other:
        view = (await http.get("/sessions/trip-1")).json()
        assert (view["status"], view["needs_action"]) == ("requires_action", True)
        [stop] = view["compensations"]
        assert stop["task_id"] == root.id and stop["retryable"] is True
        assert [e["task_id"] for e in stop["not_compensated"]] == [hotel.task_id]
        listed = (await http.get("/sessions", params={"needs_action": "true"})).json()
        assert [s["id"] for s in listed["sessions"]] == ["trip-1"]

        assert (await other.post(path, json=act)).status_code == 404  # another tenant's
        assert (await plain.post(path, json=act)).status_code == 403  # not an operator
        bad = await http.post(path, json={**act, "action": "skip"})
        assert bad.status_code == 422, bad.text
        nothing = await http.post("/sessions/trip-1/compensations/t-none", json=act)
        assert nothing.status_code == 409, nothing.text

        async with HttpClient(api.url, operator) as client:
            assert await client.act_on_compensation(
                "trip-1", root.id, "retry", reason="the service is back", action_id="x1"
            )
        again = await http.post(path, json=act)
        assert (again.status_code, again.json()["created"]) == (200, False), again.text

        await trip.passes()
        retried = await trip.hands.run_one()
        assert retried.operation_id.endswith("/compensate/retry-1")
        await trip.passes()
        await trip.hands.run_one()  # the hotel's cancellation
        await trip.passes()

        view = (await http.get("/sessions/trip-1")).json()
        assert (view["status"], view["needs_action"], view["compensations"]) == (
            "idle",
            False,
            [],
        )
        [ended] = [t for t in view["tasks"] if t["id"] == root.id]
        assert ended["error"]["compensation"]["status"] == "compensated"
        assert ended["error"]["compensation"]["retried"][0]["by"].startswith("key:")
        late = await http.post(path, json={**act, "action_id": "x2"})
        assert late.status_code == 409, late.text

    def abandon_late() -> None:
        with SyncHttpClient(api.url, operator) as sync:
            sync.act_on_compensation("trip-1", root.id, "abandon", reason="too late")

    with pytest.raises(DecisionRefused, match="not waiting"):
        await asyncio.to_thread(abandon_late)
