"""Model calls as durable operations: a model turn's ``request`` phase, and its ``await``
phase for a model that runs calls in the background.

A model call is committed before it is sent, as a tool call is: ``request`` is a heavy
phase, so it starts only after the commit that records its entry, and the call's id is
fixed by what that commit holds: the generation task's id and the request's attempt (the
transient failures before it), ``model-{task_id}/{attempt}`` (``request_id``). Every sending
of that request carries it (as its ``Idempotency-Key``, for a ``KeyedModel``), and the
``model`` entry of its answer records it (``request_record``).

A Brain that dies while a call is out leaves its task in the phase that made it; the Brain
that takes the session over enters that phase again, and the task's ``restarts`` (its
entries after a lost holder, which a phase that raised does not add to), against the count
committed when the request was entered, tell it so:

- a model that can only ``complete`` is sent the request again, under the same id. The
  first sending may have been paid for (its answer died with the Brain; a provider that
  honours the key answers the second with it, others generate again), so the answer's
  usage counts it: ``resent`` once per sending lost, its tokens as those of the answer that
  came (``brain.budget``), charged to the run's budget and added up in the session's view.
  A kill after the phase's entry but before the sending counts too: nothing tells the two
  apart.
- a ``BackgroundModel`` makes the call two durable steps. ``request`` begins a background
  response and hands its id on, committed with the task's state; ``await`` attaches to it
  and waits for its end. A Brain that dies in ``await`` leaves a response that goes on at
  the provider, and the next attaches to it by the committed id: one answer, paid once
  (the entry counts it ``reattached``). One that dies in ``request``, between the
  provider's accepting the call and the commit of its id, begins it again: a ``resent``
  call, as without background.

A background response that fails, is cancelled or is gone (``attach``'s
``TransientModelError``) is a transient failure of the call: asked again from ``request``,
under the next attempt, after the agent's retry delay.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from brainhands.brain.context import build_messages, show_documents, wants_compaction
from brainhands.brain.models.base import (
    BackgroundModel,
    Json,
    KeyedModel,
    ModelAdapter,
    ModelError,
    ModelResponse,
    TextSink,
    TransientModelError,
)
from brainhands.brain.registry import TaskKind
from brainhands.brain.task import Fail, Goto, Next, PhaseContext, Sleep, TaskView
from brainhands.shared import metrics
from brainhands.shared.store import ToolCatalog

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from brainhands.brain.agent import Agent, AgentRegistry

log = logging.getLogger("brainhands.brain")

DECLARATION_WAIT = 1.0
"""Seconds a turn sleeps before it looks again for granted tools not declared yet."""


def request_id(task_id: str, attempt: int) -> str:
    """The id of generation task ``task_id``'s request after ``attempt`` transient failures:
    the same at every sending of that request, and no other's (task ids are unique across
    deployments: ``brain.ids``)."""
    return f"model-{task_id}/{attempt}"


def request_record(state: dict[str, Any]) -> dict[str, Any]:
    """What a ``model`` entry records of the call its answer came from, out of the state of
    the task that made it: ``{"request": {"id", "resent"}}``, with ``response_id`` and
    ``reattached`` for a background call (nothing for a call made by a build before these)."""
    if "request_id" not in state:
        return {}
    record = {"id": state["request_id"], "resent": state.get("resent", 0)}
    if "response_id" in state:
        record.update(response_id=state["response_id"], reattached=state.get("reattached", 0))
    return {"request": record}


_IMPLEMENTS: dict[tuple[type, type], bool] = {}


def _implements(model: ModelAdapter, protocol: type) -> bool:
    """``isinstance(model, protocol)`` for a runtime-checkable protocol, answered once per
    class of model: the check looks up every member of the protocol each time (~12 us, at
    every model call), and an adapter's methods are its class's."""
    key = (type(model), protocol)
    found = _IMPLEMENTS.get(key)
    if found is None:
        found = _IMPLEMENTS[key] = isinstance(model, protocol)
    return found


def _keyed(model: ModelAdapter) -> TypeIs[KeyedModel]:
    return _implements(model, KeyedModel)


def _background(model: ModelAdapter) -> TypeIs[BackgroundModel]:
    return _implements(model, BackgroundModel)


async def send(
    model: ModelAdapter,
    messages: list[Json],
    tools: list[Json],
    key: str,
    on_text: TextSink | None,
) -> ModelResponse:
    """One call of ``model`` in the foreground, under the request id ``key`` if it can
    carry one."""
    if _keyed(model):
        return await model.complete_keyed(messages, tools, request_id=key, on_text=on_text)
    return await model.complete(messages, tools, on_text=on_text)


def request_phases(
    generate: TaskKind,
    agents: AgentRegistry,
    tools: ToolCatalog,
    model_of: Callable[[Agent], ModelAdapter],
    *,
    declaration_grace: float,
) -> None:
    """Add the phases that make a model turn's call to ``generate``: ``request``, then
    ``await`` for a background call; both hand the raw answer to ``tools``."""
    declaration_waits = math.ceil(declaration_grace / DECLARATION_WAIT)

    @generate.phase("request")
    async def request(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        agent = agents.get(task.input["agent"])
        state = dict(task.state)
        declared = await tools.lookup(agent.tools)
        missing = [name for name in agent.tools if name not in declared]
        waits = state.get("declaration_waits", 0)
        if missing and tools.young(declaration_grace) and waits < declaration_waits:
            state["declaration_waits"] = waits + 1
            log.info(
                "waiting for granted tools to be declared",
                extra={"event": "undeclared_tools", "task_id": task.id, "tools": missing},
            )
            return Sleep(then="request", seconds=DECLARATION_WAIT, state=state)
        system = show_documents(agent.system, agent.context, docs)
        messages = build_messages(system, [e for e in ctx.entries if e.seq <= state["upto"]])
        schemas = [declared[name].schema() for name in agent.tools if name in declared]
        schemas += [t.schema() for t in agent.task_tools]
        if wants_compaction(agent.context, state, messages, schemas):
            return Goto("compact", state=state)
        model = model_of(agent)
        key = state["request_id"] = request_id(task.id, state["attempt"])
        # Entered again after a kill (the task's restarts since the request was entered):
        # the call may have gone out.
        killed = task.restarts - state.get("restarts", task.restarts)
        state.update(resent=state.get("resent", 0) + killed, restarts=task.restarts)
        try:
            with metrics.labelled(metrics.MODEL_SECONDS, model.name).time():
                if _background(model):
                    response_id = await model.begin(messages, schemas, request_id=key)
                    return Goto("await", state={**state, "response_id": response_id})
                response = await send(model, messages, schemas, key, ctx.text_stream)
        except TransientModelError as exc:
            return retry(agent, state, exc)
        except ModelError as exc:
            return Fail({"reason": "model error", "error": str(exc)})
        return Goto("tools", state={**state, "raw": response.raw})

    @generate.phase("await")
    async def await_response(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        """Wait for the background response ``request`` began: the Brain that enters this
        phase again after a kill attaches to the same response."""
        agent = agents.get(task.input["agent"])
        killed = task.restarts - task.state.get("restarts", task.restarts)
        reattached = task.state.get("reattached", 0) + killed
        state = {**task.state, "reattached": reattached, "restarts": task.restarts}
        model = model_of(agent)
        if not _background(model):
            # A build whose model runs no calls in the background: the response begun is
            # left, paid for, and the request sent again.
            return Goto("request", state={**state, "resent": state.get("resent", 0) + 1})
        try:
            with metrics.labelled(metrics.MODEL_SECONDS, model.name).time():
                response = await model.attach(state["response_id"], on_text=ctx.text_stream)
        except TransientModelError as exc:
            return retry(agent, state, exc)
        except ModelError as exc:
            return Fail({"reason": "model error", "error": str(exc)})
        return Goto("tools", state={**state, "raw": response.raw})


def retry(agent: Agent, state: dict[str, Any], exc: TransientModelError) -> Next:
    """After a transient failure of the call: ``request`` again, under the next attempt,
    after the agent's backoff (or the server's ``Retry-After``); past the agent's
    ``model_attempts``, the turn fails."""
    state = {k: v for k, v in state.items() if k != "response_id"}
    state["attempt"] += 1
    state["last_error"] = str(exc)
    if state["attempt"] >= agent.model_attempts:
        error = {"reason": "model unavailable", "error": str(exc), "attempts": state["attempt"]}
        return Fail(error)
    delay = exc.retry_after or agent.retry_delay * 2 ** (state["attempt"] - 1)
    return Sleep(then="request", seconds=delay, state=state)
