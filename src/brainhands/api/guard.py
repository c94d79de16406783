"""What every route checks before its own work: the caller's key and scope, and that the
query gives each parameter the route takes at most once (others are ignored: a browser's
cache-buster ``?_=123`` is no error).

Both are done by the route class (``Guarded``), once per request and before FastAPI reads
the route's own parameters, rather than as FastAPI dependencies: solving two levels of
dependencies cost each request about half as much as the store read of a submission's
status. A route states the scope it needs in its OpenAPI extension (``openapi_extra=
needs("read")``), where clients see it, and takes the caller with ``caller(request)``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from brainhands.api.keys import Principal, Scope, VerifiedKeys
from brainhands.shared.tenancy import DEFAULT_TENANT

DEV = Principal(key_id="-", tenant=DEFAULT_TENANT, name="dev", scopes=frozenset({"admin"}))
"""Who every request acts for when authentication is off: the default tenant, whose
sessions the CLI and the Python client make unless told otherwise."""

SCHEME = "apiKey"
SCOPE = "x-scope"
TOKENS = "x-stream-token"


def needs(scope: Scope, *, stream_token: bool = False) -> dict[str, Any]:
    """A route's ``openapi_extra``: it needs a key with ``scope`` (or, with
    ``stream_token``, a stream token in ``?token=``)."""
    extra: dict[str, Any] = {SCOPE: scope, "security": [{SCHEME: []}]}
    if stream_token:
        extra[TOKENS] = True
    return extra


def caller(request: Request) -> Principal:
    """Who a guarded route's request acts for."""
    principal: Principal = request.state.principal
    return principal


class Guarded(APIRoute):
    """A route that refuses a query giving one of its parameters twice and, if it needs a
    scope, a request without a key that has it (401 without a valid key, 403 without the
    scope)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        scope: Scope | None = (self.openapi_extra or {}).get(SCOPE)
        tokens = bool((self.openapi_extra or {}).get(TOKENS))
        known = {p.alias for p in self.dependant.query_params}
        for sub in self.dependant.dependencies:
            known |= {p.alias for p in sub.query_params}

        async def guarded(request: Request) -> Response:
            if scope is not None:
                request.state.principal = await _authenticate(request, scope, tokens)
            if request.scope["query_string"]:
                query = request.query_params
                twice = sorted(n for n in known & set(query) if len(query.getlist(n)) > 1)
                if twice:
                    raise RequestValidationError(
                        [{"loc": ("query", name), "msg": "Given more than once",
                          "type": "repeated"} for name in twice]
                    )  # fmt: skip
            return await handler(request)

        return guarded


async def _authenticate(request: Request, scope: Scope, tokens: bool) -> Principal:
    if request.app.state.settings.api_auth == "none":
        return DEV
    header = request.headers.get("authorization", "")
    if not header and tokens and "token" in request.query_params:
        return await _token_holder(request, request.query_params["token"])
    kind, _, credentials = header.partition(" ")
    if kind.lower() != "bearer" or not credentials:
        raise HTTPException(401, "an API key is needed: Authorization: Bearer bh_...")
    keys: VerifiedKeys = request.app.state.keys
    found = await keys.verify(credentials.strip())
    if found is None:
        raise HTTPException(401, "the API key is malformed, unknown or revoked")
    if not found.may(scope):
        raise HTTPException(403, f"this API key lacks the {scope!r} scope")
    request.app.state.quotas.take(found.key_id)
    return found


async def _token_holder(request: Request, token: str) -> Principal:
    """Who a stream token acts for: its key, for reading only, and for its one session if
    it names one."""
    claims = request.app.state.stream_tokens.read(token)
    if claims is None:
        raise HTTPException(401, "the stream token is malformed, expired or not this API's")
    keys: VerifiedKeys = request.app.state.keys
    found = await keys.active(claims.key_id)
    if found is None:
        raise HTTPException(401, "the stream token's API key is revoked")
    wanted = request.scope.get("path_params", {}).get("session_id")
    if claims.session_id is not None and wanted != claims.session_id:
        raise HTTPException(403, "this stream token is for another session's events")
    if not found.may("read"):
        raise HTTPException(403, "this API key lacks the 'read' scope")
    request.app.state.quotas.take(found.key_id)
    return replace(found, scopes=frozenset({"read"}))


def document_keys(app: FastAPI) -> None:
    """Name the key scheme the guarded routes' ``security`` refers to in the app's OpenAPI
    document."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = plain()  # kept by FastAPI as app.openapi_schema
        doc.setdefault("components", {})["securitySchemes"] = {
            SCHEME: {"type": "http", "scheme": "bearer", "description": "bh_<id>_<secret>"}
        }
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
