"""Booking tools on the email service's idempotent ledger (at ``TEST_EMAIL_URL``): a booking
is a send under its operation id to ``{trip}:{item}``, its cancellation a send under the
undo's own operation id to the booking's key, so the ledger shows what was booked and what
was undone, and how many times.

``BOOKING_KILL_AFTER_CANCEL`` (a file path): the first cancellation to reach the ledger
SIGKILLs its own Hands process right after, before its outcome is recorded (the file marks
that it happened, so the Hands restarted run it again and live).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from brainhands.examples.notify.email_client import EmailClient, EmailServiceUnavailable
from brainhands.hands import RetryPolicy, ToolContext, ToolError, tool

RETRY = RetryPolicy(max_attempts=4, initial_delay=0.2, multiplier=2, max_delay=1)


class Booking(BaseModel):
    trip: str
    item: str
    fail: bool = False


class Cancellation(BaseModel):
    booking: str
    item: str


def _client() -> EmailClient:
    return EmailClient(os.environ["TEST_EMAIL_URL"], timeout=5.0)


async def _send(key: str, to: str, subject: str) -> str:
    try:
        return await _client().send(key, to, subject, subject)
    except EmailServiceUnavailable as exc:
        raise ToolError(str(exc), retryable=True) from exc


@tool(pool="email", policy="safe", retry=RETRY)
async def book(args: Booking, ctx: ToolContext) -> dict[str, Any]:
    """Book an item of a trip; ``fail``: it is sold out (nothing is booked)."""
    if args.fail:
        raise ToolError(f"{args.item} sold out", retryable=False)
    receipt = await _send(ctx.operation_id, f"{args.trip}:{args.item}", "book")
    return {"key": ctx.operation_id, "receipt": receipt}


@tool(pool="email", policy="safe", retry=RETRY)
async def cancel_booking(args: Cancellation, ctx: ToolContext) -> dict[str, Any]:
    """Cancel the booking made under key ``booking``."""
    if args.item == "refuse":
        raise ToolError("this booking cannot be cancelled", retryable=False)
    receipt = await _send(ctx.operation_id, args.booking, "cancel")
    marker = os.environ.get("BOOKING_KILL_AFTER_CANCEL")
    if marker and _first_time(Path(marker), ctx.operation_id):
        os.kill(os.getpid(), signal.SIGKILL)  # the cancellation happened; nothing recorded
    return {"cancelled": args.booking, "receipt": receipt}


def _first_time(marker: Path, operation_id: str) -> bool:
    """Whether the marker is new (it is made now): the kill happens once per test."""
    try:
        with marker.open("x") as out:
            out.write(operation_id)
    except FileExistsError:
        return False
    return True
