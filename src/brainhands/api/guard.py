"""What every route checks before its own work: the caller's key and scope, that the
query gives each parameter the route takes at most once (others are ignored: a browser's
cache-buster ``?_=123`` is no error), and that a JSON body holds nothing the store could
keep but no view could show again (``shared/storable.py``).

Requests without a valid key are counted per client address (429 past the rate a key
gets), so that guessing keys or tokens costs what any other request does. With
authentication off, a write from another site's page (``Origin`` or ``Sec-Fetch-Site``)
is refused: a loopback API with no keys must not be a form any web page can post to; and
what no tenant may do (the ``operator`` scope) still needs a key.

Both are done by the route class (``Guarded``), once per request and before FastAPI reads
the route's own parameters, rather than as FastAPI dependencies: solving two levels of
dependencies cost each request about half as much as the store read of a submission's
status. A route states the scope it needs in its OpenAPI extension (``openapi_extra=
needs("read")``), where clients see it, and takes the caller with ``caller(request)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, NoReturn

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from brainhands.api.keys import Principal, Scope, VerifiedKeys
from brainhands.shared.errors import InvalidRequest
from brainhands.shared.storable import loads_storable
from brainhands.shared.tenancy import DEFAULT_TENANT

DEV = Principal(key_id="-", tenant=DEFAULT_TENANT, name="dev", scopes=frozenset({"admin"}))
"""Who every request acts for when authentication is off: the default tenant, whose
sessions the CLI and the Python client make unless told otherwise."""

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
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


def acting(who: Principal) -> str:
    """What a key's acts are recorded as."""
    return f"key:{who.key_id}" if who is not DEV else "dev"


class Guarded(APIRoute):
    """A route that refuses a query giving one of its parameters twice, a JSON body no view
    could show again (422 naming the limit) and, if it needs a scope, a request without a
    key that has it (401 without a valid key, 403 without the scope)."""

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
            if request.method not in SAFE_METHODS:
                await _check_body(request)
            return await handler(request)

        return guarded


async def _authenticate(request: Request, scope: Scope, tokens: bool) -> Principal:
    if request.app.state.settings.api_auth == "none":
        if request.method not in SAFE_METHODS and _cross_site(request):
            raise HTTPException(
                403, "a write from another site's page is refused (authentication is off)"
            )
        if DEV.may(scope):
            return DEV
    header = request.headers.get("authorization", "")
    if not header and tokens and "token" in request.query_params:
        return await _token_holder(request, request.query_params["token"])
    kind, _, credentials = header.partition(" ")
    if kind.lower() != "bearer" or not credentials:
        _unauthenticated(request, "an API key is needed: Authorization: Bearer bh_...")
    keys: VerifiedKeys = request.app.state.keys
    found = await keys.verify(credentials.strip())
    if found is None:
        _unauthenticated(request, "the API key is malformed, unknown or revoked")
    if not found.may(scope):
        raise HTTPException(403, f"this API key lacks the {scope!r} scope")
    request.app.state.quotas.take(found.key_id)
    return found


def _unauthenticated(request: Request, detail: str) -> NoReturn:
    """401, counted against the client's address (429 once it is over the rate)."""
    address = request.client.host if request.client else "-"
    request.app.state.quotas.take(f"address:{address}")
    raise HTTPException(401, detail)


def _cross_site(request: Request) -> bool:
    """Whether a browser sent this from a page of another origin than the API's own or a
    configured one (a browser says so in ``Sec-Fetch-Site`` or ``Origin``)."""
    origin = request.headers.get("origin")
    if origin is not None and origin in request.app.state.settings.cors_origins():
        return False
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return True
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    return origin is not None and origin != own


async def _check_body(request: Request) -> None:
    """422 naming the limit for a JSON body ``loads_storable`` refuses; a body that is not
    JSON at all is left to the route, which says so."""
    raw = await request.body()
    if not raw:
        return
    try:
        loads_storable(raw, "body")
    except InvalidRequest:
        raise
    except ValueError:
        return


async def _token_holder(request: Request, token: str) -> Principal:
    """Who a stream token acts for: its key, for reading only, and for its one session if
    it names one."""
    claims = request.app.state.stream_tokens.read(token)
    if claims is None:
        _unauthenticated(request, "the stream token is malformed, expired or not this API's")
    keys: VerifiedKeys = request.app.state.keys
    found = await keys.active(claims.key_id)
    if found is None:
        _unauthenticated(request, "the stream token's API key is revoked")
    wanted = request.scope.get("path_params", {}).get("session_id")
    if claims.session_id is not None and wanted != claims.session_id:
        raise HTTPException(403, "this stream token is for another session's events")
    if not found.may("read"):
        raise HTTPException(403, "this API key lacks the 'read' scope")
    request.app.state.quotas.take(found.key_id)
    return replace(found, scopes=frozenset({"read"}), expires_at=claims.expires_at)


async def still_valid(keys: VerifiedKeys, who: Principal) -> bool:
    """Whether the credential ``who`` was read from still holds: its key is active and, for
    a stream token, it has not expired (an open stream ends when it does not)."""
    if who is DEV:
        return True
    if who.expires_at is not None and who.expires_at <= time.time():
        return False
    return await keys.active(who.key_id) is not None


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
