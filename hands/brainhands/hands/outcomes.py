"""How a Hands worker records a call's outcome and tells the Brain: the outcome and its
result event are committed together, guarded by the holder's fencing token; a duplicate job
of a call with an outcome publishes its result event again."""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic_core import to_jsonable_python

from brainhands.hands.running import HeldJob
from brainhands.shared import metrics
from brainhands.shared.broker import Broker
from brainhands.shared.messages import MAX_INLINE_JSON, ToolJob, ToolResult, encode
from brainhands.shared.store import (
    OperationLedger,
    OperationRecord,
    OperationStatus,
    OutboxMessage,
    WorkspaceAdvance,
)
from brainhands.shared.tracing import current_carrier

log = logging.getLogger("brainhands.hands")


class Outcomes:
    """Records the outcomes of one worker's calls (``max_inline_result``: a larger result is
    stored once as a blob)."""

    def __init__(
        self, ledger: OperationLedger, broker: Broker, max_inline_result: int = MAX_INLINE_JSON
    ) -> None:
        self.ledger = ledger
        self.broker = broker
        self.max_inline_result = max_inline_result

    async def success(
        self,
        held: HeldJob,
        value: Any,
        *,
        via: str | None = None,
        attempted: bool = False,
        started_at: float | None = None,
        workspace: WorkspaceAdvance | None = None,
    ) -> None:
        """Record what the tool returned (``via``: how it was learnt, when not from the call
        itself), or a failure when that is no JSON; with ``workspace``, the version of its
        workspace the call made (``WorkspaceMoved`` if another call committed one first)."""
        try:
            result = to_jsonable_python(value)
            encoded = json.dumps(result).encode()
        except (TypeError, ValueError) as exc:
            await self.failure(
                held, "InvalidResult", f"the tool returned a value that is not JSON: {exc}"
            )
            return
        blob = encoded if len(encoded) > self.max_inline_result else None
        await self.record(
            held,
            "succeeded",
            result=None if blob else result,
            blob=blob,
            via=via,
            attempted=attempted,
            started_at=started_at,
            workspace=workspace,
        )

    async def failure(self, held: HeldJob, kind: str, message: str) -> None:
        """Record a definite failure of ``kind`` found before or after the call."""
        error = {"type": kind, "message": message, "retryable": False}
        await self.record(held, "failed", error=error)

    async def record(
        self,
        held: HeldJob,
        status: OperationStatus,
        *,
        result: Any = None,
        error: dict[str, Any] | None = None,
        blob: bytes | None = None,
        via: str | None = None,
        interrupted: bool = False,
        attempted: bool = False,
        started_at: float | None = None,
        workspace: WorkspaceAdvance | None = None,
    ) -> None:
        """Commit the outcome with its result event (``interrupted``: it follows an attempt
        cut short, counted as an interruption; ``attempted``: it ends an attempt that went
        out at ``started_at`` with no started mark, counted now)."""
        job = held.job
        event = _result_event(job, status)
        notify = OutboxMessage(self.broker.topology.results_queue(job.compat), encode(event))
        await self.ledger.record_outcome(
            job.operation_id,
            held.fence,
            status=status,
            result=result,
            error=error,
            blob=blob,
            notify=notify,
            session_id=job.session_id,
            interrupted=interrupted,
            attempted=attempted,
            started_at=started_at,
            workspace=workspace,
        )
        metrics.labelled(metrics.TOOL_OUTCOMES, job.tool, status).inc()
        log.info(
            "outcome",
            extra={
                "event": "outcome",
                "operation_id": job.operation_id,
                "session_id": job.session_id,
                "status": status,
                "via": via or ("recovery" if interrupted else "call"),
                "error": error,
            },
        )

    async def republish(self, held: HeldJob, op: OperationRecord) -> None:
        """Publish the result event of an outcome already recorded (a duplicate job)."""
        job = held.job
        await self.broker.publish_routed(
            _result_event(job, op.status), self.broker.topology.results_queue(job.compat)
        )
        log.info(
            "duplicate job; result published again",
            extra={
                "event": "republished",
                "operation_id": job.operation_id,
                "session_id": job.session_id,
                "status": op.status,
            },
        )


def _result_event(job: ToolJob, status: OperationStatus) -> ToolResult:
    return ToolResult(
        operation_id=job.operation_id,
        session_id=job.session_id,
        task_id=job.task_id,
        compat=job.compat,
        status=status,
        trace=current_carrier(),
    )
