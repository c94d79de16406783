"""One MCP server as a Hands process reaches it: connected on first need, reconnected with
backoff after it died, stopped with the process.

A stdio server is this process's child: it is started when a tool of it is first listed
or called, its stderr goes to this process's log line by line, and it ends with the
process (its stdin closes). An HTTP server is reached through one pooled HTTP client
with timeouts. Either way, what a call raises tells the worker what may have happened
(``hands.decide.judge_failure``): a server that could not be reached after
``start_attempts`` tries is a ``ToolError`` (nothing went out: the call ``failed``), a
request the server refused is one too, and a connection lost, a server that died or a
timeout raise as they are (the effect is unknown: the replay policy decides).

Every ``tools/call`` carries the operation id in ``_meta`` under ``OPERATION_ID_KEY``
and, over HTTP, as the ``Idempotency-Key`` header, so a server can dedupe on it. The
connection declares the Tasks extension: a server that offers it may answer a call with a
task (``hands.mcp.tasks``), which the caller follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, BinaryIO, TextIO, TypeVar, cast

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, Tool
from mcp_types import (
    CONNECTION_CLOSED,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RequestParamsMeta,
    Result,
)

from brainhands.hands.mcp.config import HttpServer, StdioServer
from brainhands.hands.mcp.tasks import (
    TASKS,
    CancelTask,
    CreatedTask,
    GetTask,
    TaskEnded,
    TaskParams,
    Tasks,
    TaskState,
    follow,
)
from brainhands.shared.errors import ToolError

log = logging.getLogger("brainhands.hands.mcp")

T = TypeVar("T")

OPERATION_ID_KEY = "brainhands/operation_id"
"""The ``_meta`` key of every ``tools/call`` whose value is the call's operation id: the
same on every attempt of one call, never the same for two calls."""
IDEMPOTENCY_HEADER = "Idempotency-Key"

REFUSED = frozenset(
    {PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, HEADER_MISMATCH}
)
"""JSON-RPC errors a server answers before it runs anything: the call definitely failed.
Any other error (an internal one, a closed connection, a timeout) may follow the effect."""


def backoff(failures: int, *, base: float = 0.2, cap: float = 5.0) -> float:
    """Seconds to wait before (re)starting a server after ``failures`` failed starts or
    lost connections in a row."""
    return 0.0 if failures <= 0 else min(cap, base * 2 ** (failures - 1))


def idempotency_key(body: bytes) -> str | None:
    """The operation id of a JSON-RPC ``tools/call`` request body, if it carries one."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    key = meta.get(OPERATION_ID_KEY) if isinstance(meta, dict) else None
    return key if isinstance(key, str) else None


async def _stamp_idempotency_key(request: httpx2.Request) -> None:
    if request.method == "POST" and (key := idempotency_key(request.content)) is not None:
        request.headers[IDEMPOTENCY_HEADER] = key


def describe(exc: BaseException) -> str:
    """What went wrong, in one line (the first leaf of an exception group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return f"error {exc.code}: {exc.error.message}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class McpConnection:
    """The connection of this process to the MCP server ``name``."""

    def __init__(self, name: str, server: StdioServer | HttpServer) -> None:
        self.name = name
        self.server = server
        self._client: Client | None = None
        self._closing = asyncio.Event()
        """Set to end the current connection (it died, or the process stops)."""
        self._holders: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._failures = 0
        """Failed starts and lost connections in a row: the next start's backoff."""

    async def list_tools(self) -> list[Tool]:
        """Every tool the server lists now (all pages)."""
        client = await self._connected()
        tools: list[Tool] = []
        cursor: str | None = None
        while True:
            page = await self._guard(client, client.list_tools(cursor=cursor, cache_mode="refresh"))
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools

    async def call(
        self, tool: str, arguments: dict[str, Any], *, operation_id: str
    ) -> CallToolResult | CreatedTask:
        """Call ``tool`` once, with the operation id in ``_meta`` (module docstring): its
        result, or the task a server of the Tasks extension answered with instead."""
        client = await self._connected()
        # RequestParamsMeta is a TypedDict open to extra keys, which mypy cannot spell yet.
        meta = cast(RequestParamsMeta, {OPERATION_ID_KEY: operation_id})
        sent = client.session.call_tool(tool, arguments, meta=meta, allow_claimed=True)
        try:
            answer = await self._guard(client, sent)
        except MCPError as exc:
            if exc.code in REFUSED:
                raise ToolError(f"{self.name} refused {tool}: {describe(exc)}") from exc
            raise
        if not isinstance(answer, CallToolResult | CreatedTask):
            raise ToolError(f"{self.name} answered {tool} with a {type(answer).__name__}")
        return answer

    @property
    def offers_tasks(self) -> bool:
        """Whether the server, as last connected, offers the Tasks extension."""
        client = self._client
        if client is None:
            return False
        extensions = client.server_capabilities.extensions
        return bool(extensions and TASKS in extensions)

    async def follow(
        self, task: CreatedTask | TaskState, *, cancelled: Callable[[], bool]
    ) -> CallToolResult:
        """The result of ``task``, followed until it ends (``hands.mcp.tasks.follow``). The
        task runs whatever happens to this connection: a server that cannot be reached
        again says nothing of its outcome (a ``ConnectionError``, not the ``ToolError`` of a
        call that never went out)."""
        try:
            return await follow(task, get=self.task, cancel=self.cancel_task, cancelled=cancelled)
        except TaskEnded:
            raise
        except ToolError as exc:
            raise ConnectionError(f"lost task {task.task_id}: {exc}") from exc

    async def task(self, task_id: str) -> TaskState:
        """``tasks/get``: the task ``task_id`` as the server has it now."""
        client = await self._connected()
        get = GetTask(params=TaskParams(task_id=task_id))
        return await self._guard(client, client.session.send_request(get, TaskState))

    async def cancel_task(self, task_id: str) -> None:
        """``tasks/cancel``: ask the server to stop the task ``task_id``."""
        client = await self._connected()
        cancel = CancelTask(params=TaskParams(task_id=task_id))
        await self._guard(client, client.session.send_request(cancel, Result))

    async def close(self) -> None:
        """End the connection (a stdio server's process with it)."""
        self._closing.set()
        self._client = None
        if self._holders:
            await asyncio.wait(self._holders, timeout=10)

    async def _guard(self, client: Client, request: Awaitable[T]) -> T:
        """Await ``request`` of ``client``; a connection found closed is dropped, so the
        next request starts a new one (after a backoff). An error the server answered with
        leaves it up: other calls may be running on it."""
        try:
            result: T = await request
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._drop(client, exc)
            raise
        except (OSError, httpx2.TransportError) as exc:
            self._drop(client, exc)
            raise
        return result

    def _drop(self, client: Client, exc: BaseException) -> None:
        if self._client is not client:
            return  # already dropped by another call
        log.warning(
            "mcp server connection lost",
            extra={"event": "mcp_lost", "server": self.name, "reason": describe(exc)},
        )
        self._client = None
        self._failures += 1
        self._closing.set()
        self._closing = asyncio.Event()

    async def _connected(self) -> Client:
        """The live connection, or a new one after at most ``start_attempts`` tries."""
        async with self._lock:
            if self._client is not None:
                return self._client
            reason = ""
            for attempt in range(1, self.server.start_attempts + 1):
                await asyncio.sleep(backoff(self._failures))
                try:
                    self._client = await self._start()
                except Exception as exc:
                    self._failures += 1
                    reason = describe(exc)
                    log.warning(
                        "mcp server did not start",
                        extra={
                            "event": "mcp_start_failed",
                            "server": self.name,
                            "attempt": attempt,
                            "reason": reason,
                        },
                    )
                    continue
                self._failures = 0
                log.info(
                    "mcp server connected", extra={"event": "mcp_connected", "server": self.name}
                )
                return self._client
            raise ToolError(
                f"MCP server {self.name!r} could not be reached "
                f"({self.server.start_attempts} tries): {reason}"
            )

    async def _start(self) -> Client:
        """Open a connection in a task of its own, which holds it until it is dropped or
        closed (the SDK's connection must be entered and left by one task)."""
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        holder = asyncio.create_task(self._hold(ready, self._closing))
        self._holders.add(holder)
        holder.add_done_callback(self._holders.discard)
        return await ready

    async def _hold(self, ready: asyncio.Future[Client], closing: asyncio.Event) -> None:
        try:
            async with self._open() as client:
                ready.set_result(client)
                await closing.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.info(
                    "mcp server connection ended",
                    extra={"event": "mcp_ended", "server": self.name, "reason": describe(exc)},
                )
        finally:
            if not ready.done():  # cancelled while starting: the starter must not wait on
                ready.cancel()

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[Client]:
        server = self.server
        if isinstance(server, HttpServer):
            http = httpx2.AsyncClient(
                headers={k: v.get_secret_value() for k, v in server.headers.items()},
                timeout=httpx2.Timeout(10.0, read=server.timeout + 10.0),
                event_hooks={"request": [_stamp_idempotency_key]},
            )
            transport = streamable_http_client(server.url, http_client=http)
            async with http, Client(transport, extensions=[Tasks()]) as client:
                yield client
            return
        params = StdioServerParameters(
            command=server.command,
            args=server.args,
            env={k: v.get_secret_value() for k, v in server.env.items()},
        )
        with _stderr_to_log(self.name) as errlog:
            async with Client(stdio_client(params, errlog=errlog), extensions=[Tasks()]) as client:
                yield client


@contextlib.contextmanager
def _stderr_to_log(server: str) -> Iterator[TextIO]:
    """A file to hand a child process as its stderr; each line it writes is logged (from a
    thread of its own, which ends when the child closes its end)."""
    read_fd, write_fd = os.pipe()
    reading = os.fdopen(read_fd, "rb")

    def pump(stream: BinaryIO) -> None:
        with stream:
            for raw in stream:
                line = raw.decode(errors="replace").rstrip()
                if line:
                    log.info(line, extra={"event": "mcp_stderr", "server": server})

    threading.Thread(target=pump, args=(reading,), name=f"mcp-{server}-stderr", daemon=True).start()
    with os.fdopen(write_fd, "w") as writing:
        yield writing
