"""The notify example's task kinds: one durable task per email, and a batch above them.

``send-notice`` fixes the email's key before the call (``send``) -- the service dedupes on
it, whichever attempt carries it -- reads the outcome (``confirm``), and when the receipt
was lost in flight it sleeps, then asks the service (``verify``) instead of sending again;
only a send the service never accepted is made again (a new operation, the same key).

``notice-batch`` keeps the recipient plan and the receipts in a session document, spawns one
``send-notice`` per recipient, waits for all of them, and writes the summary.
"""

from __future__ import annotations

from typing import Any

from brainhands.brain import (
    Child,
    Dispatch,
    Fail,
    Finish,
    Goto,
    Next,
    PhaseContext,
    Sleep,
    Spawn,
    TaskKind,
    TaskRegistry,
    TaskView,
)

registry = TaskRegistry()
notice = registry.add(TaskKind("send-notice"))
batch = registry.add(TaskKind("notice-batch", documents=("plan",)))

VERIFY_AFTER = 1.0
"""Seconds to wait before asking the service about a send whose receipt was lost."""
MAX_SENDS = 3
"""Sends of one email (the service never accepted the earlier ones) before giving up."""


@notice.phase("send")
async def send(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    # The key is fixed before the call and bound to this recipient and body; each send is an
    # operation of its own, so a send the service never accepted can be made again.
    key = task.input["key"]
    sends = (task.state or {}).get("sends", 0) + 1
    if sends > MAX_SENDS:
        return Fail({"to": task.input["to"], "reason": f"not accepted after {MAX_SENDS} sends"})
    email = {"key": key, **{k: task.input[k] for k in ("to", "subject", "body")}}
    tool = task.input.get("tool", "send_email")
    return Dispatch(
        tool,
        email,
        then="confirm",
        operation_id=f"{key}/{sends}",
        state={"key": key, "sends": sends},
    )


@notice.phase("confirm")
async def confirm(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    [call] = task.children
    if task.input.get("tool") == "send_email_unsafe" and call.outcome != "succeeded":
        # An unsafe send cannot be asked about: the outcome (uncertain or failed) is final.
        return Fail({"to": task.input["to"], "outcome": call.error})
    if call.outcome == "succeeded":
        result = call.result["result"]
        how = (
            "confirmed by query"
            if result.get("via") == "query"
            else (
                "first try"
                if task.state["sends"] == 1 and result.get("attempt", 1) == 1
                else "re-run"
            )
        )
        return Goto("done", state={**task.state, "receipt": result["receipt"], "how": how})
    # The receipt was lost (or the outcome is unknown): do not send blindly; ask first.
    return Sleep(then="verify", seconds=VERIFY_AFTER, state=task.state)


@notice.phase("verify")
async def verify(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Dispatch("lookup_email", {"key": task.state["key"]}, then="decide", state=task.state)


@notice.phase("decide")
async def decide(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    [lookup] = task.children
    found = lookup.outcome == "succeeded" and lookup.result["result"]["sent"]
    if found:
        receipt = lookup.result["result"]["receipt"]
        return Goto("done", state={**task.state, "receipt": receipt, "how": "confirmed by query"})
    # Never accepted: send again, under the same key.
    return Goto("send", state=task.state)


@notice.phase("done")
async def done(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Finish(
        {
            "to": task.input["to"],
            "key": task.state["key"],
            "receipt": task.state["receipt"],
            "how": task.state["how"],
        }
    )


@batch.phase("plan")
async def plan(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    recipients = task.input["recipients"]
    docs["plan"] = {"recipients": recipients, "receipts": {}, "summary": None}
    children = [
        Child(
            "send-notice",
            {
                "to": to,
                "subject": task.input["subject"],
                "body": task.input["body"],
                "tool": task.input.get("tool", "send_email"),
                # One stable key per (batch, recipient): the service dedupes on it.
                "key": f"notice-{task.id[:12]}-{n}",
            },
        )
        for n, to in enumerate(recipients)
    ]
    return Spawn(children, then="summarize")


@batch.phase("summarize")
async def summarize(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    sent = [c.result for c in task.children if c.outcome == "succeeded"]
    failed = [c.input["to"] for c in task.children if c.outcome != "succeeded"]
    docs["plan"]["receipts"] = {r["to"]: r["receipt"] for r in sent}
    summary = f"{len(sent)} of {len(task.children)} notices sent"
    if failed:
        summary += f"; not sent: {', '.join(failed)}"
    docs["plan"]["summary"] = summary
    return Finish({"summary": summary, "sent": sent, "failed": failed})
