"""An async client for the example email service (``brainhands.examples.notify.email_service``).

Every transport failure, 5xx and dropped connection becomes ``EmailServiceUnavailable``:
to a caller they all mean the same thing, "the email may or may not have been sent", and
the way to find out is ``lookup(key)`` or a retry of ``send`` with the same key.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx


class EmailServiceUnavailable(Exception):
    """The service failed or vanished mid-call; the email may or may not have been stored."""


class EmailRejected(Exception):
    """The service refused the request (4xx); retrying the same request will not help."""


class EmailClient:
    """Talks to one email service at ``base_url``, e.g. ``http://127.0.0.1:8025``.

    Each call opens its own short-lived connection, so a client needs no closing and can be
    created wherever a tool runs.
    """

    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    async def send(self, key: str, to: str, subject: str, body: str) -> str:
        """Send an email idempotently by ``key``; returns the receipt (the same on a repeat)."""
        answer = await self._call("POST", "/send", _email(key, to, subject, body))
        return str(answer["receipt"])

    async def send_unsafe(self, key: str, to: str, subject: str, body: str) -> str:
        """Send an email through the non-idempotent endpoint: every call is a new email."""
        answer = await self._call("POST", "/send-unsafe", _email(key, to, subject, body))
        return str(answer["receipt"])

    async def lookup(self, key: str) -> str | None:
        """The receipt of the email sent (idempotently) under ``key``, or None if none was."""
        answer = await self._call("GET", f"/sent/{quote(key, safe='')}")
        return str(answer["receipt"]) if answer["sent"] else None

    async def ledger(self) -> dict[str, Any]:
        """The service's whole ledger: sends, unsafe sends and call counts."""
        return await self._call("GET", "/ledger")

    async def set_faults(self, **faults: Any) -> dict[str, Any]:
        """Change injected faults (see ``email_service.Faults``); returns them all."""
        return await self._call("POST", "/faults", faults)

    async def _call(self, method: str, path: str, payload: Any = None) -> dict[str, Any]:
        url = self.base_url + path
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.request(method, url, json=payload)
        except httpx.TransportError as exc:
            # Includes the dropped connection: the request may have been stored, the receipt lost.
            raise EmailServiceUnavailable(f"{method} {url} failed: {exc!r}") from exc
        if response.status_code >= 500:
            raise EmailServiceUnavailable(
                f"{method} {url} answered {response.status_code}: {response.text}"
            )
        if response.status_code >= 400:
            raise EmailRejected(f"{method} {url} answered {response.status_code}: {response.text}")
        answer: dict[str, Any] = response.json()
        return answer


def _email(key: str, to: str, subject: str, body: str) -> dict[str, str]:
    return {"key": key, "to": to, "subject": subject, "body": body}
