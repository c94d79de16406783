"""A tool call a phase makes, committed: its intent, and the job that asks Hands to run it.

The call becomes a tool task whose input is its ``ToolCallIntent`` and whose job goes into
the outbox of the same commit, so no job is ever sent for a call that was not recorded, and
the sweeper can send it again from the row. Arguments too large to go inline are stored once,
as a blob of that commit, and both refer to it.

A call of a tool that needs approval -- declared ``approval=True``, or with a condition its
arguments meet (``shared.conditions``, decided here and recorded by this commit: the
approval task, or the tool task, is the answer) -- is dispatched only under an approval: made by
an approval task (``brain.approval``: the approved call itself), or by a task below one (an
approved task tool's task: what its approver approved). Any other caller -- a task kind
started from a raw submission, a compensation, a follow-up -- gets an approval task in the
call's place, which dispatches it once approved and then ends as the call ended, so the
caller reads its outcome as it would the call's. Checked here, where every call of every
path is committed, not in the agent loop.

A call that has an undo (``brain.compensation``) says so in its tool task's input, frozen
here from what the dispatching Brain knows: whichever Brain settles the call records its
effect without having read the tool's declaration, and a cancel waits for its real outcome.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from brainhands.brain.approval import ApprovalRequest
from brainhands.brain.decide import COMPENSATE, TOOL_KIND, unknown_tool
from brainhands.brain.ids import derive_operation_id
from brainhands.brain.registry import TaskKind
from brainhands.brain.task import Call, Child
from brainhands.shared.calls import ToolCallIntent
from brainhands.shared.errors import UnknownToolError
from brainhands.shared.messages import MAX_INLINE_JSON, encode
from brainhands.shared.store import Draft, TaskRecord
from brainhands.shared.tools import ToolDeclaration
from brainhands.shared.tracing import current_carrier
from brainhands.shared.vocabulary import APPROVAL_KIND

if TYPE_CHECKING:
    from brainhands.brain.edits import SessionEdits


def dispatch(edits: SessionEdits, draft: Draft, task: TaskRecord, call: Call) -> str:
    """Record ``call``, made by ``task``, in ``draft``: its tool task (waiting, its input the
    call's intent) and its job in the outbox; or, for a tool no pool declared, its tool task
    ended failed; or, for a tool that needs an approval ``task`` is not under, an approval
    task in its place. Returns the id of the task made."""
    try:
        declared = edits.tools.get(call.tool)
    except UnknownToolError as exc:
        return undeclared(edits, draft, task, call, exc)
    reason = declared.approval_reason(call.arguments)  # None at once for most tools
    if reason is not None and not approved(edits, task):
        return ask_approval(edits, draft, task, call, reason)
    task_id = edits.new_id(draft)
    operation_id = derive_operation_id(edits.session.uid, task_id, call.operation_id)
    arguments, blob_id = call.arguments, None
    encoded = json.dumps(call.arguments).encode()
    if len(encoded) > MAX_INLINE_JSON:
        arguments, blob_id = {}, draft.add_blob(encoded)
    intent = ToolCallIntent(
        operation_id, edits.session_id, task_id, call.tool, declared.pool, arguments, blob_id
    )
    input_ = intent.task_input()
    undo = frozen_undo(edits.kind(task), declared)
    if undo is not None:
        input_[COMPENSATE] = undo
    edits.create(
        draft,
        task_id=task_id,
        kind=TOOL_KIND,
        kind_version=1,
        input=input_,
        parent_id=task.id,
        status="waiting",
        operation_id=operation_id,
    )
    job = intent.job(compat=edits.compat, trace=current_carrier())
    draft.add_outbox(edits.topology.hands_queue(declared.pool), encode(job))
    return task_id


def undeclared(
    edits: SessionEdits, draft: Draft, task: TaskRecord, call: Call, exc: UnknownToolError
) -> str:
    """Record ``call`` of a tool no pool declared: its tool task, ended failed."""
    task_id = edits.new_id(draft)
    ended = unknown_tool(exc)
    edits.create(
        draft,
        task_id=task_id,
        kind=TOOL_KIND,
        kind_version=1,
        input={"tool": call.tool, "arguments": call.arguments},
        parent_id=task.id,
        status="terminal",
        outcome=ended.outcome,
        error=ended.error,
        operation_id=derive_operation_id(edits.session.uid, task_id, call.operation_id),
    )
    return task_id


def approved(edits: SessionEdits, task: TaskRecord) -> bool:
    """Whether ``task`` is an approval task or a task below one: its calls were approved."""
    row: TaskRecord | None = task
    while row is not None:
        if row.kind == APPROVAL_KIND:
            return True
        row = edits.rows.get(row.parent_id) if row.parent_id is not None else None
    return False


def ask_approval(
    edits: SessionEdits, draft: Draft, task: TaskRecord, call: Call, reason: str
) -> str:
    """Put an approval task, made by ``task``, in the place of ``call`` (which needs one for
    ``reason``): it waits for a decision (listed in the session's pending approvals), then
    dispatches the call and ends as the call ended (``mirror``); denied or expired, it
    fails with the refusal."""
    request = ApprovalRequest(
        tool=call.tool,
        arguments=call.arguments,
        call_id=call.operation_id or "",
        agent=task.kind,
        operation_id=call.operation_id,
        mirror=True,
        reason=reason,
    )
    return edits.spawn(draft, Child(APPROVAL_KIND, request.input()), parent=task.id)


def frozen_undo(kind: TaskKind | None, declared: ToolDeclaration) -> str | bool | None:
    """What a call of ``declared`` made by a task of ``kind`` keeps of its undo: the
    compensating tool's name (the kind's, else the declaration's), True when the kind
    derives the undo with a function (code, found in the kind when the call succeeds), or
    None when the call has no undo."""
    undo = kind.compensations.get(declared.name) if kind is not None else None
    if undo is None:
        return declared.compensate
    return undo if isinstance(undo, str) else True
