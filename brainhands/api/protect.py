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
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
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
DOCS = ("/docs", "/redoc")
"""Pages FastAPI serves with inline script: framed and sniffed as little, not under CSP."""


class SecurityHeaders:
    """Adds the headers above (and the CSP, but to the documentation pages) to every
    response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = list(HEADERS)
        if not scope["path"].startswith(DOCS):
            headers.append((b"content-security-policy", POLICY.encode()))

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *headers]
            await send(message)

        await self.app(scope, receive, with_headers)


def protect(app: FastAPI, settings: ApiSettings) -> None:
    """Install the headers, CORS (if origins are configured) and the Host allow-list."""
    app.add_middleware(SecurityHeaders)
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
    hosts = settings.allowed_hosts()
    if hosts != ["*"]:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts)
