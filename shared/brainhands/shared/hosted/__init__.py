"""Agents written with other frameworks, hosted by brainhands: what both roles know of them.

An application builds its agent with its framework (a ``pydantic_ai.Agent``, say) and hands
it to that framework's integration (``brainhands.shared.hosted.pydantic_ai.host``), which
returns a ``HostedAgent``. One module then serves both roles:

- its Hands (``brainhands hands --tools MODULE``) run the agent's tools: each becomes a
  brainhands tool named ``<agent>.<tool>`` on a Hands pool, under the replay policy the
  integration was given for it (``unsafe`` where none was given: never run again silently);
- its Brain (``brainhands brain --agents MODULE``, which reads the module's ``hosted``) runs
  the agent's loop (``brainhands.brain.hosted``): every model request a durable model call,
  every tool call a durable call of that tool.

What a tool's call sends back is an envelope (``returned`` / ``retry_asked``): a framework's
tool may answer, or ask the model to try again (Pydantic AI's ``ModelRetry``), and the Brain
must tell the two apart when it hands the outcome back to the framework.
"""

from __future__ import annotations

import contextvars
import dataclasses
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from brainhands.shared.errors import ConfigurationError
from brainhands.shared.tools import (
    QueryAnswer,
    QueryFunction,
    ReplayPolicy,
    RetryPolicy,
    ToolContextLike,
    ToolSpec,
    declare,
)

__all__ = [
    "ForeignArguments",
    "HostedAgent",
    "HostedTool",
    "Reply",
    "ToolPolicy",
    "foreign_tool",
    "read_reply",
    "require_version",
    "retry_asked",
    "returned",
    "tool_context",
    "version_refusal",
]

ForeignQuery = Callable[[dict[str, Any], ToolContextLike], Awaitable[QueryAnswer]]
"""A ``query`` tool's question to its external system: did the call with these arguments and
``ctx.operation_id`` happen?"""


@dataclass(frozen=True)
class ToolPolicy:
    """What the integration declares of one of the framework's tools."""

    policy: ReplayPolicy = "unsafe"
    query: ForeignQuery | None = None
    """Required for ``query``: asked what happened when a call was cut short."""
    pool: str | None = None
    """The Hands pool that runs it (None: the hosted agent's)."""
    timeout: float = 60.0
    retry: RetryPolicy | None = None


@dataclass(frozen=True)
class HostedTool:
    """One of a hosted agent's tools: its name in the framework, and in brainhands."""

    name: str
    """As the framework (and its model) calls it."""
    declared: str
    """As brainhands declares it: ``<agent>.<name>``."""
    approval: bool = False
    """The framework marks its calls as needing approval."""


@dataclass(frozen=True)
class HostedAgent:
    """A framework's agent as brainhands runs it."""

    name: str
    framework: str
    """Which Brain driver runs it (``brainhands.brain.hosted``)."""
    agent: Any
    """The framework's own agent object."""
    tools: tuple[HostedTool, ...] = field(default=())
    deps: Callable[[], Any] | None = None
    """Makes the run's dependencies (the framework's ``deps``), in each process that needs
    them: a Brain for each pass, a Hands for each tool call (None: no dependencies)."""
    output: Any = None
    """What the run must answer with, where the framework asks it of a run rather than of
    the agent (AgentScope's ``structured_schema``); None: the framework's own answer."""

    def make_deps(self) -> Any:
        return self.deps() if self.deps is not None else None

    def tool(self, name: str) -> HostedTool | None:
        return next((t for t in self.tools if t.name == name), None)


class ForeignArguments(BaseModel):
    """A hosted tool's arguments, passed on as the model sent them: the framework validates
    them against the schema it gave the model."""

    model_config = ConfigDict(extra="allow", frozen=True)


# The envelope of a hosted tool's result -------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """What a hosted tool's call came back with: a value, or a request that the model try
    again (with the message the tool gave)."""

    kind: Literal["returned", "retry"]
    value: Any


def returned(value: Any) -> dict[str, Any]:
    return {"returned": value}


def retry_asked(message: str) -> dict[str, Any]:
    return {"retry": message}


def read_reply(result: Any) -> Reply:
    """The envelope in a succeeded call's ``result``."""
    if isinstance(result, dict) and set(result) == {"retry"}:
        return Reply("retry", str(result["retry"]))
    if isinstance(result, dict) and set(result) == {"returned"}:
        return Reply("returned", result["returned"])
    raise ValueError(f"not a hosted tool's reply: {result!r}")


# The tool's context, for tool code that takes the framework's own arguments only --------

_context: contextvars.ContextVar[ToolContextLike] = contextvars.ContextVar("hosted_tool_context")


def tool_context() -> ToolContextLike:
    """The brainhands context of the hosted tool call running now: its ``operation_id`` is
    the idempotency key to hand the external system (a framework's tool function is called
    with the framework's arguments, so it reads it from here)."""
    try:
        return _context.get()
    except LookupError:
        raise RuntimeError("tool_context() is only available inside a hosted tool call") from None


@contextmanager
def running(ctx: ToolContextLike) -> Iterator[None]:
    token = _context.set(ctx)
    try:
        yield
    finally:
        _context.reset(token)


def foreign_tool(
    *,
    name: str,
    pool: str,
    declared: ToolPolicy,
    description: str,
    schema: dict[str, Any],
    call: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
    approval: bool = False,
) -> ToolSpec:
    """A brainhands tool that runs a framework's tool: ``call`` gets the arguments and gives
    the reply's envelope; ``tool_context()`` is set while it runs."""

    async def run(args: ForeignArguments, ctx: ToolContextLike) -> Any:
        with running(ctx):
            return await call(args.model_dump())

    query: QueryFunction | None = None
    if declared.query is not None:
        ask = declared.query

        async def query_fn(args: ForeignArguments, ctx: ToolContextLike) -> QueryAnswer:
            answer = await ask(args.model_dump(), ctx)
            return QueryAnswer(answer.happened, returned(answer.result))

        query = query_fn
    spec = declare(
        run,
        name=name,
        pool=declared.pool or pool,
        policy=declared.policy,
        query=query,
        timeout=declared.timeout,
        retry=declared.retry,
        description=description,
        approval=approval,
    )
    return dataclasses.replace(spec, args_schema=schema)


# Version ranges --------------------------------------------------------------------------


def _release(version: str) -> tuple[int, ...]:
    match = re.match(r"\d+(\.\d+)*", version)
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(0).split("."))


def version_refusal(framework: str, installed: str, minimum: str, below: str) -> str | None:
    """Why ``installed`` of ``framework`` cannot be hosted (None: it can): the integration
    knows the versions from ``minimum`` up to, not including, ``below``."""
    if _release(minimum) <= _release(installed) < _release(below):
        return None
    return (
        f"{framework} {installed} is installed, but brainhands supports {framework} "
        f">={minimum},<{below}: install a version in that range"
    )


def require_version(framework: str, installed: str, minimum: str, below: str) -> None:
    """Refuse, at start-up, a framework version the integration does not know."""
    refusal = version_refusal(framework, installed, minimum, below)
    if refusal is not None:
        raise ConfigurationError(refusal)
