"""The notify example's tools: sending one email through the email service.

The service accepts a send under a key and can be asked about that key later, so
``send_email`` is declared with the ``query`` policy: after a crash mid-call, Hands ask
the service whether the email went out instead of sending it again. ``send_email_unsafe``
uses an endpoint that cannot be asked and does not dedupe: the runtime never repeats it on
its own and records ``uncertain`` when it cannot know.

With ``NOTIFY_APPROVE`` set (``brainhands demo --approve``) both sends are declared to need
approval: a send is dispatched only under one, wherever it is made -- by the agent's batch,
which its approver approved as a whole, or by a ``notice-batch`` submitted directly, whose
every send then waits for its own.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, Field

from brainhands.examples.notify.email_client import (
    EmailClient,
    EmailRejected,
    EmailServiceUnavailable,
)
from brainhands.hands import QueryAnswer, RetryPolicy, ToolContext, ToolError, tool


class Email(BaseModel):
    """One email to one recipient, under the key the service dedupes on."""

    key: str = Field(description="idempotency key: one per (batch, recipient)")
    to: str = Field(description="recipient address")
    subject: str
    body: str


class Lookup(BaseModel):
    key: str = Field(description="the key the email was sent under")


APPROVAL = bool(os.environ.get("NOTIFY_APPROVE"))
"""The sends need approval (``brainhands demo --approve``)."""


def service() -> EmailClient:
    return EmailClient(os.environ.get("NOTIFY_EMAIL_URL", "http://127.0.0.1:8025"), timeout=10)


class ReceiptLost(ToolError):
    """The service may have accepted the email, but its answer never arrived."""


async def was_sent(args: Email, ctx: ToolContext) -> QueryAnswer:
    receipt = await service().lookup(args.key)
    return QueryAnswer(receipt is not None, {"receipt": receipt, "via": "query"})


@tool(
    pool="email",
    policy="query",
    query=was_sent,
    timeout=30,
    retry=RetryPolicy(max_attempts=5, initial_delay=0.2, max_delay=2),
    approval=APPROVAL,
)
async def send_email(args: Email, ctx: ToolContext) -> dict[str, Any]:
    """Send one email; the service dedupes on its key."""
    try:
        receipt = await service().send(args.key, args.to, args.subject, args.body)
    except EmailRejected as exc:
        raise ToolError(str(exc)) from exc
    except EmailServiceUnavailable as exc:
        # Not retried here: the send may have landed. The task asks the service later.
        raise ReceiptLost(f"no receipt: {exc}") from exc
    return {"receipt": receipt, "via": "call", "attempt": ctx.attempt}


@tool(pool="email", policy="safe", timeout=15, retry=RetryPolicy(max_attempts=5))
async def lookup_email(args: Lookup, ctx: ToolContext) -> dict[str, Any]:
    """Ask the service whether an email was sent under ``key``, and its receipt."""
    try:
        receipt = await service().lookup(args.key)
    except EmailServiceUnavailable as exc:
        raise ToolError(str(exc), retryable=True) from exc
    return {"sent": receipt is not None, "receipt": receipt}


@tool(pool="email", policy="unsafe", timeout=30, approval=APPROVAL)
async def send_email_unsafe(args: Email, ctx: ToolContext) -> dict[str, Any]:
    """Send through an endpoint that neither dedupes nor answers questions."""
    try:
        receipt = await service().send_unsafe(args.key, args.to, args.subject, args.body)
    except (EmailRejected, EmailServiceUnavailable) as exc:
        raise ToolError(str(exc)) from exc
    return {"receipt": receipt, "via": "call"}
