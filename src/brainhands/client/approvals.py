"""Approvals as a client sees them: the calls waiting for a decision, and deciding them.

A decision is the one exclusive signal its approval task waits for
(``shared.vocabulary.decision_signal``), put in the session's inbox with the session's
wake-up; the inbox's unique key makes the first decision the only one. A decision sent
again (same verdict) is answered with the decision that counted; the other verdict is
refused (``DecisionRefused``), as is any decision once the call expired or ended.

An approval may edit the call's arguments: the edit is checked against the schema the
tool's Hands declared before anything is recorded (``InvalidRequest`` saying what is wrong,
the call still pending), and the decision keeps both versions; the Brain dispatches the
edited one (``brain.approval``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema_rs

from brainhands.client.four_eyes import check_four_eyes
from brainhands.client.submission import DecidedBy
from brainhands.shared.errors import DecisionRefused, InvalidRequest, NotFoundError
from brainhands.shared.store import InboxRecord, OutboxMessage, Store, TaskRecord
from brainhands.shared.vocabulary import APPROVAL_KIND, Verdict, decision_signal

DECISION_FIELDS = frozenset({"verdict", "by", "reason", "decision_id", "at"})
"""What a decision's payload holds (``_decide_one``)."""


class AllPending:
    """The type of ``ALL``."""

    _made = False

    def __new__(cls) -> AllPending:
        if cls._made:
            raise TypeError("ALL is the one AllPending")
        cls._made = True
        return super().__new__(cls)

    def __repr__(self) -> str:
        return "ALL"


ALL = AllPending()
"""Decide every call pending now: said outright, never assumed when no call is named."""


@dataclass(frozen=True)
class PendingApproval:
    """A model's tool call waiting for a decision, its arguments frozen."""

    session_id: str
    approval_id: str
    tool: str
    arguments: dict[str, Any]
    agent: str
    """The agent whose model asked for the call."""
    call_id: str
    since: float
    expires_at: float | None
    escalated: bool
    """It expired under ``on_expiry="escalate"``: still pending, with no further expiry."""
    reason: str | None = None
    """Why the call needs approval (None for calls asked before reasons were kept)."""


@dataclass(frozen=True)
class Decision:
    """The decision that counts for an approval."""

    approval_id: str
    verdict: Verdict
    by: str
    """Who decided, as the decider wrote it (a display name)."""
    reason: str | None
    decision_id: str
    decided_at: float
    new: bool
    """This request made it; False when it had been made before (by this decision id or
    another with the same verdict): it counted once."""
    principal: str | None = None
    """Who decided, as the decider's credential says (``key:<id>`` for an API key, the
    client's identity otherwise); None for an expiry."""
    arguments: dict[str, Any] | None = None
    """The arguments the approver edited the call to, which it ran with; None: as asked."""


def pending_of(task: TaskRecord) -> PendingApproval:
    state = task.state if isinstance(task.state, dict) else {}
    return PendingApproval(
        session_id=task.session_id,
        approval_id=task.id,
        tool=task.input["tool"],
        arguments=task.input["arguments"],
        agent=task.input["agent"],
        call_id=task.input["call_id"],
        since=task.created_at,
        expires_at=task.wake_at,
        escalated=bool(state.get("escalated")),
        reason=task.input.get("reason"),
    )


async def pending_approvals(
    store: Store,
    session_id: str | None = None,
    *,
    tenant: str | None = None,
    limit: int = 1000,
) -> list[PendingApproval]:
    """Calls waiting for a decision (of one session, or of all, or of all of ``tenant``),
    oldest first. A call whose decision is recorded is no longer listed, even before a
    Brain carries it out."""
    tasks = await store.waiting_approvals(session_id, tenant=tenant, limit=limit)
    return [pending_of(task) for task in tasks]


async def approval_ids(
    store: Store, session_id: str, approvals: str | Sequence[str] | AllPending
) -> list[str]:
    """The approvals a decision names: one id, several, or ``ALL`` (those pending now).
    ``InvalidRequest`` when it names none: every pending call is decided only when asked
    for by ``ALL``, never by omission."""
    if approvals is ALL:
        return [p.approval_id for p in await pending_approvals(store, session_id)]
    if isinstance(approvals, str):
        return [approvals]
    if isinstance(approvals, AllPending) or not approvals:
        raise InvalidRequest("name the calls to decide, or ALL for every pending one")
    return list(approvals)


async def decide(
    store: Store,
    session_id: str,
    approvals: str | Sequence[str] | AllPending,
    verdict: Verdict,
    reason: str | None,
    decided_by: DecidedBy,
    *,
    principal: str,
    wake: Callable[[str], OutboxMessage],
    arguments: dict[str, Any] | None = None,
) -> list[Decision]:
    """Record ``verdict`` on each approval ``approvals`` names (``approval_ids``), made by
    ``decided_by``'s principal (default: ``principal``) and shown as its ``by`` (default:
    the principal), the call edited to ``arguments`` when given: ``Client.decide``."""
    ids = await approval_ids(store, session_id, approvals)
    if arguments is not None and (verdict != "approved" or len(ids) != 1):
        raise InvalidRequest("edited arguments come with the approval of one call")
    who = decided_by.get("principal") or principal
    return [
        await _decide_one(
            store,
            session_id=session_id,
            approval_id=approval_id,
            verdict=verdict,
            by=decided_by.get("by") or who,
            reason=reason,
            decision_id=decided_by.get("decision_id"),
            wake=wake,
            principal=who,
            four_eyes=decided_by.get("four_eyes", False),
            arguments=arguments,
        )
        for approval_id in ids
    ]


async def _decide_one(
    store: Store,
    *,
    session_id: str,
    approval_id: str,
    verdict: Verdict,
    by: str,
    reason: str | None,
    decision_id: str | None,
    wake: Callable[[str], OutboxMessage],
    principal: str,
    four_eyes: bool = False,
    arguments: dict[str, Any] | None = None,
) -> Decision:
    """Record ``verdict`` on approval ``approval_id`` (once), for a Brain to carry out,
    made by ``principal``, with the call's ``arguments`` edited when given. ``four_eyes``:
    refused (``DecisionRefused``) when ``principal`` submitted to the session."""
    task = (await store.queries.tasks_by_ids([approval_id])).get(approval_id)
    if task is None or task.kind != APPROVAL_KIND or task.session_id != session_id:
        raise NotFoundError(f"session {session_id} has no approval {approval_id!r}")
    if four_eyes:
        await check_four_eyes(store, session_id, principal, f"approval {approval_id!r}")
    name = decision_signal(approval_id)
    decision_id = decision_id or uuid.uuid4().hex
    if task.status == "terminal":
        made = next((r for r in await store.inbox.of_session(session_id) if r.key == name), None)
        if made is None:
            raise DecisionRefused(
                f"approval {approval_id!r} is no longer pending: its call ended {task.outcome}"
            )
        return _counted(approval_id, made, verdict, arguments, new=False)
    payload: dict[str, Any] = {
        "verdict": verdict,
        "by": by,
        "reason": reason,
        "decision_id": decision_id,
        "at": time.time(),
        "principal": principal,
    }
    if arguments is not None:
        await check_edit(store, task, arguments)
        payload |= {"arguments": arguments, "original_arguments": task.input["arguments"]}
    receipt = await store.inbox.send_signal(
        session_id=session_id, name=name, signal_id=name, payload=payload, wake=wake
    )
    return _counted(approval_id, receipt.request, verdict, arguments, new=receipt.created)


async def check_edit(store: Store, task: TaskRecord, arguments: dict[str, Any]) -> None:
    """``InvalidRequest`` saying why, unless ``arguments`` may replace the arguments of the
    call approval ``task`` holds: a call of a Hands tool, and valid by the schema its Hands
    declared (what the tool will validate them with)."""
    tool = task.input["tool"]
    if task.input.get("task_kind") is not None:
        raise InvalidRequest(f"the call of {tool!r} starts a task: its arguments are not edited")
    if not isinstance(arguments, dict):
        raise InvalidRequest("edited arguments are a JSON object")
    declared = {d.name: d for d in await store.declarations.tools()}.get(tool)
    if declared is None:
        raise InvalidRequest(f"no Hands pool declares {tool!r} now: an edit cannot be checked")
    check_arguments(tool, declared.args_schema, arguments)


def check_arguments(tool: str, schema: dict[str, Any], arguments: dict[str, Any]) -> None:
    """``InvalidRequest`` naming each problem, unless ``arguments`` are valid by ``schema``,
    the JSON schema ``tool`` was declared with. Offline: a schema's remote ``$ref`` (an MCP
    server's schema is the server's to write) is never fetched by the API."""
    try:
        validator = jsonschema_rs.validator_for(schema, offline=True)
    except jsonschema_rs.ValidationError as exc:
        raise InvalidRequest(
            f"the schema {tool!r} is declared with cannot check an edit: {exc.message}"
        ) from None
    problems = [
        f"{'.'.join(map(str, e.instance_path)) or 'arguments'}: {e.message}"
        for e in validator.iter_errors(arguments)
    ]
    if problems:
        raise InvalidRequest(f"edited arguments of {tool!r} are invalid: {'; '.join(problems)}")


def _counted(
    approval_id: str,
    made: InboxRecord,
    verdict: Verdict,
    arguments: dict[str, Any] | None,
    *,
    new: bool,
) -> Decision:
    """The decision ``made`` holds, when ``verdict`` (and the edit to ``arguments``, if
    any) agrees with it; refused otherwise."""
    body = made.body if isinstance(made.body, dict) else {}
    if body.get("timed_out"):
        reason = "the approval expired"
        decision = Decision(
            approval_id, "denied", "expiry", reason, made.key, made.created_at, False
        )
    else:
        p = body.get("payload")
        if not isinstance(p, dict) or not p.keys() >= DECISION_FIELDS:
            # Only a decision takes its key; a record kept from before is never read as one.
            raise DecisionRefused(f"approval {approval_id!r} holds no decision to show")
        decision = Decision(
            approval_id,
            p["verdict"],
            p["by"],
            p["reason"],
            p["decision_id"],
            p["at"],
            new=new,
            principal=p.get("principal"),
            arguments=p.get("arguments"),
        )
    if decision.verdict != verdict:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(decision.decided_at))
        raise DecisionRefused(
            f"approval {approval_id!r} was already {decision.verdict} by {decision.by} at "
            f"{when} UTC ({decision.reason or 'no reason given'}): it cannot be {verdict} now"
        )
    if arguments is not None and decision.arguments != arguments:
        raise DecisionRefused(
            f"approval {approval_id!r} was already approved by {decision.by} with "
            f"{'other edited arguments' if decision.arguments else 'its arguments as asked'}"
            ": it cannot be approved with these now"
        )
    return decision
