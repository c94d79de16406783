"""Agents: a model, a system prompt and granted tools, run as durable tasks.

One submission starts an ``agent.session`` task: it appends the user's entry, then runs
one ``agent.generate`` task per model turn until the model answers without tool calls.
Between turns it takes in the messages submitted to the session meanwhile (a ``FOLLOW_UP``
wait that does not wait; meanwhile means up to the pass's last read of its queued
submissions, under a second old, and a message queued after that starts the next loop):
each becomes a user entry, in order, and the loop goes on with another turn, so one session
never runs two agent loops; they are answered with the answer that ends the loop. A
generation task's phases:

- ``prepare``: fix the context position (the entries the request may see) and the model;
- ``request``: call the model with the schemas of the granted tools, as their Hands pools
  declared them (a granted tool not declared yet is waited for, a second at a time, for
  the Brain's declaration grace, then left out); transient failures sleep and retry, the
  attempt count in the task's state; the raw response is handed on in the state, so once
  committed the model is never asked the same question again; a prompt over the agent's
  ``context`` budget is compacted first (``compact``, ``checkpoint``: ``brain.context``).
  The call has a stable id, and a call sent again after a kill is counted ``resent``; a
  model that runs calls in the background is waited for in ``await``, which a Brain taking
  over after a kill re-enters, attaching to the same response (``brain.model_calls``);
- ``tools``: appends the raw response as an entry (an answer cut off at the model's output
  limit goes no further: the agent's ``on_length`` fails the session or continues it),
  creates one tool task per granted call
  (frozen arguments, the default operation id, rooted in the session's uid) with its job in
  the outbox, and waits for them all; calls of tools the agent was not granted are
  refused here and never dispatched, as are calls of granted tools no Hands pool has
  declared. It is light: all of this goes into the commit that
  records the request's result, so no tool intent ever exists without the raw response it
  came from, and a response is either durable with its intents or not at all. Arguments of
  a task tool that its argument model rejects are refused the same way, so no task ever
  starts from input it cannot read;
- ``apply``: appends the tool results in call order, uncertain and failed ones included
  and labelled as such, for the model to judge.

A call of a tool that needs approval (its declaration says so, for every call or for those
whose arguments meet its condition, or the agent's ``approval`` names it) is not
dispatched in ``tools``: it becomes an approval task (``brain.approval``)
that dispatches it once approved, and whose denial ``apply`` hands the model as a refusal.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from brainhands.brain.approval import ApprovalRequest, Expiry, approval_kinds
from brainhands.brain.budget import Budget, Price, Spend, Usage, response_usage, resumed
from brainhands.brain.context import (
    ContextPolicy,
    compacting,
    compaction_phases,
    context_window,
    default_policy,
)
from brainhands.brain.decide import call_result
from brainhands.brain.edits import start_from_input
from brainhands.brain.hosted.session import SESSION_KIND as HOSTED_SESSION
from brainhands.brain.model_calls import request_phases, request_record
from brainhands.brain.models.base import ModelAdapter, ModelError, ToolCall
from brainhands.brain.registry import TaskKind, TaskRegistry
from brainhands.brain.task import (
    FOLLOW_UP,
    Call,
    Child,
    Fail,
    Finish,
    Goto,
    Next,
    PhaseContext,
    Spawn,
    TaskView,
    WaitSignal,
)
from brainhands.brain.tenant_budget import TenantBudgets
from brainhands.shared.errors import ConfigurationError, InvalidRequest
from brainhands.shared.hosted import HostedAgent
from brainhands.shared.store import SubmissionRecord, TenantCharge, ToolCatalog
from brainhands.shared.tools import (
    ToolDeclaration,
    describe_invalid_arguments,
    function_schema,
    model_schema,
    wire_name,
)
from brainhands.shared.vocabulary import APPROVAL_KIND, BUDGET_STOP

log = logging.getLogger("brainhands.brain")

CONTINUE_PROMPT = (
    "Your answer was cut off at the output token limit. Continue exactly where it stopped, "
    "without repeating what you already wrote."
)
"""What a ``continuation`` entry tells the model after an answer cut off (``on_length``)."""


@dataclass(frozen=True)
class TaskTool:
    """A tool the model sees that the Brain runs as a durable task of ``kind`` rather than
    as one Hands call: for work with steps of its own (a batch of emails, say), which then
    recovers step by step instead of as one black box."""

    name: str
    kind: str
    args_model: type[BaseModel]
    description: str

    def schema(self) -> dict[str, Any]:
        return function_schema(self.name, self.description, model_schema(self.args_model))

    def refusal(self, arguments: dict[str, Any]) -> str | None:
        """Why the model's ``arguments`` cannot start the task (None when they can): a task
        is only created from arguments its ``args_model`` accepts."""
        try:
            self.args_model.model_validate(arguments)
        except ValidationError as exc:
            return f"invalid arguments for {self.name!r}: {describe_invalid_arguments(exc)}"
        return None


@dataclass(frozen=True)
class Agent:
    """An agent definition: what the Brain needs to run its turns."""

    name: str
    system: str
    model: ModelAdapter | None = None
    """None: the model the Brain's settings describe (``BRAINHANDS_MODEL_*``)."""
    tools: tuple[str, ...] = ()
    """The Hands tools it may call: with ``task_tools``, the session's authorization."""
    task_tools: tuple[TaskTool, ...] = ()
    max_turns: int = 8
    max_tool_calls: int = 8
    """Tool calls per model turn; calls beyond are refused."""
    model_attempts: int = 4
    retry_delay: float = 1.0
    approval: tuple[str, ...] = ()
    """Granted tools (task tools too) whose calls by this agent wait for approval, besides
    the tools whose declaration requires it for everyone."""
    approval_expiry: float | None = None
    """Seconds a call may wait for its decision (None: no limit); then ``on_expiry``."""
    on_expiry: Expiry = "deny"
    """``deny``: an expired call is denied; ``escalate``: it stays pending, marked
    escalated, with no further expiry."""
    on_length: Literal["fail", "continue"] = "fail"
    """What follows an answer cut off at the model's output-token limit (chat completions'
    ``length`` stop, Anthropic's ``max_tokens``). Such an answer is recorded like any other
    and never asked again (the same request would stop at the same limit); tool calls it
    had begun are never run. ``fail`` (the default): the session fails with the reason
    ``answer cut off``, so half an answer is never taken for a whole one; the fix is a
    larger ``max_tokens`` (``BRAINHANDS_MODEL_MAX_TOKENS``). ``continue``: a
    ``continuation`` entry asks the model to go on where it stopped, in a turn of its own
    (counted in ``max_turns``); the session's answer is the cut-off texts joined with the
    final one."""
    budget: Budget | None = None
    """What one run may spend (``brain.budget``): reached, the run stops until it is raised."""
    price: Price | None = None
    """What its model's tokens cost (per million): how a ``cost`` budget is counted."""
    context: ContextPolicy | None = None
    """How big its prompt may grow, and how it is compacted (``brain.context``); None: the
    whole conversation is sent each turn."""

    def __post_init__(self) -> None:
        wire: dict[str, str] = {}
        for name in (*self.tools, *(t.name for t in self.task_tools)):
            other = wire.setdefault(wire_name(name), name)
            if other != name:
                raise ValueError(
                    f"agent {self.name!r}: tools {other!r} and {name!r} are both "
                    f"{wire_name(name)!r} to a model (only letters, digits, _ and - are kept)"
                )

    def tool_named(self, call: ToolCall) -> ToolCall:
        """``call`` with the name of the tool it calls (a model names it as ``wire_name``
        spells it; a name it gives as is passes unchanged)."""
        for name in (*self.tools, *(t.name for t in self.task_tools)):
            if call.name != name and wire_name(name) == call.name:
                return dataclasses.replace(call, name=name)
        return call


@dataclass
class AgentRegistry:
    agents: dict[str, Agent] = field(default_factory=dict)
    hosted: dict[str, HostedAgent] = field(default_factory=dict)
    """Agents of other frameworks (``brain.hosted``), by name."""

    def add(self, agent: Agent) -> Agent:
        self.agents[agent.name] = agent
        return agent

    def get(self, name: str) -> Agent:
        if name not in self.agents:
            raise ModelError(f"no agent named {name!r} in this build")
        return self.agents[name]

    def with_model(self, model: ModelAdapter, *, window: int | None = None) -> AgentRegistry:
        """A copy in which the agents that name no model use ``model``, and the agents with
        no context policy get one sized from their model's context window
        (``context.default_policy``): ``window`` for ``model`` if given
        (``BRAINHANDS_MODEL_CONTEXT_WINDOW``), else the window known for the model's name.
        An agent whose model's window is not known keeps none, and says so in the log."""
        agents = {}
        for name, agent in self.agents.items():
            own = agent.model is not None
            if not own:
                agent = dataclasses.replace(agent, model=model)
            if agent.context is None:
                agent = _with_default_context(agent, None if own else window)
            agents[name] = agent
        return AgentRegistry(agents, self.hosted)


def _with_default_context(agent: Agent, window: int | None) -> Agent:
    assert agent.model is not None
    window = window or context_window(agent.model.name)
    if window is None:
        log.warning(
            "no context window known for the model of an agent: its prompts are not compacted",
            extra={
                "event": "context_window_unknown",
                "agent": agent.name,
                "model": agent.model.name,
                "fix": "give it a ContextPolicy, or set BRAINHANDS_MODEL_CONTEXT_WINDOW",
            },
        )
        return agent
    return dataclasses.replace(agent, context=default_policy(window))


def approval_gate(agent: Agent, call: ToolCall, declared: ToolDeclaration | None) -> str | None:
    """Why ``agent``'s ``call`` waits for approval (its grant says so, or the declaration of
    the tool, ``declared``: None for a task tool); None when it is dispatched at once."""
    if call.name in agent.approval:
        return f"agent {agent.name!r} is granted the tool under approval"
    return declared.approval_reason(call.arguments) if declared is not None else None


def start_agent_or_task(submission: SubmissionRecord, hosted: Collection[str] = ()) -> Child:
    """Submissions naming an ``agent`` start its session (a ``hosted.session`` for the
    names in ``hosted``); others name a task kind."""
    data = submission.input
    if isinstance(data, dict) and "agent" in data:
        text = data.get("text", "")
        own = {"budget": data["budget"]} if data.get("budget") is not None else {}
        if data["agent"] in hosted:
            return Child(HOSTED_SESSION, {"agent": data["agent"], "text": text, **own})
        return Child("agent.session", {"agent": data["agent"], "text": text, **own})
    return start_from_input(submission)


def agent_kinds(
    agents: AgentRegistry,
    tools: ToolCatalog,
    *,
    declaration_grace: float = 30.0,
    tenants: TenantBudgets | None = None,
) -> TaskRegistry:
    """The task kinds that run ``agents`` (added to a Brain's registry); every agent has a
    model by now (``AgentRegistry.with_model`` gives one to those that name none). Runs are
    held to their tenants' budgets too (``tenants``; by default, as the store of ``tools``
    keeps them: ``brain.tenant_budget``).

    ``tools`` is what the Hands pools declared; a granted tool missing from it is waited
    for, up to ``declaration_grace`` seconds, while this process is that young (its Hands
    may be starting with it)."""
    unset = sorted(name for name, agent in agents.agents.items() if agent.model is None)
    if unset:
        raise ConfigurationError(f"agents {unset} name no model and none was given")
    registry = approval_kinds()
    budgets = tenants if tenants is not None else TenantBudgets(tools.store)

    def model_of(agent: Agent) -> ModelAdapter:
        if agent.model is None:  # one added to the registry after the check above
            raise ConfigurationError(f"agent {agent.name!r} names no model")
        return agent.model

    session = registry.add(TaskKind("agent.session"))
    generate = registry.add(TaskKind("agent.generate"))

    async def begin_turn(
        task: TaskView, turn: int, partial: str, spend: Spend, ctx: PhaseContext
    ) -> Next:
        """Start model turn ``turn`` (a generation task), or fail past the agent's limit, or
        stop at the run's budget or its tenant's; ``partial``: the answers cut off before it
        (``on_length``)."""
        agent = agents.get(task.input["agent"])
        if turn > agent.max_turns:
            return Fail({"reason": "turn limit", "turns": agent.max_turns})
        state: dict[str, Any] = {"turn": turn, "partial": partial} if partial else {"turn": turn}
        limit = spend.reached(ctx.now)
        if limit is not None:
            return spend.stop(limit, then="resume", state=state, now=ctx.now)
        stopped = await budgets.stop(ctx, spend, then="resume", state=state)
        if stopped is not None:
            return stopped
        child = Child("agent.generate", {"agent": agent.name, "turn": turn, **spend.carry()})
        return Spawn([child], then="next", state={**state, **spend.carry()})

    def spend_of(task: TaskView, holder: Any, ctx: PhaseContext) -> Spend:
        """The run's spend as ``holder`` (a task's input or state) carries it."""
        budget = agents.get(task.input["agent"]).budget
        return Spend.from_json(holder.get("spend"), agent=budget, now=ctx.now)

    @session.phase("start", light=True)
    async def start(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        agent = agents.get(task.input["agent"])  # fail early for an unknown agent
        try:
            spend = Spend.begin(agent.budget, task.input.get("budget"), ctx.now)
        except InvalidRequest as exc:
            return Fail({"reason": "invalid budget", "error": str(exc)})
        ctx.append_entry("user", {"text": task.input["text"]})
        return await begin_turn(task, 1, "", spend, ctx)

    @session.phase("turn", light=True)
    async def turn(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        # Sessions saved by builds that went through this phase between turns.
        spend = spend_of(task, task.state, ctx)
        return await begin_turn(task, task.state["turn"], "", spend, ctx)

    @session.phase("resume", light=True)
    async def resume(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        """The budget was raised (``brain.budget``): start the turn it stopped before."""
        spend = resumed(task, spend_of(task, task.state, ctx), then="resume")
        if isinstance(spend, WaitSignal):
            return spend
        partial = task.state.get("partial", "")
        return await begin_turn(task, task.state["turn"], partial, spend, ctx)

    @session.phase("next", light=True)
    async def next_turn(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        [done] = task.children
        if done.outcome != "succeeded":
            return Fail({"reason": "model turn failed", "error": done.error})
        final, partial = done.result.get("final"), task.state.get("partial", "")
        if "cut_off" in done.result:
            partial += done.result["cut_off"]  # the final answer will complete it
        elif final is None:
            partial = ""  # a tool turn: what was cut off before it is not the answer's start
        state = {"turn": task.state["turn"], "final": final, "joined": 0, "partial": partial}
        state["spend"] = done.result.get("spend") or task.state.get("spend")
        return take_follow_ups(state)

    def take_follow_ups(state: dict[str, Any]) -> WaitSignal:
        """Between turns, take in the messages sent to the session meanwhile (no wait)."""
        return WaitSignal(FOLLOW_UP, then="absorb", timeout=0, state=state)

    @session.phase("absorb", light=True)
    async def absorb(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        """A follow-up joins the conversation (then look for the next one), or there is
        none: answer, or go on with the next turn."""
        state, signal = dict(task.state), task.signal
        assert signal is not None, "absorb runs only after the follow-up wait"
        if not signal.timed_out:
            ctx.append_entry("user", {"text": signal.payload.get("text", "")})
            return take_follow_ups({**state, "joined": state["joined"] + 1})
        partial = state.get("partial", "")
        if state["final"] is not None and not state["joined"]:
            return Finish({"text": partial + state["final"], "turns": state["turn"]})
        return await begin_turn(task, state["turn"] + 1, partial, spend_of(task, state, ctx), ctx)

    @generate.phase("prepare", light=True)
    async def prepare(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        agent = agents.get(task.input["agent"])
        upto = ctx.entries[-1].seq if ctx.entries else 0
        state = {"upto": upto, "model": model_of(agent).name, "attempt": 0}
        return Goto("request", state={**state, "restarts": task.restarts})

    @generate.phase("tools", light=True)
    async def dispatch(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        agent = agents.get(task.input["agent"])
        raw = task.state["raw"]
        response = model_of(agent).parse(raw)
        answered = None  # what the answer this commit records charges its tenant
        if BUDGET_STOP in task.state:  # a raise ended a budget stop: recorded and charged then
            lifted = resumed(task, spend_of(task, task.state, ctx), then="tools")
            if isinstance(lifted, WaitSignal):
                return lifted
            spend = lifted
        else:
            usage = response_usage(response, agent.price, resent=task.state.get("resent", 0))
            # The turn's summaries, if it compacted its context, were model calls of it too.
            turn = usage + compacting(task.state)
            spend = spend_of(task, task.input, ctx).charged(turn)
            answered = TenantCharge(tokens=turn.tokens, cost=turn.cost)
            await budgets.charge(ctx, answered)
            # The message replays the answer in later requests, whatever protocol it came in.
            said = {"raw": raw, "model": task.state["model"], "message": response.as_message()}
            said.update(request_record(task.state))
            ctx.append_entry("model", {**said, "usage": usage.to_json()})
        if response.cut_off is not None:
            return cut_off(agent, response.cut_off, response.text or "", ctx, spend)
        if not response.tool_calls:
            return Finish({"final": response.text or "", **spend.carry()})
        task_tools = {t.name: t for t in agent.task_tools}
        calls = [agent.tool_named(call) for call in response.tool_calls]
        declared = await tools.lookup(c.name for c in calls if c.name in agent.tools)
        children: list[Call | Child] = []
        plan = []
        for n, call in enumerate(calls):
            refusal = None
            task_tool = task_tools.get(call.name)
            if call.name not in agent.tools and task_tool is None:
                refusal = f"tool {call.name!r} is not granted to agent {agent.name!r}"
            elif task_tool is None and call.name not in declared:
                refusal = f"tool {call.name!r} is not declared by any Hands pool"
            elif n >= agent.max_tool_calls:
                refusal = f"more than {agent.max_tool_calls} tool calls in one turn"
            elif task_tool is not None:
                refusal = task_tool.refusal(call.arguments)
            plan.append({"call_id": call.id, "name": call.name, "refused": refusal})
            if refusal is not None:
                continue
            gate = approval_gate(agent, call, None if task_tool else declared[call.name])
            if gate is not None:
                request = ApprovalRequest(
                    tool=call.name,
                    arguments=call.arguments,
                    call_id=call.id,
                    agent=agent.name,
                    expires_in=agent.approval_expiry,
                    on_expiry=agent.on_expiry,
                    task_kind=task_tool.kind if task_tool is not None else None,
                    reason=gate,
                )
                children.append(Child(APPROVAL_KIND, request.input()))
            elif task_tool is not None:
                children.append(Child(task_tool.kind, call.arguments))
            else:
                # The default operation id: rooted in the session's uid, so no other
                # deployment or re-created session sends the same key.
                children.append(Call(call.name, call.arguments))
        # Nothing dispatched at a stop: the raise that ends it runs this phase again.
        limit = spend.reached(ctx.now, dispatching=len(children)) if children else None
        if limit is not None:
            return spend.stop(limit, then="tools", state=dict(task.state), now=ctx.now)
        # The turn goes on (to its calls, or to another answer): checked against the tenant's
        # budget with this answer counted, which the tenant's usage in the store lacks until
        # this commit -- and the next turn's check, in the same commit, would miss.
        stopped = await budgets.stop(
            ctx,
            spend,
            then="tools",
            state=dict(task.state),
            dispatching=len(children),
            pending=answered,
        )
        if stopped is not None:
            return stopped
        if children:
            await budgets.charge(ctx, TenantCharge(tool_calls=len(children)))
        spend = spend.charged(Usage(tool_calls=len(children)))
        return Spawn(children, then="apply", state={"plan": plan, **spend.carry()})

    def cut_off(agent: Agent, stop_reason: str, text: str, ctx: PhaseContext, spend: Spend) -> Next:
        """What the agent's ``on_length`` makes of an answer cut off at the output limit."""
        if agent.on_length == "continue":
            ctx.append_entry("continuation", {"text": CONTINUE_PROMPT, "cut_off": stop_reason})
            return Finish({"cut_off": text, **spend.carry()})
        return Fail(
            {
                "reason": "answer cut off",
                "stop_reason": stop_reason,
                "error": "the answer reached the model's output token limit: raise its "
                "max_tokens, or let the agent continue (on_length='continue')",
            }
        )

    @generate.phase("apply", light=True)
    async def apply(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        outcomes = iter(task.children)
        for step in task.state["plan"]:
            result: dict[str, Any] = {"call_id": step["call_id"], "name": step["name"]}
            if step["refused"]:
                result.update(status="refused", error=step["refused"])
            else:
                result.update(call_result(next(outcomes)))
            ctx.append_entry("tool_result", result)
        return Finish({"continue": True, "spend": task.state.get("spend")})

    request_phases(generate, agents, tools, model_of, declaration_grace=declaration_grace)
    compaction_phases(generate, agents, model_of)
    return registry


def load_agent_modules(paths: list[str]) -> AgentRegistry:
    """Import each module path and merge the ``agents`` (an AgentRegistry) each defines,
    and its ``hosted`` (a ``HostedAgent``, or several in a tuple or list)."""
    import importlib

    merged = AgentRegistry()
    for path in paths:
        module = importlib.import_module(path)
        found = getattr(module, "agents", None)
        hosted = getattr(module, "hosted", None)
        if isinstance(hosted, HostedAgent):
            hosted = (hosted,)
        if not isinstance(found, AgentRegistry) and hosted is None:
            raise ModelError(
                f"agent module {path!r} defines no `agents = AgentRegistry()` and no `hosted`"
            )
        if isinstance(found, AgentRegistry):
            merged.agents.update(found.agents)
        for agent in hosted or ():
            if not isinstance(agent, HostedAgent):
                raise ModelError(f"agent module {path!r}: `hosted` holds {agent!r}")
            merged.hosted[agent.name] = agent
    return merged
