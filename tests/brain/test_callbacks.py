"""Webhooks: a submission's end posted to its ``callback_url``, signed, at least once,
through a failing receiver and a Brain killed mid-run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from brainhands.brain.callbacks import BACKOFF_MAX, next_attempt_at, told_failure
from brainhands.shared.store import schema
from brainhands.shared.webhook_signing import signature_header, tenant_secret
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually
from tests.helpers.receivers import Receiver

SECRET = "webhook-secret-for-tests"
WEBHOOKS = {"BRAINHANDS_WEBHOOK_SECRET": SECRET, "BRAINHANDS_WEBHOOK_ALLOW": "127.0.0.1/32"}
"""A deployment that posts webhooks, and to loopback receivers too."""


def test_a_tenant_is_told_a_status_at_most() -> None:
    assert told_failure(500) == "delivery failed (HTTP status 500)"
    assert told_failure(None) == "delivery failed"


def test_deliveries_back_off_to_five_minutes() -> None:
    assert [next_attempt_at(n, 100.0) - 100.0 for n in (1, 2, 3)] == [2.0, 4.0, 8.0]
    assert next_attempt_at(30, 0.0) == BACKOFF_MAX


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(failures=1) as r:
        yield r


@pytest.mark.integration
@pytest.mark.timeout(120)
async def test_the_end_is_posted_once_it_is_known_through_a_kill_and_a_failing_receiver(
    brains: BrainHarness, receiver: Receiver
) -> None:
    # The Brain dies at its second commit, mid-run; the next one finishes the submission.
    victim = brains.start_brain(die_at_commit=2, **WEBHOOKS)
    async with brains.client(tenant="acme") as client:
        handle = await client.submit(
            "s1", {"kind": "steps", "input": {"x": 5}}, callback_url=receiver.url
        )
        assert await asyncio.to_thread(victim.wait, 30) != 0  # it died
        brains.start_brain(**WEBHOOKS)
        answer = await handle.result(timeout=60)

    await eventually(
        lambda: any(status == 200 for *_, status in receiver.posts),
        within=30,
        what="the webhook accepted",
    )
    # The receiver has the post before the sweeper has its answer and records it.
    submission = await brains.store.submissions.get("acme/s1", handle.request_id)

    async def recorded() -> bool:
        sub = schema.submission
        async with brains.store.backend.snapshot() as conn:
            done = await conn.scalar(
                select(sub.c.callback_done_at).where(sub.c.id == submission.id)
            )
        return done is not None

    await eventually(recorded, within=30, what="the accepted post recorded")
    sub = schema.submission
    async with brains.store.backend.snapshot() as conn:
        row = (await conn.execute(select(sub).where(sub.c.session_id == "acme/s1"))).one()
    assert row.callback_done_at is not None and row.callback_attempts == 2
    assert [status for *_, status in receiver.posts] == [503, 200]  # retried after a 503
    for headers, body, _ in receiver.posts:
        assert headers["Idempotency-Key"] == row.id  # the same post, to dedupe on
        stamp = int(headers["X-Brainhands-Signature"].split(",")[0].removeprefix("t="))
        acme = tenant_secret(SECRET.encode(), "acme", 0)
        assert headers["X-Brainhands-Signature"] == signature_header([acme], stamp, row.id, body)
        posted = json.loads(body)
        assert posted == {
            "tenant": "acme", "session_id": "s1", "request_id": handle.request_id,
            "status": "answered", "answer": answer, "error": None,
        }  # fmt: skip
