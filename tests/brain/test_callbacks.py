"""Webhooks: a submission's end posted to its ``callback_url``, signed, at least once,
through a failing receiver and a Brain killed mid-run."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy import select

from brainhands.brain.callbacks import BACKOFF_MAX, next_attempt_at, signature
from brainhands.shared.store import schema
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually

SECRET = "webhook-secret-for-tests"


def test_a_post_is_signed_over_its_timestamp_and_body() -> None:
    body = b'{"status":"answered"}'
    signed = signature(b"k", "1700000000", body)
    assert signed.startswith("sha256=") and len(signed) == 7 + 64
    assert signature(b"k", "1700000000", body) == signed  # a receiver recomputes it
    for other in (
        signature(b"other", "1700000000", body),
        signature(b"k", "1700000001", body),  # a replay with a new timestamp
        signature(b"k", "1700000000", body + b" "),
    ):
        assert other != signed


def test_deliveries_back_off_to_five_minutes() -> None:
    assert [next_attempt_at(n, 100.0) - 100.0 for n in (1, 2, 3)] == [2.0, 4.0, 8.0]
    assert next_attempt_at(30, 0.0) == BACKOFF_MAX


class Receiver:
    """A loopback HTTP receiver that answers 503 to the first ``failures`` posts."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.posts: list[tuple[dict[str, str], bytes, int]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = 503 if len(receiver.posts) < receiver.failures else 200
                receiver.posts.append((dict(self.headers), body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


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
    victim = brains.start_brain(die_at_commit=2, BRAINHANDS_WEBHOOK_SECRET=SECRET)
    async with brains.client(tenant="acme") as client:
        handle = await client.submit(
            "s1", {"kind": "steps", "input": {"x": 5}}, callback_url=receiver.url
        )
        assert await asyncio.to_thread(victim.wait, 30) != 0  # it died
        brains.start_brain(BRAINHANDS_WEBHOOK_SECRET=SECRET)
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
        stamp = headers["X-Brainhands-Timestamp"]
        assert headers["X-Brainhands-Signature"] == signature(SECRET.encode(), stamp, body)
        posted = json.loads(body)
        assert posted == {
            "tenant": "acme", "session_id": "s1", "request_id": handle.request_id,
            "status": "answered", "answer": answer, "error": None,
        }  # fmt: skip
