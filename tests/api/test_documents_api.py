"""A session's documents as readers see them: the view's latest values, and over HTTP (for
the key's tenant only) and through both clients, a document's value with its history. Real
API and Brain processes."""

from __future__ import annotations

import jsonpatch
import pytest

from brainhands import HttpClient
from brainhands.shared.errors import NotFoundError
from tests.helpers.api import key_for, start_api
from tests.helpers.brains import BrainHarness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

STEPS = {"kind": "steps", "input": {"x": 1}}  # tests.helpers.kinds: appends to the ``log``


async def test_a_documents_value_and_history_for_its_tenant_only(brains: BrainHarness) -> None:
    brains.start_brain()
    api = await start_api(brains)
    acme = await key_for(brains, "acme", "read", "submit", "tasks")
    globex = await key_for(brains, "globex", "read", "submit", "tasks")
    async with api.http(acme) as http, api.http(globex) as other:
        body = {"input": STEPS, "request_id": "r1"}
        done = await http.post("/sessions/s1/submissions", params={"wait": 30}, json=body)
        assert done.json()["status"] == "answered", done.text

        got = await http.get("/sessions/s1/documents/log")
        assert got.status_code == 200, got.text
        doc = got.json()
        assert (doc["name"], doc["version"], doc["kind_version"]) == ("log", 2, None)
        assert doc["value"] == ["one", "two"]
        # Each write's patch, folded from nothing, gives each value the phases wrote.
        assert [h["version"] for h in doc["history"]] == [1, 2]
        first = jsonpatch.apply_patch(None, doc["history"][0]["patch"])
        assert first == ["one"]
        assert jsonpatch.apply_patch(first, doc["history"][1]["patch"]) == ["one", "two"]
        latest = (await http.get("/sessions/s1/documents/log", params={"history": 1})).json()
        assert [h["version"] for h in latest["history"]] == [2]

        view = (await http.get("/sessions/s1")).json()
        assert view["documents"]["log"]["body"] == ["one", "two"]
        assert view["documents"]["log"]["version"] == 2

        # Another tenant's key: its own s1 has no such document, and acme's is not reached.
        hidden = await other.get("/sessions/s1/documents/log")
        assert hidden.status_code == 404, hidden.text
        missing = await http.get("/sessions/s1/documents/nothing")
        assert missing.status_code == 404, missing.text

    async with HttpClient(api.url, acme) as client:
        over_http = await client.document("s1", "log")
        assert (over_http.document.version, over_http.document.body) == (2, ["one", "two"])
        assert [i.version for i in over_http.history] == [1, 2]
    async with brains.client(tenant="acme") as direct:
        found = await direct.document("s1", "log")
        assert (found.document.version, found.document.body) == (2, ["one", "two"])
        assert [i.version for i in found.history] == [1, 2]
        assert (await direct.session("s1")).documents["log"].body == ["one", "two"]
        with pytest.raises(NotFoundError):
            await direct.document("s1", "nothing")
