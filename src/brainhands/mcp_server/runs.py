"""A run as the MCP server's tools and tasks show it: one submission of the caller's
tenant, named by its session and request id."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel

from brainhands.shared.store import SubmissionRecord

RUN_PREFIX = "run_"
"""A run's tool is named for its agent: ``run_<agent>``."""

submit_only: ContextVar[bool] = ContextVar("submit_only", default=False)
"""Set while a run's tool is called to start a task (``mcp_server.tasks``): the tool
answers once the run is submitted, without waiting for its answer."""


class RunOut(BaseModel):
    """A run as its tool answers it: ended (``answered``, ``failed``, ``cancelled``), or
    still going when the tool's wait ran out (call again with the same ids to collect)."""

    session_id: str
    request_id: str
    status: str
    answer: Any = None
    error: str | None = None
    created: bool
    """This call started the run (False: it had been started by an earlier call)."""


def run_out(record: SubmissionRecord, session_id: str, *, created: bool) -> RunOut:
    """``record``, the submission of the caller's session ``session_id``."""
    return RunOut(
        session_id=session_id,
        request_id=record.request_id,
        status=record.status,
        answer=record.answer,
        error=record.error,
        created=created,
    )
