"""Webhooks: a submission's end posted to its ``callback_url``, at least once.

The store decides: a submission that has ended, has a ``callback_url`` and no
``callback_done_at`` is due, whoever ended it and whatever died since. The active sweeper
posts what is due each sweep, and records the outcome: a 2xx marks it done; anything else
(an error status, a refused connection, a timeout) counts an attempt and sets the next one
after a backoff, until ``max_attempts``, after which it is given up with the last error.
A sweeper that dies after a post and before its record posts it again: the receiver dedupes
on ``Idempotency-Key`` (the submission's id).

What is posted, JSON: ``{"tenant", "session_id", "request_id", "status", "answer",
"error"}``, with ``X-Brainhands-Timestamp`` (epoch seconds) and ``X-Brainhands-Signature:
sha256=<hex>``, the HMAC-SHA256 under ``BRAINHANDS_WEBHOOK_SECRET`` of
``<timestamp>.<body>`` (``signature``): a receiver recomputes it and refuses an old
timestamp, so a captured post cannot be replayed later.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time

import httpx

from brainhands.shared.store import CallbackDue, Store
from brainhands.shared.tenancy import split_key

log = logging.getLogger("brainhands.callbacks")

BATCH = 50
"""Deliveries posted per sweep, at most (the next sweep takes the rest)."""
BACKOFF_MAX = 300.0


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Brainhands-Signature`` of a post: what a receiver recomputes to trust it."""
    digest = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def next_attempt_at(attempts: int, now: float) -> float:
    """When a delivery tried ``attempts`` times is tried again: 2, 4, 8 ... seconds after,
    at most five minutes."""
    return now + min(BACKOFF_MAX, 2.0**attempts)


class Callbacks:
    def __init__(
        self, store: Store, secret: bytes, *, max_attempts: int = 20, timeout: float = 10.0
    ) -> None:
        self.store = store
        self.secret = secret
        self.max_attempts = max_attempts
        self._http = httpx.AsyncClient(timeout=timeout, follow_redirects=False)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def deliver_due(self) -> int:
        """Post every delivery due now (up to ``BATCH``); returns how many were done."""
        due = await self.store.submissions.callbacks_due(time.time(), limit=BATCH)
        done = await asyncio.gather(*(self._deliver(d) for d in due))
        return sum(done)

    async def _deliver(self, due: CallbackDue) -> bool:
        tenant, session_id = split_key(due.session_id)
        body = json.dumps(
            {
                "tenant": tenant,
                "session_id": session_id,
                "request_id": due.request_id,
                "status": due.status,
                "answer": due.answer,
                "error": due.error,
            },
            separators=(",", ":"),
        ).encode()
        stamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": due.id,
            "X-Brainhands-Timestamp": stamp,
            "X-Brainhands-Signature": signature(self.secret, stamp, body),
        }
        try:
            response = await self._http.post(due.callback_url, content=body, headers=headers)
            failure = None if response.is_success else f"answered {response.status_code}"
        except httpx.HTTPError as exc:
            failure = f"{type(exc).__name__}: {exc}"
        attempts = due.callback_attempts + 1
        now = time.time()
        done_at = next_at = None
        if failure is None:
            done_at = now
        elif attempts >= self.max_attempts:
            done_at = now
            log.warning(
                "webhook given up after %d attempts: %s", attempts, failure,
                extra={"event": "callback_given_up", "submission_id": due.id},
            )  # fmt: skip
        else:
            next_at = next_attempt_at(attempts, now)
            log.info(
                "webhook failed (attempt %d), tried again later: %s", attempts, failure,
                extra={"event": "callback_failed", "submission_id": due.id},
            )  # fmt: skip
        await self.store.submissions.record_callback(
            due.id, attempts=attempts, error=failure, done_at=done_at, next_at=next_at
        )
        return failure is None
