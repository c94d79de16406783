"""Approval gates: a model's call of a tool that needs approval waits, durably, for a
decision before anything is dispatched (a Hands call, or a task tool's task).

The call becomes an ``agent.approval`` task holding the frozen arguments. It waits for the
exclusive signal ``decision:<its id>``: one decision can ever be made under that name, so
of two clients approving at once, or a denial racing the expiry, exactly one counts (the
inbox's unique key decides), and the same decision sent twice is one. Approved, the task
dispatches the call (the decision's commit carries the tool task and its job); denied, it
ends with a refusal the model reads. An expiry either denies (``deny``: the timeout is sent
as the decision) or leaves the call pending and marks it escalated (``escalate``).

An approver may approve with edited arguments (``Client.approve(..., arguments=...)``,
checked against the tool's declared schema before the decision is recorded). The decision
holds both versions; the call is dispatched with the edited one only, frozen in its tool
task and operation like any call's, and the model reads beside the outcome that the
approver edited the call and what ran. The original arguments are never dispatched: a
Brain that dies after the decision's commit finds the edited call recorded, one that dies
before it carries out the same recorded decision again.

Its phases are light: the decision, the dispatch and the outcome are each applied in the
commit that makes them possible.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from brainhands.brain.decide import child_tool_outcome
from brainhands.brain.registry import TaskKind, TaskRegistry
from brainhands.brain.task import (
    Child,
    Dispatch,
    Fail,
    Finish,
    Next,
    PhaseContext,
    Spawn,
    TaskView,
    WaitSignal,
)
from brainhands.shared.vocabulary import APPROVAL_KIND, decision_signal

Expiry = Literal["deny", "escalate"]


@dataclass(frozen=True)
class ApprovalRequest:
    """What an approval task is created with (its input)."""

    tool: str
    arguments: dict[str, Any]
    call_id: str
    agent: str
    expires_in: float | None = None
    on_expiry: Expiry = "deny"
    task_kind: str | None = None
    """For a task tool: the kind of the task an approval starts (else a Hands call)."""
    operation_id: str | None = None
    """The operation id the call was made with (``Call.operation_id``), kept for its dispatch."""
    mirror: bool = False
    """Made in a call's place where it was dispatched (``brain.dispatch``), not by an
    agent: the approval ends as its call ended, so the task that made the call reads the
    call's own outcome; denied or expired, it fails with the refusal."""
    reason: str | None = None
    """Why the call needs approval (its tool's declaration or condition, the agent's grant),
    as its approver reads it."""

    def input(self) -> dict[str, Any]:
        reason = {} if self.reason is None else {"reason": self.reason}
        return {
            "tool": self.tool,
            "arguments": self.arguments,
            "call_id": self.call_id,
            "agent": self.agent,
            "expires_in": self.expires_in,
            "on_expiry": self.on_expiry,
            "task_kind": self.task_kind,
            "operation_id": self.operation_id,
            "mirror": self.mirror,
            **reason,
        }


def approval_kinds() -> TaskRegistry:
    registry = TaskRegistry()
    approval = registry.add(TaskKind(APPROVAL_KIND))

    def wait(task: TaskView, *, escalated: bool) -> WaitSignal:
        on_expiry = task.input["on_expiry"]
        timeout = None if escalated else task.input["expires_in"]
        return WaitSignal(
            decision_signal(task.id),
            then="decide",
            timeout=timeout,
            # A denial on expiry is a decision, sent as the one signal; an escalation is not.
            exclusive=escalated or on_expiry == "deny",
            state={"escalated": escalated},
        )

    @approval.phase("ask", light=True)
    async def ask(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        return wait(task, escalated=False)

    @approval.phase("decide", light=True)
    async def decide(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        signal = task.signal
        assert signal is not None, "the decide phase runs only after the decision's wait"
        if signal.timed_out and task.input["on_expiry"] == "escalate":
            return wait(task, escalated=True)  # an escalated wait has no expiry
        decision: dict[str, Any]
        if signal.timed_out:
            decision = {"verdict": "denied", "by": "expiry", "reason": "the approval expired"}
        else:
            decision = dict(signal.payload)
        decision["at"] = signal.received_at
        if decision["verdict"] == "approved":
            kind = task.input.get("task_kind")
            arguments = decision.get("arguments", task.input["arguments"])
            if kind is not None:
                return Spawn([Child(kind, arguments)], then="done", state=decision)
            return Dispatch(
                task.input["tool"],
                arguments,
                then="done",
                state=decision,
                operation_id=task.input.get("operation_id"),
            )
        reason = decision.get("reason") or "no reason given"
        refusal = {
            "status": "denied",
            "error": f"call of {task.input['tool']!r} denied by {decision['by']}: {reason}",
            "decision": decision,
        }
        return Fail(refusal) if task.input.get("mirror") else Finish(refusal)

    @approval.phase("done", light=True)
    async def done(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        [outcome] = task.children
        if task.input.get("mirror"):
            if outcome.outcome == "succeeded":
                return Finish(outcome.result)
            return Fail(outcome.error)
        shown = {**child_tool_outcome(outcome).for_model(), "decision": task.state}
        return Finish(shown | edit_note(task.state))

    return registry


def edit_note(decision: dict[str, Any]) -> dict[str, Any]:
    """What the model reads of an approver's edit beside the call's outcome: that the call
    ran with other arguments than it asked for, and which (nothing when it was not edited)."""
    if "arguments" not in decision:
        return {}
    return {
        "edited": (
            f"{decision['by']} approved the call with edited arguments: it ran with "
            f"{json.dumps(decision['arguments'], sort_keys=True)}, not the arguments asked for"
        ),
        "arguments": decision["arguments"],
    }
