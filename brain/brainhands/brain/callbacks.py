"""Webhooks: a submission's end posted to its ``callback_url``, at least once.

The store decides: a submission that has ended, has a ``callback_url`` and no
``callback_done_at`` is due, whoever ended it and whatever died since. The active sweeper
posts what is due each sweep, and records the outcome: a 2xx marks it done; anything else
(an error status, a refused connection, a timeout) counts an attempt and sets the next one
after a backoff, until ``max_attempts``, after which it is given up with the last error.
A sweeper that dies after a post and before its record posts it again: the receiver dedupes
on ``Idempotency-Key`` (the submission's id).

What is posted, JSON: ``{"tenant", "session_id", "request_id", "status", "answer",
"error"}``, signed with the tenant's own secret over a timestamp, the ``Idempotency-Key``
and the body (``shared.webhook_signing``): a receiver recomputes it and refuses an old
timestamp, so a captured post cannot be replayed later.

Posts go only to public addresses, or to those the operator allows: the host is resolved
and checked at each try, and the connection made to the checked address
(``webhook_transport``). What the tenant's view shows of a failure (``callback_error``) is
``delivery failed (HTTP status N)``, ``delivery failed`` (no HTTP answer: refused, reset,
timed out, not HTTP, alike) or ``refused destination`` (given up at once): never the
transport's error, which would tell a tenant what listens where. The operator's log has it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import httpx

from brainhands.brain.webhook_transport import PinnedTransport
from brainhands.shared.destinations import AllowList
from brainhands.shared.errors import RefusedDestination
from brainhands.shared.store import CallbackDue, Store, WebhookSecretState
from brainhands.shared.tenancy import split_key
from brainhands.shared.webhook_signing import SIGNATURE_HEADER, signature_header, tenant_secret

log = logging.getLogger("brainhands.callbacks")

BATCH = 50
"""Deliveries posted per sweep, at most (the next sweep takes the rest)."""
BACKOFF_MAX = 300.0


def next_attempt_at(attempts: int, now: float) -> float:
    """When a delivery tried ``attempts`` times is tried again: 2, 4, 8 ... seconds after,
    at most five minutes."""
    return now + min(BACKOFF_MAX, 2.0**attempts)


def told_failure(status: int | None) -> str:
    """What a tenant's view says of a failed post: its HTTP status, if it got one."""
    return "delivery failed" if status is None else f"delivery failed (HTTP status {status})"


class Callbacks:
    def __init__(
        self,
        store: Store,
        secret: bytes,
        allow: AllowList,
        *,
        max_attempts: int = 20,
        timeout: float = 10.0,
    ) -> None:
        self.store = store
        self.secret = secret
        """The deployment's key, from which each tenant's secret is derived."""
        self.max_attempts = max_attempts
        self._http = httpx.AsyncClient(
            transport=PinnedTransport(allow), timeout=timeout, follow_redirects=False
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def deliver_due(self) -> int:
        """Post every delivery due now (up to ``BATCH``); returns how many were done."""
        due = await self.store.submissions.callbacks_due(time.time(), limit=BATCH)
        if not due:
            return 0
        keys = await self.store.webhook_secrets.states(split_key(d.session_id)[0] for d in due)
        done = await asyncio.gather(*(self._deliver(d, keys) for d in due))
        return sum(done)

    async def _deliver(self, due: CallbackDue, keys: dict[str, WebhookSecretState]) -> bool:
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
        now = int(time.time())
        secrets = [tenant_secret(self.secret, tenant, g) for g in keys[tenant].generations(now)]
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": due.id,
            SIGNATURE_HEADER: signature_header(secrets, now, due.id, body),
        }
        refused = False
        try:
            response = await self._http.post(due.callback_url, content=body, headers=headers)
            failure = None if response.is_success else told_failure(response.status_code)
            cause = failure
        except RefusedDestination as exc:  # raised before anything is sent
            failure, cause, refused = RefusedDestination.TOLD, str(exc), True
        except httpx.HTTPError as exc:
            failure, cause = told_failure(None), f"{type(exc).__name__}: {exc}"
        attempts = due.callback_attempts + 1
        at = time.time()
        done_at = next_at = None
        if failure is None:
            done_at = at
        elif refused or attempts >= self.max_attempts:
            done_at = at
            log.warning(
                "webhook given up after %d attempts: %s", attempts, cause,
                extra={"event": "callback_given_up", "submission_id": due.id},
            )  # fmt: skip
        else:
            next_at = next_attempt_at(attempts, at)
            log.info(
                "webhook failed (attempt %d), tried again later: %s", attempts, cause,
                extra={"event": "callback_failed", "submission_id": due.id},
            )  # fmt: skip
        await self.store.submissions.record_callback(
            due.id, attempts=attempts, error=failure, done_at=done_at, next_at=next_at
        )
        return failure is None
