"""The tools of MCP servers as Hands tools: one ``ToolSpec`` per listed tool, named
``server.tool``, with the input schema the server listed and the policy
``hands.mcp.policy`` gives it.

A call's outcome maps onto the worker's vocabulary: a result with ``isError`` is the
tool's definite failure (a ``ToolError`` that is not retryable); whatever the connection
raises keeps its meaning (``hands.mcp.connection``). A call answered with a task commits
the task's id before it follows the task (``hands.mcp.tasks``). A ``query`` tool asks its
lookup tool with the operation id, which answers ``{"found": bool, "result": ...}``, or,
with none configured, follows the task whose id the interrupted call committed: each call
of such a tool commits that it is being sent before it goes out, so one that went out and
committed no task id is told apart (its outcome is ``uncertain``) from one that never went
out (it runs again).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mcp.types import CallToolResult, TextContent, Tool
from pydantic import BaseModel, ConfigDict

from brainhands.hands.mcp.config import HttpServer, McpConfig, StdioServer, ToolOverride
from brainhands.hands.mcp.connection import McpConnection, describe
from brainhands.hands.mcp.policy import Hints, McpPolicy, tool_policy
from brainhands.hands.mcp.tasks import CreatedTask, TaskEnded
from brainhands.shared.errors import BrainhandsError, ToolError
from brainhands.shared.store import Store
from brainhands.shared.tools import (
    QueryAnswer,
    QueryFunction,
    RetryPolicy,
    ToolContextLike,
    ToolDeclaration,
    ToolRegistry,
    ToolSpec,
)

log = logging.getLogger("brainhands.hands.mcp")

Worker = Callable[[asyncio.Event], Awaitable[None]]
"""What a Hands process serves until its stop event is set (``HandsWorker.run``)."""


class McpArguments(BaseModel):
    """The arguments of an MCP tool, passed on as they came: the server validates them
    against the schema it listed, which is the schema the model saw."""

    model_config = ConfigDict(extra="allow", frozen=True)


def result_value(result: CallToolResult) -> Any:
    """What a call returned, as the model reads it: the structured content when the server
    gave one, else the text of a single text block, else every block as JSON."""
    if result.structured_content is not None:
        return result.structured_content
    if len(result.content) == 1 and isinstance(result.content[0], TextContent):
        return result.content[0].text
    return [
        block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content
    ]


def error_text(result: CallToolResult) -> str:
    """The message of a result with ``isError``."""
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    return "; ".join(texts) or "the tool reported an error"


def lookup_answer(value: Any) -> QueryAnswer:
    """What a lookup tool's answer says: ``{"found": true, "result": ...}`` (as structured
    content, or as JSON text) means the call happened; anything else, that it did not."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return QueryAnswer(False)
    if isinstance(value, dict) and value.get("found") is True:
        return QueryAnswer(True, value.get("result"))
    return QueryAnswer(False)


def _lookup_error(found: CallToolResult | CreatedTask) -> str:
    if isinstance(found, CreatedTask):
        return "it answered with a task"
    return error_text(found)


SENDING = "sending"
"""The handle of a call about to go out, committed before it is sent: a successor that
finds it knows the call may have reached the server."""
TASK = "task:"
"""The handle of a call the server answered with a task: this, then the task's id."""


async def task_answer(connection: McpConnection, handle: str | None) -> QueryAnswer:
    """What the handle an interrupted call committed says (the query of a tool followed as
    a task): no handle, the call never went out; a task, its outcome once it ends, followed
    from where it is; ``SENDING``, the call may have reached the server and no task id came
    back: nobody can tell."""
    if handle is None:
        return QueryAnswer(False)
    if not handle.startswith(TASK):
        return QueryAnswer(None, error="the call went out and no task id came back from it")
    task_id = handle.removeprefix(TASK)
    try:
        result = await connection.follow(await connection.task(task_id), cancelled=lambda: False)
    except TaskEnded as exc:
        return QueryAnswer(True, error=str(exc))
    if result.is_error:
        return QueryAnswer(True, error=error_text(result))
    return QueryAnswer(True, result_value(result))


@dataclass(frozen=True)
class McpTool:
    """A tool of a server as this process serves it, and why it got its policy."""

    spec: ToolSpec
    why: str


def mcp_tool(
    connection: McpConnection,
    *,
    tool: str,
    description: str,
    schema: dict[str, Any],
    got: McpPolicy,
    override: ToolOverride,
    pool: str,
) -> McpTool:
    """The spec of ``tool`` of ``connection``'s server (its policy already decided)."""
    server = connection.server

    follows = got.policy == "query" and override.lookup is None

    async def call(args: McpArguments, ctx: ToolContextLike) -> Any:
        if follows:
            await ctx.note_handle(SENDING)
        answer = await connection.call(tool, args.model_dump(), operation_id=ctx.operation_id)
        if isinstance(answer, CreatedTask):
            if follows:  # before waiting: a successor follows the task
                await ctx.note_handle(TASK + answer.task_id)
            answer = await connection.follow(answer, cancelled=ctx.cancelled)
        if answer.is_error:
            raise ToolError(error_text(answer), retryable=False)
        return result_value(answer)

    query: QueryFunction | None = None
    if got.policy == "query" and override.lookup is not None:
        lookup = override.lookup

        async def ask(args: McpArguments, ctx: ToolContextLike) -> QueryAnswer:
            found = await connection.call(
                lookup, {"operation_id": ctx.operation_id}, operation_id=ctx.operation_id
            )
            if isinstance(found, CreatedTask) or found.is_error:
                # a plain exception: the query's failure, not the call's
                raise RuntimeError(f"lookup {lookup} failed: {_lookup_error(found)}")
            return lookup_answer(result_value(found))

        query = ask
    elif follows:

        async def follow_task(args: McpArguments, ctx: ToolContextLike) -> QueryAnswer:
            return await task_answer(connection, await ctx.handle())

        query = follow_task
    spec = ToolSpec(
        name=f"{connection.name}.{tool}",
        pool=override.pool or server.pool or pool,
        fn=call,
        args_model=McpArguments,
        policy=got.policy,
        query=query,
        timeout=override.timeout or server.timeout,
        retry=RetryPolicy(),
        description=description,
        approval=got.approval,
        args_schema=schema,
        policy_reason=got.reason,
    )
    return McpTool(spec, got.reason)


def changed_tools(registry: ToolRegistry, tools: Iterable[McpTool]) -> list[McpTool]:
    """Those of ``tools`` that ``registry`` lacks or holds with another declaration (a
    server whose tool list or schemas changed since they were registered)."""
    known = registry.tools
    return [
        t
        for t in tools
        if t.spec.name not in known
        or known[t.spec.name].declaration().digest != t.spec.declaration().digest
    ]


def _hints(tool: Tool) -> Hints | None:
    a = tool.annotations
    if a is None:
        return None
    return Hints(a.read_only_hint, a.idempotent_hint, a.destructive_hint)


class McpTools:
    """The MCP servers of a configuration, and the tools this process serves of them."""

    def __init__(self, config: McpConfig, *, pool: str) -> None:
        self.pool = pool
        """The pool of tools whose server or override names none."""
        self.connections = {
            name: McpConnection(name, server) for name, server in config.servers.items()
        }

    async def tools(self, declared: Iterable[ToolDeclaration]) -> list[McpTool]:
        """Every server's tools as it lists them now. A server that cannot be reached keeps
        the tools it was last ``declared`` with (by an earlier start): their calls try to
        reach it again, and fail with the reason while it stays down; this process serves
        its other servers' tools meanwhile."""
        before = list(declared)
        served: list[McpTool] = []
        for name, connection in self.connections.items():
            try:
                listed = await connection.list_tools()
            except Exception as exc:  # whatever an outside process did: keep serving the rest
                kept = [d for d in before if d.name.startswith(f"{name}.")]
                log.error(
                    "mcp server unreachable; its tools as last declared",
                    extra={
                        "event": "mcp_unreachable",
                        "server": name,
                        "reason": describe(exc),
                        "tools": [d.name for d in kept],
                    },
                )
                served.extend(self._kept(connection, d) for d in kept)
                continue
            served.extend(self._listed(connection, t) for t in listed)
        return served

    def _listed(self, connection: McpConnection, tool: Tool) -> McpTool:
        server: StdioServer | HttpServer = connection.server
        override = server.tools.get(tool.name, ToolOverride())
        got = tool_policy(
            _hints(tool), trusted=server.trusted, override=override, tasks=connection.offers_tasks
        )
        return mcp_tool(
            connection,
            tool=tool.name,
            description=tool.description or "",
            schema=tool.input_schema,
            got=got,
            override=override,
            pool=self.pool,
        )

    def _kept(self, connection: McpConnection, declared: ToolDeclaration) -> McpTool:
        """A tool as last declared, its server unreachable now. A ``query`` tool with no
        lookup configured is followed by the handle each of its calls commits (``follows``
        in ``mcp_tool``), which never says a call that went out did not."""
        tool = declared.name.removeprefix(f"{connection.name}.")
        override = connection.server.tools.get(tool, ToolOverride())
        policy = declared.policy
        reason = declared.policy_reason or "as last declared"
        got = McpPolicy(policy, declared.approval, reason)
        return mcp_tool(
            connection,
            tool=tool,
            description=declared.description,
            schema=declared.args_schema,
            got=got,
            override=override,
            pool=declared.pool,
        )

    async def register(self, registry: ToolRegistry, store: Store) -> list[ToolSpec]:
        """List the servers' tools and put those new or changed in ``registry`` (a spec
        replaced there serves the next call; one running keeps its own); log the policy
        each got and why. Returns the new and changed ones."""
        changed = changed_tools(registry, await self.tools(await store.declarations.tools()))
        for tool in changed:
            registry.tools[tool.spec.name] = tool.spec
            log.info(
                "mcp tool",
                extra={
                    "event": "mcp_tool",
                    "tool": tool.spec.name,
                    "pool": tool.spec.pool,
                    "policy": tool.spec.policy,
                    "approval": tool.spec.approval,
                    "why": tool.why,
                },
            )
        return [tool.spec for tool in changed]

    def relisting(
        self, run: Worker, registry: ToolRegistry, store: Store, *, interval: float
    ) -> Worker:
        """``run``, with the servers' tools listed again every ``interval`` seconds
        meanwhile, and those of this pool that changed declared again."""

        async def relist() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    changed = await self.register(registry, store)
                    ours = [spec.declaration() for spec in changed if spec.pool == self.pool]
                    if ours:
                        await store.declarations.declare_tools(ours)
                        log.info(
                            "tools declared again",
                            extra={"event": "declared", "tools": [d.name for d in ours]},
                        )
                except BrainhandsError as exc:  # the store: the next round tries again
                    log.warning(
                        "mcp relisting failed", extra={"event": "mcp_relist", "error": str(exc)}
                    )

        async def running(stop: asyncio.Event) -> None:
            relisting = asyncio.create_task(relist())
            try:
                await run(stop)
            finally:
                relisting.cancel()

        return running

    async def close(self) -> None:
        """Stop every server this process started."""
        for connection in self.connections.values():
            await connection.close()
