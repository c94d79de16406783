"""The API's routes for an operator's acts on a tenant (``brain.tenant_budget``): set its
budget, read it. Only a key with the ``operator`` scope may: a tenant's own keys, ``admin``
ones included, never set it nor read it here. (A run stopped at it shows, in its session's
view, the limit it reached and the tenant's usage then: why it stopped.)"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from brainhands.api.bodies import NAME, Closed, Count
from brainhands.api.guard import Guarded, acting, caller, needs
from brainhands.client.direct import Client
from brainhands.shared.vocabulary import TENANT_BUDGET_LIMITS

TenantName = Annotated[str, Path(pattern=NAME, max_length=64)]


def _names_a_limit(schema: dict[str, Any]) -> None:
    """What the route refuses, the document forbids: a budget names one limit at least, as
    a number (not null)."""
    schema["anyOf"] = [
        {"required": [limit], "properties": {limit: {"type": "number"}}}
        for limit in TENANT_BUDGET_LIMITS
    ]


class TenantBudgetBody(Closed):
    """A tenant's budget: what all its sessions' runs may spend together from when it was
    first set. It replaces the budget the tenant had."""

    model_config = ConfigDict(json_schema_extra=_names_a_limit)

    tokens: Count | None = None
    """Model tokens, input and output together."""
    cost: float | None = Field(default=None, ge=0)
    """Model cost, at each agent's prices."""
    tool_calls: Count | None = None


class TenantBudgetOut(BaseModel):
    tenant: str
    limits: dict[str, float]
    used: dict[str, float]
    """``tokens``, ``cost`` and ``tool_calls`` spent since the budget was first set."""
    set_by: str
    created_at: float
    updated_at: float
    resumed: int | None = None
    """When set: the tenant's runs stopped at its budget that this raise was sent to."""


def tenant_routes(client: Client) -> APIRouter:
    """``PUT`` and ``GET /tenants/{tenant}/budget``."""
    app = APIRouter(route_class=Guarded)

    @app.put("/tenants/{tenant}/budget", tags=["budgets"], openapi_extra=needs("operator"))
    async def set_tenant_budget(
        tenant: TenantName, body: TenantBudgetBody, request: Request
    ) -> TenantBudgetOut:
        """Set a tenant's budget (``operator`` keys only). It replaces the tenant's budget,
        what was spent is kept, and the tenant's runs stopped at it are sent the raise:
        each resumes, or stops again while the tenant is still over."""
        limits = body.model_dump(exclude_none=True)
        done = await client.set_tenant_budget(tenant, principal=acting(caller(request)), **limits)
        return TenantBudgetOut(**asdict(done.budget), resumed=done.resumed)

    @app.get("/tenants/{tenant}/budget", tags=["budgets"], openapi_extra=needs("operator"))
    async def tenant_budget(tenant: TenantName, request: Request) -> TenantBudgetOut:
        """A tenant's budget and what its runs have spent (``operator`` keys only); 404
        when it has none."""
        found = await client.tenant_budget(tenant)
        if found is None:
            raise HTTPException(404, f"tenant {tenant!r} has no budget")
        return TenantBudgetOut(**asdict(found))

    return app
