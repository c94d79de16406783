"""The Tasks extension (``io.modelcontextprotocol/tasks``) as a Hands uses it: a server
that offers it may answer a ``tools/call`` with a task instead of the result. The server
has made the task durable before it answers, and ``tasks/get`` is a pure read, so a task's
id is a handle on the call's effect that outlives this process: the tool commits it
(``ToolContext.note_handle``) before it waits, and whoever takes the call over follows
the task by that id instead of calling again (``follow``). A cancel of the call becomes
``tasks/cancel``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.types import CallToolResult, RequestParams
from mcp_types import Request, Result

from brainhands.shared.errors import ToolError

TASKS = "io.modelcontextprotocol/tasks"

POLL_BOUNDS = (0.05, 5.0)
"""The least and the most seconds between two ``tasks/get`` of a working task, whatever
poll interval the server asks for."""


class TaskEnded(ToolError):
    """The task ended in the call's definite failure: it failed, was cancelled or waits for
    input (told apart from not reaching the server, which says nothing of the task)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class CreatedTask(Result):
    """A ``tools/call`` answered with a task (the extension's ``CreateTaskResult``)."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class TaskState(Result):
    """A task as ``tasks/get`` (or ``tasks/cancel``) answers it; ``result``: the call's
    result, once the task completed."""

    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None


class TaskParams(RequestParams):
    task_id: str


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams


class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams


async def _unclaimed(task: CreatedTask, ctx: ClaimContext) -> CallToolResult:
    raise AssertionError("a Hands takes its tasks as they come (allow_claimed)")


class Tasks(ClientExtension):
    """The extension as a Hands declares it: every task comes back to the caller, which
    commits its id before waiting (``connection.McpConnection.call``)."""

    identifier = TASKS

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=_unclaimed)]


def poll_delay(state: TaskState | CreatedTask) -> float:
    """Seconds to wait before asking about a working task again."""
    low, high = POLL_BOUNDS
    asked = (state.poll_interval_ms or 1000) / 1000
    return min(high, max(low, asked))


def task_result(state: TaskState) -> CallToolResult | None:
    """The call's result once the task ended (None while it works); a task that failed,
    was cancelled or waits for input (which a Hands cannot give) is the call's definite
    failure."""
    if state.status == "completed":
        if state.result is None:
            raise TaskEnded(f"task {state.task_id} completed with no result")
        return CallToolResult.model_validate(state.result)
    if state.status == "working":
        return None
    why = f": {state.status_message}" if state.status_message else ""
    if state.status == "input_required":
        why = " (it asks for input, which a Hands cannot give)"
    raise TaskEnded(f"task {state.task_id} ended {state.status}{why}")


async def follow(
    first: TaskState | CreatedTask,
    *,
    get: Callable[[str], Awaitable[TaskState]],
    cancel: Callable[[str], Awaitable[None]],
    cancelled: Callable[[], bool],
) -> CallToolResult:
    """Poll the task ``first`` (``get``: ``tasks/get`` of an id) until it ends: its result.
    Once ``cancelled()`` says so, the task is asked to stop (``cancel``: ``tasks/cancel``,
    sent once) and followed to its end."""
    state = first
    cancel_sent = False
    while True:
        if isinstance(state, TaskState) and (result := task_result(state)) is not None:
            return result
        if cancelled() and not cancel_sent:
            cancel_sent = True
            await cancel(state.task_id)
        else:
            await asyncio.sleep(poll_delay(state))
        state = await get(state.task_id)
