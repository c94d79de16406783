"""Tools for the Hands tests, declared with the public API; each sends through the real
email service at ``TEST_EMAIL_URL`` under its operation id."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from typing import Any

from pydantic import BaseModel

from brainhands.examples.notify import tools as notify_tools
from brainhands.examples.notify.email_client import EmailClient, EmailServiceUnavailable
from brainhands.hands import QueryAnswer, RetryPolicy, ToolContext, ToolError, arg, tool


class Email(BaseModel):
    to: str
    subject: str = "notice"
    body: str = "hello"
    pause_after: float = 0.0
    """Seconds the first attempt waits after the service accepted the email: a window to kill
    the worker in, between the effect and the recorded outcome."""


def client() -> EmailClient:
    return EmailClient(os.environ["TEST_EMAIL_URL"], timeout=5.0)


async def deliver(args: Email, ctx: ToolContext, *, unsafe: bool = False) -> dict[str, Any]:
    try:
        send = client().send_unsafe if unsafe else client().send
        receipt = await send(ctx.operation_id, args.to, args.subject, args.body)
    except EmailServiceUnavailable as exc:
        # Only an idempotent send may be retried blindly: an unsafe one may have landed.
        raise ToolError(str(exc), retryable=not unsafe) from exc
    await ctx.progress("accepted", receipt=receipt)
    if ctx.attempt == 1:
        await asyncio.sleep(args.pause_after)
    return {"receipt": receipt, "attempt": ctx.attempt}


async def was_sent(args: Email, ctx: ToolContext) -> QueryAnswer:
    receipt = await client().lookup(ctx.operation_id)
    return QueryAnswer(receipt is not None, {"receipt": receipt, "attempt": ctx.attempt})


FAST_RETRY = RetryPolicy(max_attempts=4, initial_delay=0.3, multiplier=2, max_delay=2)


@tool(pool="email", policy="safe", retry=FAST_RETRY)
async def send_safe(args: Email, ctx: ToolContext) -> dict[str, Any]:
    """Send an email; the service dedupes by operation id, so a re-run is harmless."""
    return await deliver(args, ctx)


@tool(pool="email", policy="query", query=was_sent, retry=FAST_RETRY)
async def send_query(args: Email, ctx: ToolContext) -> dict[str, Any]:
    """Send an email; after an interruption, ask the service whether it went out."""
    return await deliver(args, ctx)


@tool(pool="email", policy="unsafe", retry=FAST_RETRY)
async def send_unsafe(args: Email, ctx: ToolContext) -> dict[str, Any]:
    """Send through the non-idempotent endpoint: a second call is a second email."""
    return await deliver(args, ctx, unsafe=True)


@tool(pool="email", policy="unsafe", timeout=0.5)
async def hang(args: Email, ctx: ToolContext) -> dict[str, Any]:
    """Never finishes within its timeout."""
    await asyncio.sleep(30)
    return {}


class Size(BaseModel):
    size: int


@tool(pool="email", policy="safe")
async def big_result(args: Size, ctx: ToolContext) -> dict[str, Any]:
    """Returns a result of ``size`` characters."""
    return {"data": "x" * args.size}


class Nothing(BaseModel):
    pass


@tool(pool="email", policy="safe", retry=RetryPolicy(max_interruptions=2))
async def crash_worker(args: Nothing, ctx: ToolContext) -> None:
    """Kills the process that runs it, every time: a poison job (given up after 2 reruns, well
    within the queue's delivery limit, as this harness has no sweeper to re-dispatch it)."""
    os._exit(17)


@tool(pool="email", policy="safe", timeout=60)
async def wait_for_cancel(args: Nothing, ctx: ToolContext) -> dict[str, Any]:
    """Works until told to stop (at most 30 s), then says whether it was told."""
    for _ in range(600):
        if ctx.cancelled():
            break
        await asyncio.sleep(0.05)
    return {"stopped_by_cancel": ctx.cancelled()}


class Note(BaseModel):
    text: str


@tool(pool="email", policy="safe")
async def echo(args: Note, ctx: ToolContext) -> dict[str, Any]:
    """Says back what it was given: a tool whose result never varies (after
    ``TEST_ECHO_DELAY`` seconds, 0 unless set)."""
    await asyncio.sleep(float(os.environ.get("TEST_ECHO_DELAY", "0")))
    return {"echo": args.text}


def post_with_urllib(path: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A request written the ordinary way with the standard library: no error handling."""
    request = urllib.request.Request(
        os.environ["TEST_EMAIL_URL"] + path,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        answer: dict[str, Any] = json.load(response)
    return answer


@tool(pool="email", policy="unsafe", retry=FAST_RETRY)
async def pay_unsafe(args: Email, ctx: ToolContext) -> dict[str, Any]:
    """A non-idempotent call over urllib: a lost response raises ``RemoteDisconnected``."""
    body = {"key": ctx.operation_id, "to": args.to, "subject": args.subject, "body": args.body}
    return await asyncio.to_thread(post_with_urllib, "/send-unsafe", body)


@tool(pool="email", policy="query", query=was_sent, retry=FAST_RETRY)
async def pay_query(args: Email, ctx: ToolContext) -> dict[str, Any]:
    """An idempotent call over urllib, whose query asks the service after a failure."""
    body = {"key": ctx.operation_id, "to": args.to, "subject": args.subject, "body": args.body}
    return await asyncio.to_thread(post_with_urllib, "/send", body)


@tool(pool="email", policy="query", query=was_sent, retry=RetryPolicy(max_interruption_delay=1))
async def send_after_work(args: Email, ctx: ToolContext) -> dict[str, Any]:
    """Works for ``pause_after`` seconds, then sends idempotently: a long call whose effect
    comes at its very end. The default budget of interruptions, with short backoffs."""
    await asyncio.sleep(args.pause_after)
    return {"receipt": await client().send(ctx.operation_id, args.to, args.subject, args.body)}


@tool(pool="email", policy="safe", retry=FAST_RETRY, approval=True)
async def send_gated(args: Email, ctx: ToolContext) -> dict[str, Any]:
    """Sends an email once a person approved the call (the tool's declaration says so)."""
    return await deliver(args, ctx)


class Invoice(BaseModel):
    to: str
    amount: int


@tool(pool="email", policy="safe", retry=FAST_RETRY, approval=arg("amount") > 100)
async def send_invoice(args: Invoice, ctx: ToolContext) -> dict[str, Any]:
    """Sends an invoice by email; one over 100 waits for a person's approval (the
    declaration's condition), who may lower its amount."""
    return await deliver(Email(to=args.to, subject=f"invoice {args.amount}"), ctx)


@tool(pool="email", policy="query", query=notify_tools.was_sent, timeout=60)
async def send_email_after_work(args: notify_tools.Email, ctx: ToolContext) -> dict[str, Any]:
    """The notify example's ``send_email`` after ``TEST_SLOW_WORK`` seconds of work (4.5 by
    default: three of the chaos cluster's lease TTLs), with the default budget and backoff
    of interruptions: a long ``query`` call whose effect comes at its very end."""
    await asyncio.sleep(float(os.environ.get("TEST_SLOW_WORK", "4.5")))
    receipt = await notify_tools.service().send(args.key, args.to, args.subject, args.body)
    return {"receipt": receipt, "via": "call", "attempt": ctx.attempt}
