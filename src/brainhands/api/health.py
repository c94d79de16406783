"""The API's routes for whoever runs it: liveness, readiness, the process's metrics and, when
turned on, the OpenAPI document."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from brainhands.api.guard import Guarded, needs
from brainhands.client.direct import Client


def health_routes(client: Client, *, docs: bool) -> APIRouter:
    """``/healthz``, ``/readyz``, ``/metrics`` and, with ``docs``, ``/openapi.json``."""
    app = APIRouter(route_class=Guarded)

    @app.get("/healthz", response_class=PlainTextResponse, tags=["health"])
    async def healthz() -> str:
        return "ok"

    @app.get("/readyz", response_class=PlainTextResponse, tags=["health"])
    async def readyz() -> Response:
        ready = client.broker.connected and await client.store.ping()
        return PlainTextResponse("ready" if ready else "not ready", 200 if ready else 503)

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        tags=["health"],
        openapi_extra=needs("operator"),
    )
    async def metrics() -> Response:
        """The API process's Prometheus metrics, for an ``operator`` key: they count every
        tenant's requests, so no tenant's key reads them."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    if docs:

        @app.get("/openapi.json", include_in_schema=False, openapi_extra=needs("read"))
        async def openapi(request: Request) -> JSONResponse:
            """The OpenAPI document, for any key of the deployment."""
            return JSONResponse(request.app.openapi())

    return app
