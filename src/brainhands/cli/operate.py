"""Operator commands: schema, status, submissions, sessions and parked messages (acting on
running sessions -- signals and approvals -- is ``brainhands.cli.acting``)."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

from pydantic import SecretStr
from pydantic_settings import BaseSettings

from brainhands.api.keys import create_key, list_keys, revoke_key
from brainhands.cli.acting import settings_for
from brainhands.cli.parked import PurgeFilter, judge_parked, purge_parked
from brainhands.client.approvals import PendingApproval, pending_approvals
from brainhands.client.budgets import BudgetStop, budget_stop_of, session_usage
from brainhands.client.direct import Client
from brainhands.shared.broker import Broker
from brainhands.shared.conditions import describe
from brainhands.shared.config import CommonSettings, load_settings, redacted_url
from brainhands.shared.parking import list_parked, replay_parked
from brainhands.shared.store import (
    OperationRecord,
    SessionRecord,
    SessionState,
    Store,
    TaskRecord,
    head_revision,
)
from brainhands.shared.tenancy import session_key
from brainhands.shared.vocabulary import TENANT_SCOPE


async def migrate(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    store = await Store.open(
        settings.database_url, upgrade=False, db_schema=settings.database_schema
    )
    try:
        before = await store.revision()
        await store.upgrade(args.revision)
        after = await store.revision()
    finally:
        await store.close()
    print(f"store {_redacted(settings.database_url)}: {before or 'empty'} -> {after}")
    return 0


async def status(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    store = await Store.open(settings.database_url, db_schema=settings.database_schema)
    try:
        status = await store.status()
    finally:
        await store.close()
    status["store"] = _redacted(settings.database_url)
    status["head"] = head_revision()
    print(json.dumps(status, indent=2) if args.json else _table(status))
    return 0


async def tools(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    store = await Store.open(settings.database_url, db_schema=settings.database_schema)
    try:
        declared = await store.declarations.tools()
    finally:
        await store.close()
    if args.json:
        print(json.dumps([dataclasses.asdict(d) for d in declared], indent=2))
        return 0
    if not declared:
        print("no tools declared: a Hands process declares its pool's tools when it starts")
    for pool, group in itertools.groupby(declared, key=lambda d: d.pool):
        print(f"pool {pool}:")
        for d in group:
            summary = d.description.splitlines()[0] if d.description else ""
            gate = "approval" if d.approval else "approval?" if d.approval_when else ""
            print(f"  {d.name:<24} {d.policy:<7} {gate:<8} {summary}")
            if d.policy_reason:
                print(f"  {'':<24} {d.policy} because: {d.policy_reason}")
            if d.approval_when:
                print(f"  {'':<24} approval when {describe(d.approval_when)}")
    return 0


async def submit(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.input)
    except json.JSONDecodeError:
        payload = {"text": args.input}
    async with await Client.from_settings(settings_for(args), compat=args.compat) as c:
        handle = await c.submit(args.session, payload, request_id=args.request_id)
        record = await handle.status()
        seen = "accepted" if handle.created else "already accepted earlier; nothing new started"
        print(f"submission {record.id} ({seen}): {record.status}")
        if args.wait:
            record = await c.wait(args.session, args.request_id, timeout=args.wait)
            print(
                json.dumps(
                    {"status": record.status, "answer": record.answer, "error": record.error},
                    indent=2,
                )
            )
            return 0 if record.status == "answered" else 1
    return 0


async def show(args: argparse.Namespace) -> int:
    settings = settings_for(args)
    key = session_key(settings.tenant, args.session)
    store = await Store.open(settings.database_url, db_schema=settings.database_schema)
    try:
        state = await store.load(key)
        tasks, operations = await store.queries.history(key)
        approvals = await pending_approvals(store, key)
    finally:
        await store.close()
    stop, usage = budget_stop_of(tasks), session_usage(state.entries)
    if args.json:
        document = _session_document(state, tasks, operations)
        document["approvals"] = [dataclasses.asdict(a) for a in approvals]
        document["budget_exhausted"] = None if stop is None else dataclasses.asdict(stop)
        document["usage"] = usage
        print(json.dumps(document, indent=2))
        return 0
    s = state.session
    print(
        f"session {s.id}  tenant={s.tenant}  uid={s.uid}  compat={s.compat}  "
        f"version={s.version}  fence={s.fence}"
    )
    _print_needs_action(approvals, stop, s)
    if usage:
        print(f"\nusage: {json.dumps(usage)}")
    print(f"\nentries ({len(state.entries)}):")
    for e in state.entries:
        print(f"  {e.seq:>4} {e.kind:<12} {json.dumps(e.body)[:110]}")
    _print_tasks(tasks)
    _print_operations(operations)
    return 0


def _print_needs_action(
    approvals: list[PendingApproval], stop: BudgetStop | None, s: SessionRecord
) -> None:
    """What waits for an operator: calls to approve, a run stopped at its budget."""
    if approvals:
        print(f"\nNEEDS ACTION: {len(approvals)} call(s) waiting for approval")
        for a in approvals:
            expiry = f", expires {_when(a.expires_at)}" if a.expires_at is not None else ""
            escalated = ", ESCALATED" if a.escalated else ""
            print(f"  {a.approval_id} {a.tool} {json.dumps(a.arguments)}")
            print(f"      asked by agent {a.agent} since {_when(a.since)}{expiry}{escalated}")
    if stop is not None:
        print(f"\nNEEDS ACTION: budget_exhausted ({stop.limit}) since {_when(stop.since)}")
        print(f"  used {json.dumps(stop.used)} of {json.dumps(stop.budget)}")
        print(f"  to resume: {resume_command(stop, s.id, s.tenant)}")


def _print_tasks(tasks: list[TaskRecord]) -> None:
    print(f"\ntasks ({len(tasks)}):")
    for t in tasks:
        where = t.outcome if t.status == "terminal" else f"{t.status}@{t.phase}"
        print(f"  {t.id} {t.kind} v{t.kind_version} {where}")
        if t.parent_id:
            print(f"      parent: {t.parent_id}")
        if t.status == "sleeping" and t.wake_at is not None:
            print(f"      wakes: {_when(t.wake_at)}")
        if t.wait_signal is not None:
            until = f", times out {_when(t.wake_at)}" if t.wake_at is not None else ""
            print(f"      waits for signal {t.wait_signal!r}{until}")
        if t.blocked_reason:
            print(f"      BLOCKED: {t.blocked_reason}")


def _print_operations(operations: list[OperationRecord]) -> None:
    print(f"\noperations ({len(operations)}):")
    for o in operations:
        print(
            f"  {o.operation_id} {o.tool} {o.status}"
            f"  attempts={o.attempts} interruptions={o.interruptions}"
        )
        if o.task_id:
            print(f"      task: {o.task_id}")
        for what, blob_id in (("arguments", o.arguments_blob_id), ("result", o.blob_id)):
            if blob_id is not None:
                print(f"      {what} in blob {blob_id}")
        if o.error:
            print(f"      error: {_error_of(o.error)}")


def _session_document(
    state: SessionState, tasks: list[TaskRecord], operations: list[OperationRecord]
) -> dict[str, Any]:
    """What ``brainhands show --json`` prints. Its keys are chosen here, not taken from the
    records, so that a scripted reader keeps working when a record gains a field."""
    s = state.session
    return {
        "session": {
            "id": s.id,
            "tenant": s.tenant,
            "uid": s.uid,
            "compat": s.compat,
            "status": s.status,
            "version": s.version,
            "fence": s.fence,
            "entry_count": s.entry_count,
            "created_at": s.created_at,
            "updated_at": s.updated_at,
        },
        "entries": [
            {"seq": e.seq, "kind": e.kind, "body": e.body, "created_at": e.created_at}
            for e in state.entries
        ],
        "tasks": [
            {
                "id": t.id,
                "kind": t.kind,
                "kind_version": t.kind_version,
                "status": t.status,
                "phase": t.phase,
                "outcome": t.outcome,
                "parent_id": t.parent_id,
                "submission_id": t.submission_id,
                "operation_id": t.operation_id,
                "wake_at": t.wake_at,
                "wait_for": t.wait_for,
                "wait_signal": t.wait_signal,
                "signal": t.signal,
                "blocked_reason": t.blocked_reason,
                "cancel_requested": t.cancel_requested,
                "attempt": t.attempt,
                "restarts": t.restarts,
                "result": t.result,
                "error": t.error,
                "created_at": t.created_at,
                "updated_at": t.updated_at,
            }
            for t in tasks
        ],
        "operations": [
            {
                "operation_id": o.operation_id,
                "task_id": o.task_id,
                "tool": o.tool,
                "pool": o.pool,
                "status": o.status,
                "attempts": o.attempts,
                "interruptions": o.interruptions,
                "fence": o.fence,
                "error": o.error,
                "arguments_blob_id": o.arguments_blob_id,
                "result_blob_id": o.blob_id,
                "next_attempt_at": o.next_attempt_at,
                "created_at": o.created_at,
                "started_at": o.started_at,
                "finished_at": o.finished_at,
                "updated_at": o.updated_at,
            }
            for o in operations
        ],
    }


def _error_of(error: Any) -> str:
    if isinstance(error, dict) and "type" in error:
        return f"{error['type']}: {error.get('message')}"
    return json.dumps(error)


def _when(at: float) -> str:
    moment = datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
    left = at - time.time()
    return f"{moment} (in {left:.1f}s)" if left >= 0 else f"{moment} (due {-left:.1f}s ago)"


async def cancel(args: argparse.Namespace) -> int:
    async with await Client.from_settings(settings_for(args)) as client:
        said = await client.cancel(args.session, args.request_id)
    print(f"submission {args.request_id!r} of session {args.session}: {said}")
    return 0


async def dlq(args: argparse.Namespace) -> int:
    which = PurgeFilter(settled=args.settled, session_id=args.session, message_type=args.type)
    if args.action == "purge" and which == PurgeFilter():
        print("brainhands dlq purge: say which (--settled, --session or --type)", file=sys.stderr)
        return 2
    settings = load_settings(CommonSettings)
    topology = settings.topology()
    broker = await Broker.connect(settings.rabbitmq_url, topology, connection_name="dlq")
    try:
        if args.action == "replay":
            replayed = await replay_parked(broker, args.limit)
            print(f"replayed {replayed} parked message(s) to their origin queues")
            return 0
        store = await Store.open(settings.database_url, db_schema=settings.database_schema)
        try:
            if args.action == "purge":
                report = await purge_parked(
                    broker, store, which, force=args.force, limit=args.limit
                )
                print(f"purged {report.purged} parked message(s)")
                if report.kept:
                    print(f"kept {report.kept} whose work is not settled (--force removes them)")
                return 0
            parked = await list_parked(broker, args.limit)
            works = await judge_parked(store, parked)
        finally:
            await store.close()
    finally:
        await broker.close()
    if args.json:
        shown = [
            {
                **{
                    f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.name != "message"
                },
                "type": p.message_type,
                "session_id": p.session_id,
                "work": dataclasses.asdict(work),
            }
            for p, work in zip(parked, works, strict=True)
        ]
        print(json.dumps(shown, indent=2))
    elif not parked:
        print(f"{topology.parking_queue} is empty")
    else:
        for p, work in zip(parked, works, strict=True):
            print(f"- from {p.origin} ({p.count}x): {p.reason}")
            print(f"    {p.message_type} of session {p.session_id}: {work.state} ({work.detail})")
            print(f"    {p.body_preview}")
    return 0


async def config(args: argparse.Namespace) -> int:
    from brainhands.brain.models.settings import ModelSettings
    from brainhands.brain.settings import BrainSettings
    from brainhands.hands.settings import HandsSettings

    kinds: dict[str, type[BaseSettings]] = {
        "common": CommonSettings,
        "brain": BrainSettings,
        "hands": HandsSettings,
        "model": ModelSettings,
    }
    settings = load_settings(kinds[args.role])
    prefix = str(settings.model_config.get("env_prefix", ""))
    for name, value in settings:
        shown = "***" if isinstance(value, SecretStr) else value
        if isinstance(shown, str) and "://" in shown:
            shown = redacted_url(shown)
        elif isinstance(shown, dict | list):
            shown = json.dumps(shown)  # as the variable takes it back
        print(f"{prefix}{name.upper()}={'' if shown is None else shown}")
    return 0


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _table(values: dict[str, Any]) -> str:
    def shown(value: Any) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
        return str(value)

    width = max(len(k) for k in values)
    return "\n".join(f"{k:<{width}}  {shown(v)}" for k, v in values.items())


async def keys(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    store = await Store.open(settings.database_url, db_schema=settings.database_schema)
    try:
        if args.action == "create":
            if not args.tenant or not args.scope:
                print("brainhands keys create: give --tenant and --scope", file=sys.stderr)
                return 2
            try:
                record, key = await create_key(
                    store, tenant=args.tenant, scopes=args.scope, name=args.name or args.tenant
                )
            except ValueError as exc:
                print(f"brainhands keys create: {exc}", file=sys.stderr)
                return 2
            print(f"key {record.id} for tenant {record.tenant} ({', '.join(record.scopes)}):")
            print(key)
            print("(shown once: only its hash is kept)", file=sys.stderr)
        elif args.action == "revoke":
            if not args.id:
                print("brainhands keys revoke: give --id", file=sys.stderr)
                return 2
            await revoke_key(store, args.id)
            print(f"key {args.id} revoked")
        else:
            for k in await list_keys(store):
                state = "revoked" if k.revoked_at is not None else "active"
                print(f"{k.id}  {k.tenant:<20} {k.name:<20} {','.join(k.scopes):<24} {state}")
    finally:
        await store.close()
    return 0


def resume_command(stop: BudgetStop, session_id: str, tenant: str) -> str:
    """The command that resumes a run stopped at ``stop``: a raise of the session's budget,
    or, for a stop at its tenant's budget, the tenant's budget set again with the limit
    reached as ``N`` (a set replaces every limit, so the others are repeated)."""
    flag = stop.limit.replace("_", "-")
    if stop.scope != TENANT_SCOPE:
        return f"brainhands raise-budget --session {session_id} --{flag} N"
    limits = " ".join(
        f"--{name.replace('_', '-')} {'N' if name == stop.limit else value}"
        for name, value in stop.budget.items()
    )
    return f"brainhands tenant budget set {tenant} {limits}"
