"""Server-sent events: the ``text/event-stream`` framing, and the response that streams it.

The response is Starlette's streaming response, which sends each frame as it comes with
nothing around the send: a thousand streams woken by one commit cost a thousand sends, not
a thousand cancel scopes as well. Keep-alives come from the streams' ``Watchers`` (one
timer for the process), not from a timer per stream.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, Callable

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

PING = b": ping\n\n"
"""A comment: keeps idle connections (and the proxies on their way) open."""
_LINES = re.compile(r"\r\n|\r|\n")


def frame(data: str, *, event: str | None = None, id: str | None = None) -> bytes:
    """One event; ``event`` and ``id`` are ours and hold no line break."""
    head = ""
    if id is not None:
        head += f"id: {id}\n"
    if event is not None:
        head += f"event: {event}\n"
    body = "".join(f"data: {line}\n" for line in _LINES.split(data))
    return f"{head}{body}\n".encode()


class EventStream(StreamingResponse):
    """A stream of ``frames``; ``release`` is called once it has ended, however it ends
    (its client gone, the server stopping, or never started)."""

    media_type = "text/event-stream"

    def __init__(
        self, frames: AsyncIterable[bytes], release: Callable[[], object] | None = None
    ) -> None:
        super().__init__(
            frames,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            media_type=self.media_type,
        )
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self._release is not None:
                self._release()
