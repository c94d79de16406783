"""A tenant's budget over HTTP: set and read by an ``operator`` key only -- a tenant's own
keys, ``admin`` ones included, are refused (403) -- checked like every body (422), and
404 for a tenant without one; the HTTP client's methods speak the same routes. Real API
process on PostgreSQL."""

from __future__ import annotations

import pytest

from brainhands.client.http import HttpClient
from brainhands.shared.errors import InvalidRequest, NotFoundError
from tests.helpers.api import key_for, start_api
from tests.helpers.brains import BrainHarness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_only_an_operator_key_sets_or_reads_a_tenants_budget(brains: BrainHarness) -> None:
    api = await start_api(brains)
    operator = await key_for(brains, "ops", "operator")
    tenant_admin = await key_for(brains, "acme", "admin")
    async with api.http(operator) as http, api.http(tenant_admin) as own:
        for method in ("GET", "PUT"):
            refused = await own.request(method, "/tenants/acme/budget", json={"tokens": 10**9})
            assert refused.status_code == 403, refused.text
        assert (await http.get("/tenants/acme/budget")).status_code == 404
        for bad in ({}, {"seconds": 5}, {"tokens": -1}, {"tokens": None}):
            answer = await http.put("/tenants/acme/budget", json=bad)
            assert answer.status_code == 422, (bad, answer.text)
        # An encoded '/' would split the name into two: the API refuses it first.
        assert (await http.put("/tenants/a%2Fb/budget", json={"tokens": 1})).status_code == 400
        made = await http.put("/tenants/acme/budget", json={"tokens": 1000, "tool_calls": 5})
        assert made.status_code == 200, made.text
        body = made.json()
        assert body["limits"] == {"tokens": 1000, "tool_calls": 5} and body["resumed"] == 0
        assert body["used"] == {"tokens": 0, "cost": 0.0, "tool_calls": 0}
        assert body["set_by"].startswith("key:")
        read = (await http.get("/tenants/acme/budget")).json()
        assert read["limits"] == body["limits"] and read["resumed"] is None
        # The tenant's admin key still may everything within its tenant: not the budget.
        assert (await own.get("/sessions")).status_code == 200

    async with HttpClient(api.url, operator) as client:
        raised = await client.set_tenant_budget("acme", cost=2.5)
        assert raised["limits"] == {"cost": 2.5}  # a budget replaces the one before
        assert (await client.tenant_budget("acme"))["limits"] == {"cost": 2.5}
        with pytest.raises(NotFoundError):
            await client.tenant_budget("nobody")
        with pytest.raises(InvalidRequest):
            await client.set_tenant_budget("acme")
