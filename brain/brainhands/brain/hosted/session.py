"""The task kind that runs hosted agents: ``hosted.session``, one per submission.

Its phases:

- ``start``: the user's entry (the run's journal begins after it: ``since``), and the run's
  spend, under the submission's ``budget``;
- ``run``: replay the framework's loop against the journal (``brain.hosted.journal``) with
  the agent's driver, asking for at most one new model answer. It is heavy (a model call
  goes out from it), and what it reached is committed with the answer it asked for, so no
  tool call ever exists without the answer it came from: the answer is the run's output
  (the session is answered with it, as the framework validated it); or tool calls, each a
  durable call of the declared tool (an approval task first for a tool the framework marks
  as needing one); or another model answer, asked for by the next pass. The run's budget
  (the submission's) and its tenant's are checked before the pass's model call and before
  a dispatch, as a native agent's are (``brain.budget``): a run at its budget stops there,
  the answer it holds kept, until a raise;
- ``apply``: the calls' outcomes, in call order, as ``tool_result`` entries (uncertain and
  failed ones included, labelled so): the next ``run`` hands them to the framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from brainhands.brain.approval import ApprovalRequest
from brainhands.brain.budget import Spend, Usage, resumed
from brainhands.brain.decide import call_result
from brainhands.brain.hosted.driver import Answered, Driver, Failed, WantsTools
from brainhands.brain.hosted.journal import (
    CHECKPOINT_ENTRY,
    MODEL_ENTRY,
    STEP_ENTRY,
    Journal,
    ToolRequest,
)
from brainhands.brain.registry import TaskKind, TaskRegistry
from brainhands.brain.task import (
    Call,
    Child,
    Fail,
    Finish,
    Goto,
    Next,
    PhaseContext,
    Sleep,
    Spawn,
    TaskView,
    WaitSignal,
)
from brainhands.brain.tenant_budget import TenantBudgets
from brainhands.shared.errors import InvalidRequest
from brainhands.shared.store import TenantCharge, ToolCatalog
from brainhands.shared.vocabulary import APPROVAL_KIND, BUDGET_STOP

SESSION_KIND = "hosted.session"
RESUME_KIND = "hosted.resume"
"""What an approved decision of a run's own (a graph's ``interrupt()``) starts: nothing to
dispatch, it ends at once, and the run reads the decision as its outcome."""
DECLARATION_WAIT = 1.0
DECLARATION_WAITS = 30


def hosted_kinds(
    drivers: Mapping[str, Driver], tools: ToolCatalog, tenants: TenantBudgets
) -> TaskRegistry:
    """The task kind that runs the hosted agents ``drivers`` (by agent name); their usage
    is charged to their tenants' budgets (``tenants``). A call of a tool no Hands pool has
    declared (``tools``) yet waits for it, ``DECLARATION_WAITS`` times at most; then it is
    made, and ends failed, for the agent to read."""
    registry = TaskRegistry()
    session = registry.add(TaskKind(SESSION_KIND))
    resume = registry.add(TaskKind(RESUME_KIND))

    @resume.phase("resume", light=True)
    async def resumed_run(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        return Finish(task.input)

    def driver_of(task: TaskView) -> Driver:
        return drivers[task.input["agent"]]

    @session.phase("start", light=True)
    async def start(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        driver_of(task)  # fail early for an unknown agent
        try:
            spend = Spend.begin(None, task.input.get("budget"), ctx.now)
        except InvalidRequest as exc:
            return Fail({"reason": "invalid budget", "error": str(exc)})
        since = ctx.entries[-1].seq if ctx.entries else 0
        ctx.append_entry("user", {"text": task.input["text"]})
        return Goto("run", state={"since": since, **spend.carry()})

    @session.phase("run")
    async def run(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        state = {"since": task.state["since"], "spend": task.state["spend"]}
        spend = Spend.from_json(task.state["spend"], agent=None, now=ctx.now)
        if BUDGET_STOP in task.state:  # a raise ended a stop: the boundary is checked again
            lifted = resumed(task, spend, then="run")
            if isinstance(lifted, WaitSignal):
                return lifted
            spend = lifted
        # Before the model call this pass may make: the run's budget, then its tenant's.
        limit = spend.reached(ctx.now)
        if limit is not None:
            return spend.stop(limit, then="run", state=state, now=ctx.now)
        stopped = await tenants.stop(ctx, spend, then="run", state=state)
        if stopped is not None:
            return stopped
        journal = Journal.of(ctx.entries, since=task.state["since"])
        stop = await driver_of(task).run(task.input["text"], journal)
        answered = TenantCharge()
        for key, result in journal.taken.items():
            ctx.append_entry(STEP_ENTRY, {"key": key, "result": result})
        for turn in journal.fresh:
            ctx.append_entry(MODEL_ENTRY, turn.entry())
            spend = spend.charged(turn.usage())
            answered += TenantCharge(tokens=turn.usage().tokens)
        for record in journal.fresh_checkpoints:
            ctx.append_entry(CHECKPOINT_ENTRY, record)
        await tenants.charge(ctx, answered)
        turns = len(journal.turns) + len(journal.fresh)
        state["spend"] = spend.to_json()
        match stop:
            case Answered(output):
                return Finish({"output": output, "turns": turns})
            case Failed(error):
                return Fail({"reason": "agent run failed", "error": error, "turns": turns})
            case WantsTools(requests):
                return await dispatch(task, ctx, requests, spend, state, answered)
        return Goto("run", state=state)  # the next answer is the next pass's to ask for

    async def dispatch(
        task: TaskView,
        ctx: PhaseContext,
        requests: tuple[ToolRequest, ...],
        spend: Spend,
        state: dict[str, Any],
        answered: TenantCharge,
    ) -> Next:
        """The calls ``requests`` made durable, unless the budgets or the tools'
        declarations hold them back (the answer that asked for them is kept either way)."""
        waited = task.state.get("waited", 0)
        named = {r.tool for r in requests if not r.resume}
        declared = await tools.lookup(named)
        if len(declared) < len(named) and waited < DECLARATION_WAITS:
            # Its Hands have not declared the tools yet (starting with this Brain).
            return Sleep(
                then="run", seconds=DECLARATION_WAIT, state={**state, "waited": waited + 1}
            )
        calls = sum(not r.resume for r in requests)  # a decision of the run's own is no call
        limit = spend.reached(ctx.now, dispatching=calls)
        if limit is not None:
            return spend.stop(limit, then="run", state=state, now=ctx.now)
        stopped = await tenants.stop(
            ctx, spend, then="run", state=state, dispatching=calls, pending=answered
        )
        if stopped is not None:
            return stopped
        children: list[Call | Child] = []
        for request in requests:
            if request.approval:
                gate = ApprovalRequest(
                    tool=request.tool,
                    arguments=request.arguments,
                    call_id=request.call_id,
                    agent=task.input["agent"],
                    task_kind=RESUME_KIND if request.resume else None,
                )
                children.append(Child(APPROVAL_KIND, gate.input()))
            else:
                children.append(Call(request.tool, request.arguments))
        await tenants.charge(ctx, TenantCharge(tool_calls=calls))
        spend = spend.charged(Usage(tool_calls=calls))
        plan = [{"call_id": r.call_id, "name": r.tool} for r in requests]
        return Spawn(children, then="apply", state={**state, "plan": plan, **spend.carry()})

    @session.phase("apply", light=True)
    async def apply(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        for step, outcome in zip(task.state["plan"], task.children, strict=True):
            ctx.append_entry("tool_result", {**step, **call_result(outcome)})
        return Goto("run", state={"since": task.state["since"], "spend": task.state["spend"]})

    return registry
