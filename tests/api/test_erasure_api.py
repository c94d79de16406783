"""A session's erasure over HTTP and from the command line: an admin key of its tenant
erases it (what went, by table); a session with work open is refused (409) unless the
request cancels it; a read key may not (403), another tenant finds nothing (404); the
HTTP clients, async and blocking, say the same. Real API process on PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from brainhands.client.http import HttpClient, SyncHttpClient
from brainhands.shared.errors import NotFoundError, SessionRunning
from tests.helpers.api import key_for, start_api
from tests.helpers.brains import BrainHarness
from tests.helpers.submitting import submit_input

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_an_admin_erases_a_session_and_one_with_work_open_only_with_cancel(
    brains: BrainHarness,
) -> None:
    api = await start_api(brains)
    admin = await key_for(brains, "acme", "admin")
    reader = await key_for(brains, "acme", "read")
    globex = await key_for(brains, "globex", "admin")
    await brains.store.create_session("acme/done", compat="v1")
    # No Brain runs: its submission stays queued, work open.
    await submit_input(
        brains.store,
        brains.env.topology,
        session_id="acme/busy",
        request_id="r1",
        input={"text": "hello"},
        compat="v1",
    )
    async with api.http(admin) as http, api.http(reader) as read_only, api.http(globex) as other:
        assert (await read_only.delete("/sessions/done")).status_code == 403
        assert (await other.delete("/sessions/done")).status_code == 404
        refused = await http.delete("/sessions/busy")
        assert refused.status_code == 409
        assert refused.json()["title"] == "Session Running"
        assert "session busy has work open" in refused.json()["detail"]  # not "acme/busy"

        done = await http.delete("/sessions/done")
        assert done.status_code == 200, done.text
        assert done.json()["session_id"] == "done" and done.json()["rows"]["session"] == 1
        assert (await http.get("/sessions/done")).status_code == 404
        assert (await http.delete("/sessions/done")).status_code == 404

    async with HttpClient(api.url, admin) as client:
        with pytest.raises(SessionRunning, match="has work open"):
            await client.erase("busy")
        erased = await client.erase("busy", cancel=True)
        assert erased["rows"]["submission"] == 1
        with pytest.raises(NotFoundError):
            await client.erase("busy")
    [record] = await brains.store.erasures.records("acme/busy")
    assert record["principal"].startswith("key:") and record["reason"] == "erased"

    await brains.store.create_session("acme/again", compat="v1")
    with SyncHttpClient(api.url, admin) as blocking:
        erased = await asyncio.to_thread(blocking.erase, "again")
    assert erased["rows"]["session"] == 1
