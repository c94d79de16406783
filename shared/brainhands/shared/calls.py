"""One tool call and its outcome, each in one type, from the Brain's intent to the model.

``ToolCallIntent``: a Brain records a call as a tool task whose input is the intent's
serialization (``task_input``) and puts its ``ToolJob`` in the outbox; the sweeper reads the
intent back from that row (``from_task``) to send the same job again; Hands read it from the
job (``of_job``) and create the operation row from it.

``ToolOutcome``: how the call ended, read from its operation row (``of_operation``), stored
as the tool task's result or error (``task_result``, ``task_error``), read back from the
task (``of_task``) and handed to the model (``for_model``).

So each is named once, here, and the stored rows and the wire message stay what earlier
builds wrote and read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from brainhands.shared.messages import ToolJob

if TYPE_CHECKING:
    from brainhands.shared.store import OperationRecord, TaskOutcome, TaskRecord


@dataclass(frozen=True)
class ToolCallIntent:
    """A tool call the Brain has decided to make: frozen once committed."""

    operation_id: str
    """The call's idempotency key (``brain.ids.derive_operation_id``)."""
    session_id: str
    task_id: str
    """The tool task that waits for the call's outcome."""
    tool: str
    pool: str
    arguments: dict[str, Any]
    """The JSON object of arguments; empty when they travel by reference."""
    arguments_blob_id: str | None = None
    """The blob holding the arguments' JSON, when it is too large to go inline."""

    def task_input(self) -> dict[str, Any]:
        """The tool task's stored input: the intent's fields its row does not hold itself."""
        if self.arguments_blob_id is None:
            return {"tool": self.tool, "arguments": self.arguments, "pool": self.pool}
        return {
            "tool": self.tool,
            "arguments": self.arguments,
            "arguments_blob_id": self.arguments_blob_id,
            "pool": self.pool,
        }

    @classmethod
    def from_task(cls, task: TaskRecord) -> ToolCallIntent:
        """The intent a tool task's row records; ``ValueError`` saying what is missing when
        the row does not hold one."""
        data = task.input
        if not isinstance(data, dict):
            raise ValueError(f"its input is {type(data).__name__}, not an object")
        missing = [key for key in ("tool", "arguments", "pool") if key not in data]
        if missing or task.operation_id is None:
            raise ValueError(f"it has no {', '.join(missing or ['operation_id'])}")
        tool, arguments, pool = data["tool"], data["arguments"], data["pool"]
        blob_id = data.get("arguments_blob_id")
        if not (isinstance(tool, str) and isinstance(pool, str) and isinstance(arguments, dict)):
            raise ValueError("its tool, pool or arguments are not of their types")
        if blob_id is not None and not isinstance(blob_id, str):
            raise ValueError("its arguments_blob_id is not a string")
        return cls(task.operation_id, task.session_id, task.id, tool, pool, arguments, blob_id)

    @classmethod
    def of_job(cls, job: ToolJob) -> ToolCallIntent:
        """The intent a job carries."""
        return cls(
            job.operation_id,
            job.session_id,
            job.task_id,
            job.tool,
            job.pool,
            job.arguments,
            job.arguments_blob_id,
        )

    def job(self, *, compat: str, trace: dict[str, str] | None = None) -> ToolJob:
        """The message that asks the tool's pool to run the call (``compat``: the Brains its
        result goes to). Raises pydantic's ``ValidationError`` for fields a job refuses."""
        return ToolJob(
            operation_id=self.operation_id,
            tool=self.tool,
            arguments=self.arguments,
            arguments_blob_id=self.arguments_blob_id,
            session_id=self.session_id,
            task_id=self.task_id,
            compat=compat,
            pool=self.pool,
            trace=trace or {},
        )

    def operation_columns(self) -> dict[str, Any]:
        """The columns an operation row created for the call takes from it."""
        return {
            "session_id": self.session_id,
            "task_id": self.task_id,
            "tool": self.tool,
            "pool": self.pool,
            "arguments": self.arguments,
            "arguments_blob_id": self.arguments_blob_id,
        }


@dataclass(frozen=True)
class ToolOutcome:
    """How a tool call ended: ``status`` and, on success, ``result``, otherwise ``error``
    (``uncertain`` stays uncertain: the model or a rule decides, never a retry)."""

    status: str
    """An operation's final status (``messages.ToolStatus``) for a call; for a task the
    model called as a tool (an agent's task tool), the status its error names, else how the
    task ended."""
    result: Any = None
    error: Any = None

    @classmethod
    def of_operation(cls, op: OperationRecord) -> ToolOutcome:
        """The outcome an operation row in a final status records."""
        if op.status == "succeeded":
            return cls("succeeded", result=op.result)
        return cls(op.status, error=op.error)

    @classmethod
    def of_task(
        cls, outcome: TaskOutcome, result: Any, error: Any, *, tool_task: bool
    ) -> ToolOutcome:
        """The outcome an ended task records: a tool task's as ``task_result`` or
        ``task_error`` stored it (``tool_task``), another's (a task tool) as it ended."""
        if outcome == "succeeded":
            return cls("succeeded", result=result["result"] if tool_task else result)
        error = error or {}
        return cls(error.get("status", outcome), error=error.get("error", error))

    @property
    def task_outcome(self) -> TaskOutcome:
        """How the tool task that waited for the call ends."""
        if self.status == "succeeded":
            return "succeeded"
        return "cancelled" if self.status == "cancelled" else "failed"

    def task_result(self) -> Any:
        """The tool task's stored result (None unless it succeeded)."""
        return {"status": "succeeded", "result": self.result} if self.succeeded else None

    def task_error(self) -> Any:
        """The tool task's stored error (None when it succeeded)."""
        return None if self.succeeded else {"status": self.status, "error": self.error}

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    def for_model(self) -> dict[str, Any]:
        """What the model reads of it (in a tool result entry)."""
        if self.succeeded:
            return {"status": "succeeded", "result": self.result}
        return {"status": self.status, "error": self.error}
