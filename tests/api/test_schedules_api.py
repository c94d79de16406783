"""A tenant's schedules over HTTP: created, listed, read, paused, resumed and deleted with
the key's tenant's scopes; a bad cron expression, time zone or target refused with its
reason (422); another tenant's key neither sees nor touches them (404); the HTTP clients,
async and blocking, speak the same routes. Real API process on PostgreSQL."""

from __future__ import annotations

import asyncio
import time

import pytest

from brainhands.client.http import HttpClient, SyncHttpClient
from brainhands.shared.errors import DecisionRefused, InvalidRequest, NotFoundError
from tests.helpers.api import key_for, start_api
from tests.helpers.brains import BrainHarness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NIGHTLY = {
    "id": "nightly",
    "kind": "report",
    "input": {"scope": "all"},
    "cron": "0 3 * * *",
    "timezone": "Europe/Paris",
    "missed": "run_one",
}


async def test_a_tenant_keeps_its_schedules_and_no_other_tenant_reaches_them(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains)
    acme = await key_for(brains, "acme", "admin")
    reader = await key_for(brains, "acme", "read")
    agent_only = await key_for(brains, "acme", "read", "submit")
    globex = await key_for(brains, "globex", "admin")
    async with (
        api.http(acme) as http,
        api.http(reader) as read_only,
        api.http(agent_only) as agents,
        api.http(globex) as other,
    ):
        made = await http.post("/schedules", json=NIGHTLY)
        assert made.status_code == 201, made.text
        body = made.json()
        assert (body["tenant"], body["state"], body["timezone"]) == (
            "acme",
            "active",
            "Europe/Paris",
        )
        assert body["created_by"].startswith("key:") and body["next_tick_at"] > time.time()
        assert (await http.post("/schedules", json=NIGHTLY)).status_code == 409
        assert (await read_only.post("/schedules", json={**NIGHTLY, "id": "x"})).status_code == 403
        # A task kind's raw input needs 'tasks', as a submission's does; an agent's does not.
        assert (await agents.post("/schedules", json={**NIGHTLY, "id": "x"})).status_code == 403
        hourly = {"id": "hourly", "agent": "helper", "input": "status?", "every": 3600}
        assert (await agents.post("/schedules", json=hourly)).status_code == 201
        listed = (await read_only.get("/schedules")).json()
        assert [s["id"] for s in listed] == ["hourly", "nightly"]

        for bad, reason in (
            ({"cron": "0 25 * * *"}, "cron '0 25 * * *'"),
            ({"timezone": "Mars/Olympus"}, "timezone 'Mars/Olympus'"),
            ({"agent": "helper"}, "either an agent or a task kind"),
            ({"cron": None}, "either a cron expression or an interval"),
        ):
            refused = await http.post("/schedules", json={**NIGHTLY, "id": "bad", **bad})
            assert refused.status_code == 422, refused.text
            assert reason in refused.json()["detail"], refused.text
        assert (await http.post("/schedules", json={**NIGHTLY, "missed": "all"})).status_code == 422

        # Another tenant: nothing listed, nothing found, nothing paused or deleted.
        assert (await other.get("/schedules")).json() == []
        for method, path in (
            ("GET", "/schedules/nightly"),
            ("POST", "/schedules/nightly/pause"),
            ("POST", "/schedules/nightly/resume"),
            ("DELETE", "/schedules/nightly"),
        ):
            assert (await other.request(method, path)).status_code == 404, (method, path)

        paused = (await http.post("/schedules/nightly/pause")).json()
        assert paused["state"] == "paused"
        assert (await read_only.post("/schedules/nightly/resume")).status_code == 403
        resumed = (await http.post("/schedules/nightly/resume")).json()
        assert resumed["state"] == "active" and resumed["next_tick_at"] > time.time()
        assert (await http.delete("/schedules/nightly")).status_code == 204
        assert (await http.get("/schedules/nightly")).status_code == 404
        assert [s["id"] for s in (await http.get("/schedules")).json()] == ["hourly"]

    async with HttpClient(api.url, acme) as client:
        made_by_client = await client.create_schedule("beat", kind="report", every=60)
        assert (made_by_client.every, made_by_client.missed) == (60, "skip")
        assert (await client.pause_schedule("beat")).state == "paused"
        assert (await client.resume_schedule("beat")).state == "active"
        assert [s.id for s in await client.schedules()] == ["beat", "hourly"]
        with pytest.raises(InvalidRequest, match="every"):
            await client.create_schedule("zero", kind="report", every=0)
        with pytest.raises(DecisionRefused, match="exists already"):
            await client.create_schedule("beat", kind="report", every=60)
        await client.delete_schedule("beat")
        with pytest.raises(NotFoundError):
            await client.schedule("beat")

    def blocking() -> list[str]:
        with SyncHttpClient(api.url, acme) as sync:
            sync.create_schedule("daily", kind="report", cron="30 6 * * *", timezone="UTC")
            sync.pause_schedule("daily")
            seen = [f"{s.id}:{s.state}" for s in sync.schedules()]
            sync.delete_schedule("daily")
            return seen

    assert await asyncio.to_thread(blocking) == ["daily:paused", "hourly:active"]
