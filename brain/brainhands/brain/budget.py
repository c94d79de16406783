"""Budgets: what one run of an agent may spend, and where it stops when it has.

A run (one ``agent.session`` task: a submission and the follow-ups that join it) may be
limited in model tokens, model cost, tool calls and wall-clock seconds, by its agent
(``Agent(budget=Budget(...))``) and by its submission (``submit(..., budget={...})``); where
both limit the same thing, the lower limit holds, so a submitter never lifts an agent's.

What the run has spent travels in its tasks' committed state (a ``Spend``): the session task
hands it to each generation task, which adds its model answer's usage and the tool calls it
dispatches and hands it back. Each model answer's usage is also kept in its ``model`` entry,
in the commit that records the answer, so the session's view adds up to the same numbers.

The run is checked at two durable boundaries only: before a model call (in the session
task, before it starts a turn) and before a tool dispatch (in the commit that records the
answer asking for it). A run over its budget there stops in that commit, waiting for the
signal ``BUDGET_SIGNAL`` with the reason in its state (``BUDGET_STOP``): the session shows
``budget_exhausted`` and needs action. An operator who raises the budget sends that signal,
naming the stop it lifts, and the run goes on from where it stopped: nothing is asked or
dispatched twice, and a kill at any point leaves it where a kill of any other commit would.
A raise that names another stop (one sent for an earlier stop, of this run or of one
before it) is used up and lifts nothing: the run keeps waiting for its own (``resumed``).

A compaction's summary (``brain.context``) is a model call of the turn it shrinks: its usage
is charged with the turn's answer and kept in its checkpoint entry. A model call sent again
because the Brain waiting for it died (``brain.model_calls``) is charged again, counted
``resent``.

A tenant's budget limits all its sessions' runs together (``brain.tenant_budget``): a run
over it stops at the same boundaries, the same way, its stop scoped ``tenant``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from brainhands.brain.models.base import ModelResponse
from brainhands.brain.task import ReceivedSignal, TaskView, WaitSignal
from brainhands.shared.errors import InvalidRequest
from brainhands.shared.store import TenantBudget
from brainhands.shared.vocabulary import (
    BUDGET_SIGNAL,
    BUDGET_STOP,
    TENANT_SCOPE,
    budget_stop_ref,
    check_budget,
)

__all__ = ["Budget", "Price", "Spend", "Usage", "limit_reached", "response_usage", "resumed"]

log = logging.getLogger("brainhands.brain")

TENANT_RECHECK = 60.0
"""Seconds a run stopped at its tenant's budget waits for a raise before it reads that
budget again: a raise whose resuming scan ran before the stop was committed is not missed
(a stop at the run's own budget waits for its raise alone)."""
PER = 1_000_000
"""Prices are per this many tokens, as providers quote them."""


@dataclass(frozen=True)
class Price:
    """What a model's tokens cost, per million, in the unit the agent's ``cost`` budget
    uses (dollars, say)."""

    input: float
    output: float


@dataclass(frozen=True)
class Budget:
    """What a run of an agent may spend; None: no limit on that."""

    tokens: int | None = None
    """Model tokens, input and output together, over all the run's model calls."""
    cost: float | None = None
    """Model cost at the agent's ``price``."""
    tool_calls: int | None = None
    """Tool calls dispatched (task tools and calls waiting for approval included)."""
    seconds: float | None = None
    """Wall-clock seconds since the run began."""

    def __post_init__(self) -> None:
        self.limits()  # a negative limit is refused where the agent is declared

    def limits(self) -> dict[str, float]:
        """The limits it sets, as the JSON a submission or a raise carries."""
        return check_budget(asdict(self))


@dataclass(frozen=True)
class Usage:
    """What model answers and tool calls have spent."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    model_calls: int = 0
    """Model calls paid, those sent again included."""
    tool_calls: int = 0
    resent: int = 0
    """Model calls sent again because the Brain waiting for their answer died
    (``brain.model_calls``): each is in ``model_calls`` too, its tokens counted as those
    of the answer that came (the same prompt; the lost answer's length is not known)."""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    # Both run at every model turn: the fields are written out rather than read through
    # ``asdict``, which deep-copies.
    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost=self.cost + other.cost,
            model_calls=self.model_calls + other.model_calls,
            tool_calls=self.tool_calls + other.tool_calls,
            resent=self.resent + other.resent,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": self.cost,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "resent": self.resent,
            "tokens": self.tokens,
        }

    @classmethod
    def from_json(cls, data: Any) -> Usage:
        if not isinstance(data, dict):
            return cls()
        counts = {name: data.get(name, 0) for name in ("input_tokens", "output_tokens")}
        calls = {name: data.get(name, 0) for name in ("model_calls", "tool_calls", "resent")}
        return cls(**counts, **calls, cost=data.get("cost", 0.0))


def response_usage(response: ModelResponse, price: Price | None, *, resent: int = 0) -> Usage:
    """What one model answer spent: its billed tokens, and their cost at ``price`` (0
    without one); sent ``resent`` more times before it came (its Brains died waiting), as
    many times that again. A server that reports no usage spends no tokens as far as a
    budget can tell: a token budget then never stops the run."""
    paid = 1 + resent
    tokens = response.tokens
    if tokens is None:
        return Usage(model_calls=paid, resent=resent)
    cost = 0.0
    if price is not None:
        cost = (tokens.input * price.input + tokens.output * price.output) / PER
    return Usage(
        input_tokens=tokens.input * paid,
        output_tokens=tokens.output * paid,
        cost=cost * paid,
        model_calls=paid,
        resent=resent,
    )


@dataclass(frozen=True)
class Spend:
    """A run's budget and what it has spent so far: part of its tasks' committed state."""

    limits: dict[str, float] = field(default_factory=dict)
    used: Usage = field(default_factory=Usage)
    started: float = 0.0
    """When the run began (epoch seconds): the ``seconds`` limit counts from it."""

    @classmethod
    def begin(cls, agent: Budget | None, submitted: Any, now: float) -> Spend:
        """A run's spend at its start: the lower of the agent's and the submission's limits."""
        limits = agent.limits() if agent is not None else {}
        for name, value in check_budget(submitted or {}).items():
            limits[name] = min(value, limits.get(name, value))
        return cls(limits=limits, started=now)

    @classmethod
    def from_json(cls, data: Any, *, agent: Budget | None, now: float) -> Spend:
        """The spend a task's state holds; a run begun by a build before budgets counts
        from ``now`` under the agent's limits."""
        if not isinstance(data, dict):
            return cls.begin(agent, None, now)
        return cls(
            limits=check_budget(data.get("limits") or {}),
            used=Usage.from_json(data.get("used")),
            started=float(data.get("started", now)),
        )

    def to_json(self) -> dict[str, Any]:
        return {"limits": self.limits, "used": self.used.to_json(), "started": self.started}

    def carry(self) -> dict[str, Any]:
        """What a task's input, state or result carries of it."""
        return {"spend": self.to_json()}

    def charged(self, usage: Usage) -> Spend:
        return replace(self, used=self.used + usage)

    def reached(self, now: float, *, dispatching: int = 0) -> str | None:
        """The limit this run has reached (None: none), checked before a model call
        (``dispatching`` 0) or before dispatching that many tool calls (``limit_reached``)."""
        spent = {"tokens": self.used.tokens, "cost": self.used.cost, "seconds": now - self.started}
        return limit_reached(self.limits, spent, self.used.tool_calls, dispatching)

    def raised(self, signal: ReceivedSignal | None) -> Spend:
        """The spend under the limits a raise (the budget signal's payload) sets; those it
        does not name are kept. A payload that is no budget raises nothing."""
        payload = signal.payload if signal is not None else None
        try:
            limits = check_budget(payload.get("budget") if isinstance(payload, dict) else None)
        except InvalidRequest:
            return self
        return replace(self, limits={**self.limits, **limits})

    def stop(
        self,
        limit: str,
        *,
        then: str,
        state: dict[str, Any],
        now: float,
        tenant: TenantBudget | None = None,
    ) -> WaitSignal:
        """Stop the run, durably, until its budget (or, with ``tenant``, its tenant's) is
        raised: a wait for the budget signal whose state says why (the view reads it), then
        ``then`` runs with ``state``."""
        why = {"limit": limit, "budget": self.limits, "used": self.used.to_json(), "at": now}
        if tenant is not None:
            why.update(scope=TENANT_SCOPE, tenant=tenant.tenant, budget=tenant.limits)
            why["used"] = tenant.used
        return WaitSignal(
            BUDGET_SIGNAL,
            then=then,
            timeout=TENANT_RECHECK if tenant is not None else None,
            state={**state, "spend": self.to_json(), BUDGET_STOP: why},
        )


def limit_reached(
    limits: dict[str, float], spent: dict[str, float], tool_calls: float, dispatching: int
) -> str | None:
    """The first of ``limits`` that what was ``spent`` (tokens, cost, seconds: those it
    names) and ``tool_calls`` reach, before a model call (``dispatching`` 0) or before
    dispatching that many tool calls. Tokens, cost and seconds are reached once spent in
    full; tool calls once the dispatch would go past the limit, so a limit of 3 lets
    exactly 3 calls run."""
    for name, value in spent.items():
        if name in limits and value >= limits[name]:
            return name
    calls = tool_calls + dispatching
    if dispatching and "tool_calls" in limits and calls > limits["tool_calls"]:
        return "tool_calls"
    return None


def resumed(task: TaskView, spend: Spend, *, then: str) -> Spend | WaitSignal:
    """``spend`` under the raise ``task`` received at its stop, or, when that raise names
    another stop than the one in its state, the same stop again: the stale raise is used up
    and the run waits on for one meant for it (``then`` runs once that comes). A stop at
    the tenant's budget that waited ``TENANT_RECHECK`` seconds goes on as it was: the
    boundary it stopped at reads the tenant's budget again (and stops again if it must)."""
    stop, signal = task.state[BUDGET_STOP], task.signal
    if signal is not None and signal.timed_out:  # a tenant's stop: its budget is read again
        return spend
    payload = signal.payload if signal is not None else None
    named = payload.get("stop") if isinstance(payload, dict) else None
    if named == budget_stop_ref(task.id, stop["at"]):
        return spend.raised(signal)
    log.info(
        "a budget raise meant for another stop lifts nothing",
        extra={
            "event": "stale_budget_raise",
            "task_id": task.id,
            "signal_id": signal.signal_id if signal is not None else None,
        },
    )
    recheck = TENANT_RECHECK if stop.get("scope") == TENANT_SCOPE else None
    return WaitSignal(BUDGET_SIGNAL, then=then, timeout=recheck, state=dict(task.state))
