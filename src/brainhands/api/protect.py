"""What the API tells browsers, and whom it answers: security headers on every response,
the origins allowed to call it from a page (CORS, opt-in), and the ``Host`` names served.

The console is a page of the API's own origin, with no inline script or style, so a
strict Content Security Policy costs it nothing and keeps a page that injects markup into
a session's text from running anything. ``frame-ancestors 'none'`` keeps the console out
of other sites' frames (clickjacking an approval). A ``Host`` allow-list, on by default
with authentication off, keeps a web page elsewhere from driving a loopback API through a
DNS name rebound to 127.0.0.1.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from brainhands.api.settings import ApiSettings

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class Protect:
    """Answers a request for a ``Host`` not served, or whose path holds an encoded ``/``,
    with a problem (400), and adds the headers above and the CSP to every response."""

    def __init__(self, app: ASGIApp, hosts: list[str]) -> None:
        self.app = app
        self.hosts = None if "*" in hosts else {h.lower() for h in hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = [*HEADERS, (b"content-security-policy", POLICY.encode())]

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *headers]
            await send(message)

        host = _host(scope)
        detail = None
        if self.hosts is not None and host not in self.hosts:
            detail = f"this API does not serve the host {host!r} (BRAINHANDS_API_ALLOWED_HOSTS)"
        elif b"%2f" in scope.get("raw_path", b"").lower():
            # Routes match the decoded path: an encoded '/' would split an id into others.
            detail = "a path segment holds an encoded '/', which no id or name may"
        if detail is not None:
            body = {"type": "about:blank", "title": "Bad Request", "status": 400, "detail": detail}
            refused = JSONResponse(body, status_code=400, media_type="application/problem+json")
            await refused(scope, receive, with_headers)
            return
        await self.app(scope, receive, with_headers)


def _host(scope: Scope) -> str:
    """The request's ``Host`` without its port (``[::1]:8080`` is ``::1``)."""
    raw = Headers(scope=scope).get("host", "").lower()
    if raw.startswith("["):
        return raw[1:].partition("]")[0]
    return raw.rpartition(":")[0] if raw.count(":") == 1 else raw


def protect(app: FastAPI, settings: ApiSettings) -> None:
    """Install the Host allow-list and the headers, and CORS if origins are configured."""
    origins = settings.cors_origins()
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
            expose_headers=["Retry-After"],
            max_age=600,
        )
    app.add_middleware(Protect, hosts=settings.allowed_hosts())
