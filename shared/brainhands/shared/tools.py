"""Tools: what a tool is called, which Hands pool runs it, how it may be replayed.

Hands hold the registry of the functions they run (users register them with
``hands.tool``) and publish each tool's declaration -- name, pool, policy, description,
argument schema -- in the store when they start. A Brain knows tools only by those
declarations (``shared.store.declarations.ToolCatalog``): it never imports tool code.

A tool that runs commands declares the sandbox they run in (``Sandbox``): the Hands
alone reads it (``hands.sandbox``), so it is no part of the published declaration.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import importlib
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from brainhands.shared.conditions import Condition, approval_reason
from brainhands.shared.errors import UnknownToolError
from brainhands.shared.limits import Limit, make_limit
from brainhands.shared.workspace_trees import check_name

ReplayPolicy = Literal["safe", "query", "unsafe"]
REPLAY_POLICIES: tuple[ReplayPolicy, ...] = ("safe", "query", "unsafe")


class RetryPolicy(BaseModel):
    """How failed and interrupted calls are tried again; the counts live in the operation row.

    ``max_attempts`` bounds the tool's own failures (a retryable ``ToolError``, or, for
    ``safe`` and ``query`` tools, an exception after which the effect may have happened).
    ``max_interruptions`` bounds something else: attempts cut short by their worker's death
    or a lost lease after the tool began (a holder that dies before interrupts nothing). A
    flaky fleet spends that budget, never the tool's, and a call that keeps killing its
    worker still ends once it is spent. Its backoff doubles up to ``max_interruption_delay``:
    by default the 20 interruptions span over 13 minutes of waits, so a call cut short again
    and again by a storm of restarts is still pending when the storm ends.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(default=3, ge=1)
    initial_delay: float = Field(default=0.5, ge=0)
    multiplier: float = Field(default=2.0, ge=1)
    max_delay: float = Field(default=30.0, ge=0)
    max_interruptions: int = Field(default=20, ge=0)
    interruption_delay: float = Field(default=0.25, ge=0)
    max_interruption_delay: float = Field(default=60.0, ge=0)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return float(min(self.max_delay, self.initial_delay * self.multiplier ** (attempt - 1)))

    def delay_after_interruption(self, interruption: int) -> float:
        """Seconds to wait before running again after interruption number ``interruption``."""
        backoff = self.interruption_delay * self.multiplier ** (interruption - 1)
        return float(min(self.max_interruption_delay, backoff))


class Sandbox(BaseModel):
    """The sandbox a tool's commands run in (``ctx.run``) and the limits each command gets.

    Only the call's working directory is writable; the rest of the file system is the
    system's programs and libraries, read-only, and ``read_only`` adds paths to it (a
    virtualenv, a toolchain). A command reaches no network but the ``hosts`` declared, each
    through the sandbox's proxy (``hands.egress``): ``name`` (ports 443 and 80),
    ``name:port``, or ``*.name`` for any name under it. Each process of it may use
    ``cpu_seconds`` of CPU and ``memory_bytes`` of address space; the sandbox holds at most
    ``processes`` processes; the command is stopped after ``wall_seconds`` or once it has
    printed more than ``output_bytes`` (stdout and stderr together).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_seconds: int = Field(default=60, ge=1)
    memory_bytes: int = Field(default=2 << 30, ge=16 << 20)
    processes: int = Field(default=64, ge=1)
    wall_seconds: float = Field(default=60.0, gt=0)
    output_bytes: int = Field(default=1 << 20, ge=1)
    read_only: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()

    @field_validator("read_only")
    @classmethod
    def _absolute(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        relative = [p for p in paths if not p.startswith("/")]
        if relative:
            raise ValueError(f"read_only paths must be absolute, not {relative}")
        return paths

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        for rule in hosts:
            host_rule(rule)
        return tuple(rule.lower() for rule in hosts)


_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOST_NAME = re.compile(rf"(\*\.)?{_LABEL}(\.{_LABEL})*")


def host_rule(rule: str) -> tuple[str, tuple[int, ...]]:
    """A declared host (``name``, ``name:port`` or ``*.name``) as its name and its port;
    no port: the ports are the proxy's default. ``ValueError`` says what is wrong."""
    name, colon, port = rule.lower().rpartition(":")
    if not colon:
        name, port = rule.lower(), ""
    if not _HOST_NAME.fullmatch(name) or len(name) > 253:
        raise ValueError(
            f"{rule!r} is not a host a sandbox may reach: a DNS name or IPv4 address, "
            "'*.' before a domain for any name under it, ':port' after it for one port"
        )
    if not colon:
        return name, ()
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{rule!r} names port {port!r}: a port is a number from 1 to 65535")
    return name, (int(port),)


SandboxDeclaration = Sandbox | Literal["none"] | None
"""What a tool says of the commands it runs: a ``Sandbox``; ``"none"``, the explicit word
of a trusted tool whose commands run on the Hands itself (under the default ``Sandbox``'s
limits); or None, a tool that runs no command."""


@dataclass(frozen=True)
class QueryAnswer:
    """What a tool's query function learned from the external system: whether the call
    took effect (``happened``), and then with which ``result`` -- or, with an ``error``, that
    it ended in the tool's definite failure (recorded ``failed``). ``happened`` None: the
    system cannot tell (recorded ``uncertain``, ``error`` saying why); False: the call may
    run again."""

    happened: bool | None
    result: Any = None
    error: str | None = None


class ToolContextLike(Protocol):
    """What a tool sees of its run (implemented by ``hands.ToolContext``)."""

    @property
    def operation_id(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    async def progress(self, message: str, **data: Any) -> None: ...
    def cancelled(self) -> bool: ...
    async def note_handle(self, handle: str) -> None: ...
    async def handle(self) -> str | None: ...


ToolFunction = Callable[[Any, Any], Awaitable[Any]]
QueryFunction = Callable[[Any, Any], Awaitable[QueryAnswer]]


_NOT_ON_THE_WIRE = re.compile(r"[^A-Za-z0-9_-]")


def wire_name(name: str) -> str:
    """The name a model is shown for the tool ``name``: model APIs take only letters,
    digits, ``_`` and ``-`` in a function's name, so each other character (the dot of an
    MCP tool's ``server.tool``) becomes ``_``. An agent's tools must differ on the wire
    too (``brain.agent.Agent``), so a model's call maps back to one tool."""
    return _NOT_ON_THE_WIRE.sub("_", name)


def function_schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions ``tools`` entry: a function named ``name`` (as ``wire_name``
    spells it) taking arguments described by the JSON schema ``parameters`` (copied: the
    caller's stays untouched)."""
    return {
        "type": "function",
        "function": {
            "name": wire_name(name),
            "description": description,
            "parameters": copy.deepcopy(parameters),
        },
    }


def describe_invalid_arguments(exc: ValidationError) -> str:
    """What is wrong with a call's arguments, one ``field: problem`` per error, in words a
    model (or an operator) can act on."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
        for e in exc.errors(include_url=False)
    )


@functools.cache
def model_schema(args: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of ``args`` (cached: do not change it)."""
    # Generating a schema costs far more than copying it, and every model request needs one.
    return args.model_json_schema()


@dataclass(frozen=True)
class ToolDeclaration:
    """What a process that does not run a tool knows of it: what the Hands serving it
    declared in the store (see ``brainhands.shared.store.declarations``)."""

    name: str
    pool: str
    policy: ReplayPolicy
    description: str
    args_schema: dict[str, Any]
    approval: bool = False
    """Every call of it waits for a decision (``Client.approve`` / ``deny``)."""
    compensate: str | None = None
    """The tool that undoes a succeeded call of it when the task that made the call fails
    or is cancelled (called with the original call's ``operation_id``, ``arguments`` and
    ``result``; a task kind may say otherwise: ``TaskKind.compensate``)."""
    policy_reason: str | None = None
    """Why the tool got its policy when that is not its author's word: an MCP tool's
    annotations, its server's trust, the configuration (``brainhands tools`` shows it)."""
    approval_when: dict[str, Any] | None = None
    """The calls of it that wait for a decision: those whose arguments meet this condition
    (``shared.conditions``, in its JSON form)."""

    def approval_reason(self, arguments: dict[str, Any]) -> str | None:
        """Why a call of it with ``arguments`` waits for a decision; None when it does not."""
        if self.approval:
            return "the tool's declaration asks for approval of every call"
        if self.approval_when is not None:
            return approval_reason(self.approval_when, arguments)
        return None

    def schema(self) -> dict[str, Any]:
        """The tool as a model sees it (chat-completions ``tools`` entry)."""
        return function_schema(self.name, self.description, self.args_schema)

    @property
    def digest(self) -> str:
        """Of the whole declaration: equal digests, equal declarations."""
        fields = dataclasses.asdict(self)
        for name in ("compensate", "policy_reason", "approval_when"):
            if fields[name] is None:
                del fields[name]  # a tool without one keeps the digest it had before
        content = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(content.encode()).hexdigest()


@dataclass(frozen=True)
class ToolSpec:
    """One registered tool."""

    name: str
    pool: str
    fn: ToolFunction
    args_model: type[BaseModel]
    policy: ReplayPolicy
    query: QueryFunction | None
    timeout: float
    retry: RetryPolicy
    description: str
    approval: bool = False
    compensate: str | None = None
    args_schema: dict[str, Any] | None = None
    """The argument schema the model sees, when ``args_model`` does not say it (a tool of an
    MCP server: the server listed the schema, and validates the arguments itself)."""
    policy_reason: str | None = None
    """Why it got its policy, when it was not declared by its author (an MCP tool)."""
    approval_when: Condition | None = None
    """Only the calls whose arguments meet it wait for a decision (``approval`` False)."""
    limit: Limit | None = None
    """Its own rate and concurrency limit, across every Hands (``shared.limits``); the
    operator's ``BRAINHANDS_TOOL_LIMITS`` may replace it."""
    sandbox: SandboxDeclaration = None
    """Where its commands run (``ctx.run``); None: it runs none."""
    workspace: str | None = None
    """The session's workspace it works in (``ctx.workdir``), materialised at its latest
    version; its changes are the next version, committed with its outcome."""
    workspace_read_only: bool = False
    """It only reads its workspace: calls run in parallel, and their changes are dropped."""

    def declaration(self) -> ToolDeclaration:
        """What the Hands serving this tool declare of it in the store."""
        given = self.args_schema if self.args_schema is not None else model_schema(self.args_model)
        schema = copy.deepcopy(given)
        return ToolDeclaration(
            self.name,
            self.pool,
            self.policy,
            self.description,
            schema,
            self.approval,
            self.compensate,
            self.policy_reason,
            self.approval_when.to_json() if self.approval_when is not None else None,
        )


@dataclass
class ToolRegistry:
    """Tools by name."""

    tools: dict[str, ToolSpec] = field(default_factory=dict)

    def add(self, spec: ToolSpec) -> None:
        existing = self.tools.get(spec.name)
        if existing is not None and existing.fn is not spec.fn:
            raise ValueError(f"tool {spec.name!r} is registered twice")
        self.tools[spec.name] = spec

    def get(self, name: str) -> ToolSpec:
        try:
            return self.tools[name]
        except KeyError:
            known = ", ".join(sorted(self.tools)) or "none"
            raise UnknownToolError(f"no tool named {name!r} (registered: {known})") from None

    def in_pool(self, pool: str) -> list[ToolSpec]:
        return [t for t in self.tools.values() if t.pool == pool]

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self.tools.values())


registry = ToolRegistry()
"""The process-wide registry that ``hands.tool`` fills."""


def load_tool_modules(paths: list[str]) -> ToolRegistry:
    """Import each module path (e.g. ``brainhands.examples.notify.tools``) so its tools register."""
    for path in paths:
        try:
            importlib.import_module(path)
        except ImportError as exc:
            raise UnknownToolError(f"cannot import tool module {path!r}: {exc}") from exc
    return registry


def declare(
    fn: ToolFunction,
    *,
    name: str | None,
    pool: str,
    policy: ReplayPolicy,
    query: QueryFunction | None,
    timeout: float,
    retry: RetryPolicy | None,
    description: str | None,
    approval: bool | Condition = False,
    compensate: str | None = None,
    rate: float | None = None,
    burst: int | None = None,
    concurrency: int | None = None,
    sandbox: SandboxDeclaration = None,
    workspace: str | None = None,
    workspace_read_only: bool = False,
) -> ToolSpec:
    """Build a ToolSpec from an ``async def tool(args: Model, ctx)`` function; validate it."""
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"tool {fn.__qualname__} must be an async function")
    if policy not in REPLAY_POLICIES:
        raise ValueError(f"policy must be one of {REPLAY_POLICIES}, not {policy!r}")
    if policy == "query" and query is None:
        raise ValueError(f"tool {fn.__qualname__} has policy 'query' but no query function")
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    if compensate is not None and not compensate:
        raise ValueError("compensate names the compensating tool")
    if not isinstance(approval, bool | Condition):
        raise TypeError(
            f"approval of tool {fn.__qualname__} is True, False or a condition on its "
            "arguments (brainhands.arg('amount') > 100), not "
            f"{type(approval).__name__}: the Brain decides it and never runs tool code"
        )
    if not (sandbox is None or sandbox == "none" or isinstance(sandbox, Sandbox)):
        raise TypeError(f"sandbox must be a Sandbox(...) or 'none', not {sandbox!r}")
    if workspace is not None:
        check_name(workspace)
    elif workspace_read_only:
        raise ValueError(f"tool {fn.__qualname__} reads no workspace: name it (workspace=...)")
    params = list(inspect.signature(fn, eval_str=True).parameters.values())
    if len(params) != 2:
        raise TypeError(f"tool {fn.__qualname__} must take (args: <pydantic model>, ctx)")
    args_model = params[0].annotation
    if not (inspect.isclass(args_model) and issubclass(args_model, BaseModel)):
        raise TypeError(
            f"the first parameter of tool {fn.__qualname__} must be annotated with a "
            "pydantic model (its schema is what the model sees)"
        )
    return ToolSpec(
        name=name or fn.__name__,
        pool=pool,
        fn=fn,
        args_model=args_model,
        policy=policy,
        query=query,
        timeout=timeout,
        retry=retry or RetryPolicy(),
        description=description or inspect.getdoc(fn) or "",
        approval=approval is True,
        compensate=compensate,
        approval_when=approval if isinstance(approval, Condition) else None,
        limit=make_limit(
            rate=rate, burst=burst, concurrency=concurrency, what=f"tool {fn.__qualname__}"
        ),
        sandbox=sandbox,
        workspace=workspace,
        workspace_read_only=workspace_read_only,
    )
