"""The Tasks extension (``io.modelcontextprotocol/tasks``) for the agents' runs.

A client that declares the extension on its ``tools/call`` of a ``run_<agent>`` tool gets
a task at once instead of waiting for the answer: the run is submitted (durably: the
task exists once the submission is committed), and the task's id names it, ``<session
id>/<request id>`` in the caller's tenant. So ``tasks/get`` reads the submission from the
store, on any server process, after any disconnection or restart of either side, and
``tasks/cancel`` asks a Brain to cancel it. A run that had already ended (the same ids
called again) is answered at once, as a plain result. The runs ask the client for no
input, so ``tasks/update`` is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolRequestParams, CallToolResult, RequestParams, TextContent
from mcp_types import INVALID_PARAMS, INVALID_REQUEST

from brainhands.api.keys import Scope
from brainhands.client.direct import Client
from brainhands.mcp_server.callers import Caller, Identify
from brainhands.mcp_server.runs import RUN_PREFIX, RunOut, run_out, submit_only
from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import FINAL_SUBMISSION_STATUSES, SubmissionRecord
from brainhands.shared.tenancy import session_key

TASKS = "io.modelcontextprotocol/tasks"
POLL_INTERVAL_MS = 1000
"""How often a client is asked to poll a task that is working."""

TASK_STATUS = {
    "queued": "working",
    "running": "working",
    "answered": "completed",
    "failed": "completed",  # a run that failed is the tool's error, not a JSON-RPC one
    "cancelled": "cancelled",
}


class TaskParams(RequestParams):
    """The params of ``tasks/get``, ``tasks/update`` and ``tasks/cancel``."""

    task_id: str


class RunTasks(Extension):
    """Runs as tasks, for the callers ``identify`` recognises, through ``client`` (an
    operator's)."""

    identifier = TASKS

    def __init__(self, client: Client, identify: Identify) -> None:
        self.client = client
        self.identify = identify

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskParams, self.get),
            MethodBinding("tasks/update", TaskParams, self.update),
            MethodBinding("tasks/cancel", TaskParams, self.cancel),
        )

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if not params.name.startswith(RUN_PREFIX) or not _declared(ctx):
            return await call_next(ctx)
        started = submit_only.set(True)
        try:
            result = await call_next(ctx)
        finally:
            submit_only.reset(started)
        if not isinstance(result, CallToolResult) or result.is_error:
            return result  # refused (a scope, an argument): the reason, as a plain result
        run = RunOut.model_validate(result.structured_content)
        if run.status in FINAL_SUBMISSION_STATUSES:
            return result
        record = await self._record(ctx, f"{run.session_id}/{run.request_id}", "submit")
        return {"resultType": "task", **_task(record, run.session_id)}

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
        record = await self._record(ctx, params.task_id, "read")
        session_id = params.task_id.partition("/")[0]
        state = _task(record, session_id)
        if state["status"] == "completed":
            run = run_out(record, session_id, created=False)
            done = CallToolResult(
                content=[TextContent(type="text", text=run.model_dump_json())],
                structured_content=run.model_dump(mode="json"),
                is_error=record.status == "failed",
            )
            state["result"] = done.model_dump(by_alias=True, mode="json", exclude_none=True)
        return {"resultType": "complete", **state}

    async def update(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> HandlerResult:
        await self._record(ctx, params.task_id, "submit")
        raise MCPError(INVALID_PARAMS, "a run's task asks for no input: nothing to update")

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> HandlerResult:
        record = await self._record(ctx, params.task_id, "submit")
        await self.client.cancel(record.session_id, record.request_id)
        return {}

    async def _record(
        self, ctx: ServerRequestContext[Any, Any], task_id: str, scope: Scope
    ) -> SubmissionRecord:
        """The submission task ``task_id`` of the caller's tenant names; an error for a
        caller without ``scope`` or a task it has none of."""
        who = await self._caller(ctx, scope)
        session_id, slash, request_id = task_id.partition("/")
        try:
            if not (slash and session_id and request_id):
                raise NotFoundError(task_id)
            key = session_key(who.principal.tenant, session_id)
            return await self.client.store.submissions.get(key, request_id)
        except (NotFoundError, ValueError):
            raise MCPError(INVALID_PARAMS, f"no task {task_id!r}") from None

    async def _caller(self, ctx: ServerRequestContext[Any, Any], scope: Scope) -> Caller:
        who = await self.identify(getattr(ctx.request, "headers", None))
        if who is None:
            raise MCPError(INVALID_REQUEST, "an API key is needed: Authorization: Bearer bh_...")
        if not who.principal.may(scope):
            raise MCPError(INVALID_REQUEST, f"this API key lacks the {scope!r} scope")
        return who


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared the Tasks extension (on this request, or its
    session's): only then may a call be answered with a task."""
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and TASKS in capabilities.extensions)


def _task(record: SubmissionRecord, session_id: str) -> dict[str, Any]:
    """The task of the run ``record``, as the extension's ``Task`` shape."""
    status = TASK_STATUS[record.status]
    task: dict[str, Any] = {
        "taskId": f"{session_id}/{record.request_id}",
        "status": status,
        "statusMessage": f"the run is {record.status}",
        "createdAt": _iso(record.created_at),
        "lastUpdatedAt": _iso(record.updated_at),
        "ttlMs": None,  # a submission is kept: the task can be read at any time
    }
    if status == "working":
        task["pollIntervalMs"] = POLL_INTERVAL_MS
    return task


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()
