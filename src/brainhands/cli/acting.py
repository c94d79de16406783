"""Commands that act on running sessions through the client: signal, approve, deny, raise a
budget, retry or abandon a failed undo, and the list of calls waiting for a decision."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

from brainhands.client.approvals import ALL, Decision
from brainhands.client.direct import Client
from brainhands.shared.config import CommonSettings, load_settings
from brainhands.shared.errors import (
    ConfigurationError,
    DecisionRefused,
    InvalidRequest,
    SessionRunning,
)
from brainhands.shared.tenancy import check_tenant
from brainhands.shared.vocabulary import BUDGET_LIMITS, Verdict


def settings_for(args: argparse.Namespace) -> CommonSettings:
    """The settings, with the tenant of ``--tenant`` when the command was given one."""
    settings = load_settings(CommonSettings)
    if getattr(args, "tenant", None) is None:
        return settings
    try:
        return settings.model_copy(update={"tenant": check_tenant(args.tenant)})
    except ValueError as exc:
        raise ConfigurationError(f"--tenant: {exc}") from None


async def erase(args: argparse.Namespace) -> int:
    async with await Client.from_settings(settings_for(args)) as client:
        try:
            erased = await client.erase(args.session, cancel=args.cancel)
        except SessionRunning as exc:
            print(f"{exc}; nothing erased", file=sys.stderr)
            return 1
    rows = ", ".join(f"{n} {table}" for table, n in erased.rows.items() if n)
    print(f"session {args.session} erased: {rows}")
    return 0


async def signal(args: argparse.Namespace) -> int:
    payload = json.loads(args.payload) if args.payload is not None else None
    async with await Client.from_settings(settings_for(args)) as client:
        receipt = await client.signal(
            args.session, args.name, payload, signal_id=args.id, decision=args.decision
        )
    seen = "sent" if receipt.created else "already sent earlier: counted once"
    print(f"signal {args.name!r} ({receipt.signal_id}) to session {args.session}: {seen}")
    return 0


async def raise_budget(args: argparse.Namespace) -> int:
    limits = {n: getattr(args, n) for n in BUDGET_LIMITS if getattr(args, n) is not None}
    async with await Client.from_settings(settings_for(args)) as client:
        try:
            receipt = await client.raise_budget(args.session, raise_id=args.id, **limits)
        except DecisionRefused as exc:
            print(f"session {args.session}: {exc}; nothing raised", file=sys.stderr)
            return 1
    seen = "sent" if receipt.created else "already sent earlier: counted once"
    print(f"budget of session {args.session} raised to {json.dumps(limits)}: {seen}")
    return 0


async def compensation(args: argparse.Namespace) -> int:
    async with await Client.from_settings(settings_for(args)) as client:
        try:
            receipt = await client.act_on_compensation(
                args.session, args.task, args.action, reason=args.reason, action_id=args.id
            )
        except DecisionRefused as exc:
            print(f"session {args.session}: {exc}; nothing sent", file=sys.stderr)
            return 1
    seen = "sent" if receipt.created else "already sent earlier: counted once"
    print(f"{args.action} of task {args.task}'s failed undo in session {args.session}: {seen}")
    return 0


async def approve(args: argparse.Namespace) -> int:
    if args.arguments is None:
        return await _decide(args, "approved")
    try:
        edit = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"--arguments is not JSON: {exc}") from None
    if not isinstance(edit, dict):
        raise InvalidRequest("--arguments is a JSON object of the call's arguments")
    return await _decide(args, "approved", edit)


async def deny(args: argparse.Namespace) -> int:
    return await _decide(args, "denied")


async def _decide(
    args: argparse.Namespace, verdict: Verdict, arguments: dict[str, Any] | None = None
) -> int:
    async with await Client.from_settings(settings_for(args)) as client:
        decisions = await client.decide(
            args.session,
            ALL if args.all else args.id,
            verdict,
            by=args.by,
            reason=args.reason,
            decision_id=args.decision,
            arguments=arguments,
        )
    return _report(args.session, decisions)


def _report(session_id: str, decisions: list[Decision]) -> int:
    if not decisions:
        print(f"session {session_id} has no call waiting for approval")
    for d in decisions:
        seen = "" if d.new else " (decided before: counted once)"
        edit = "" if d.arguments is None else f" with arguments {json.dumps(d.arguments)}"
        print(f"{d.approval_id}: {d.verdict} by {d.by}{edit}{seen}")
    return 0


async def pending(args: argparse.Namespace) -> int:
    async with await Client.from_settings(settings_for(args)) as client:
        waiting = await client.pending_approvals(args.session)
    if args.json:
        print(json.dumps([a.__dict__ for a in waiting], indent=2))
        return 0
    if not waiting:
        print("no call is waiting for approval")
    for a in waiting:
        age = time.time() - a.since
        since = datetime.fromtimestamp(a.since, UTC).isoformat(timespec="seconds")
        flag = "  ESCALATED" if a.escalated else ""
        print(f"{a.session_id}  {a.approval_id}  {a.tool} {json.dumps(a.arguments)}")
        print(f"    asked by {a.agent} at {since} ({age:.0f}s ago){flag}")
        if a.reason is not None:
            print(f"    because {a.reason}")
    return 0
