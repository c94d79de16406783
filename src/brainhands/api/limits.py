"""A request body larger than the configured limit is refused (413) before it is read.

A body sent in chunks, with no ``Content-Length``, is counted as it arrives: the chunk
that passes the limit raises ``TooLarge``, an HTTP error (413) the route's body reading
lets through, so that it is answered as the limit and not as a body it could not parse.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """ASGI middleware: at most ``limit`` bytes of request body, by ``Content-Length`` or,
    for a streamed body, as it arrives."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise TooLarge(self.limit)
            return message

        try:
            await self.app(scope, counted, send)
        except TooLarge:  # read outside a route (which answers it as a problem itself)
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body: dict[str, Any] = {
            "type": "about:blank",
            "title": "Payload Too Large",
            "status": 413,
            "detail": too_large(self.limit),
        }
        raw = json.dumps(body).encode()
        headers = [
            (b"content-type", b"application/problem+json"),
            (b"content-length", str(len(raw)).encode()),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


def too_large(limit: int) -> str:
    return f"the request body is larger than {limit} bytes (BRAINHANDS_API_MAX_BODY)"


class TooLarge(HTTPException):
    """The body outgrew the limit while it was read."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, too_large(limit))
