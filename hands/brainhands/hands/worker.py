"""The Hands worker: takes tool jobs from its pool's queue and runs each one at most as its
replay policy allows, recording every outcome in the operation ledger.

Per job: take the operation's lease (Redis) and claim its row with the lease's fencing token
(store), then decide from the row alone (``hands.decide``) whether to publish an existing
outcome again, run the tool, ask the tool's query function, or record ``uncertain``. The
outcome and its result event are committed together, guarded by the token; the job is
acked only after that commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from brainhands.hands.context import ToolContext
from brainhands.hands.decide import after_interruption, judge_failure, next_step, retry_or_fail
from brainhands.shared import metrics
from brainhands.shared.broker import Broker, Delivery
from brainhands.shared.calls import ToolCallIntent
from brainhands.shared.errors import (
    BrainhandsError,
    CallCancelled,
    LeaseLost,
    StaleLeaseError,
    UnknownToolError,
)
from brainhands.shared.lease import Lease, LeaseManager
from brainhands.shared.live import LivePublisher
from brainhands.shared.messages import (
    MAX_INLINE_JSON,
    CancelNotice,
    Message,
    ToolJob,
    ToolResult,
    encode,
)
from brainhands.shared.parking import park
from brainhands.shared.store import OperationLedger, OperationRecord, OutboxMessage
from brainhands.shared.store.records import OperationStatus
from brainhands.shared.tools import QueryAnswer, ToolRegistry, ToolSpec, describe_invalid_arguments
from brainhands.shared.tracing import current_carrier, message_span

log = logging.getLogger("brainhands.hands")


class HandsWorker:
    """Runs the tools of one pool."""

    def __init__(
        self,
        *,
        ledger: OperationLedger,
        broker: Broker,
        leases: LeaseManager,
        registry: ToolRegistry,
        pool: str,
        concurrency: int = 16,
        shutdown_grace: float = 20.0,
        max_inline_result: int = MAX_INLINE_JSON,
        cancel_check_period: float = 1.0,
    ) -> None:
        self.ledger = ledger
        self.broker = broker
        self.leases = leases
        self.registry = registry
        self.pool = pool
        self.concurrency = concurrency
        self.shutdown_grace = shutdown_grace
        self.max_inline_result = max_inline_result
        self.consuming = False
        """True while the pool's queue is consumed (readiness)."""
        self.cancel_check_period = cancel_check_period
        self._live = LivePublisher(broker)
        self._running: dict[str, _RunningCall] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, then drain: running tools get the grace period."""
        topology = self.broker.topology
        queue = await topology.declare_hands_pool(self.broker.channel, self.pool)
        consumer = await self.broker.consume(queue, self.handle, prefetch=self.concurrency)
        notices = await topology.declare_cancel_listener(self.broker.channel)
        listener = await self.broker.consume(notices, self.on_cancel)
        watcher = asyncio.create_task(self._watch_cancels())
        log.info("consuming", extra={"event": "consuming", "queue": queue, "pool": self.pool})
        self.consuming = True
        await stop.wait()
        self.consuming = False
        await listener.cancel()
        watcher.cancel()
        log.info("draining", extra={"event": "draining", "running": len(self._running)})
        for call in self._running.values():
            call.cancel.set()
        await consumer.cancel(grace=self.shutdown_grace)

    async def _watch_cancels(self) -> None:
        """Tell running calls of their cancel from the store, where it is committed: a cancel
        notice is only the fast path, and it may be lost."""
        while True:
            await asyncio.sleep(self.cancel_check_period)
            waiting = [c for c in self._running.values() if not c.cancel.is_set()]
            try:
                cancelled = await self.ledger.cancelled_tasks([c.task_id for c in waiting])
            except BrainhandsError as exc:
                log.warning(
                    "cancel check failed", extra={"event": "cancel_check", "error": str(exc)}
                )
                continue
            for call in waiting:
                if call.task_id in cancelled:
                    call.cancel.set()
                    log.info(
                        "cancel found in the store",
                        extra={"event": "cancel_requested", "operation_id": call.operation_id},
                    )

    async def handle(self, message: Message, delivery: Delivery) -> None:
        """Process one delivery; ack only after the outcome is durable."""
        if not isinstance(message, ToolJob):
            await park(self.broker, delivery, f"a {message.type} message has no place here")
            return
        with message_span(
            "brainhands.hands.job",
            message.trace,
            {"operation_id": message.operation_id, "tool": message.tool},
        ):
            await self._handle(message, delivery)

    async def _handle(self, job: ToolJob, delivery: Delivery) -> None:
        metrics.JOBS_RECEIVED.labels(self.pool).inc()
        if delivery.redelivered:
            metrics.REDELIVERIES.labels("hands").inc()
        fields = {"operation_id": job.operation_id, "session_id": job.session_id, "tool": job.tool}
        log.debug(
            "received",
            extra={
                **fields,
                "event": "received",
                "redelivered": delivery.redelivered,
                "delivery_count": delivery.delivery_count,
            },
        )
        claimed: list[OperationRecord] = []
        intent = ToolCallIntent.of_job(job).operation_columns()

        async def claim(token: int) -> None:
            claimed.append(
                (await self.ledger.claim(job.operation_id, token, intent=intent)).operation
            )

        lease = await self._acquire(job, claim)
        if lease is None:
            # A live holder renews the lease and will publish the result itself.
            log.info("held by another worker", extra={**fields, "event": "skipped"})
            await delivery.ack()
            return
        log.debug("claimed", extra={**fields, "event": "claimed", "fence": lease.token})
        try:
            async with self.leases.hold(lease):
                await self._process(job, claimed[-1], lease.token)
        except LeaseLost as exc:
            metrics.LEASE_LOST.inc()
            log.warning(
                "lease lost; job handed back",
                extra={**fields, "event": "lease_lost", "reason": exc.reason},
            )
            await delivery.reject(requeue=True)
            return
        except StaleLeaseError as exc:
            metrics.STALE_REJECTED.inc()
            log.warning(
                "superseded by a newer holder; nothing recorded",
                extra={**fields, "event": "stale", "fence": lease.token, "current": exc.current},
            )
            await delivery.ack()
            return
        finally:
            with contextlib.suppress(BrainhandsError):
                await self.leases.release(lease)
        await delivery.ack()
        metrics.JOBS_ACKED.labels(self.pool).inc()
        log.debug("acked", extra={**fields, "event": "acked"})

    async def on_cancel(self, message: Message, delivery: Delivery) -> None:
        """A cancel notice: if the call runs here, its context now says ``cancelled()``."""
        if isinstance(message, CancelNotice) and message.operation_id in self._running:
            self._running[message.operation_id].cancel.set()
            log.info(
                "cancel requested",
                extra={"event": "cancel_requested", "operation_id": message.operation_id},
            )
        await delivery.ack()

    async def _acquire(self, job: ToolJob, claim: Any) -> Lease | None:
        """The operation's lease, waiting up to one TTL for a holder that may have died."""
        resource = f"operation:{job.operation_id}"
        deadline = time.monotonic() + self.leases.ttl_ms / 1000 + 1.0
        while True:
            lease = await self.leases.acquire_fenced(resource, claim)
            if lease is not None or time.monotonic() > deadline:
                return lease
            await asyncio.sleep(self.leases.ttl_ms / 5000)

    async def _process(self, job: ToolJob, op: OperationRecord, token: int) -> None:
        try:
            spec = self.registry.get(job.tool)
        except UnknownToolError as exc:
            await self._record_failure(job, token, "UnknownToolError", str(exc))
            return
        try:
            args = spec.args_model.model_validate(await self._arguments(job))
        except ValidationError as exc:
            await self._record_failure(
                job, token, "InvalidArguments", describe_invalid_arguments(exc)
            )
            return
        step = next_step(
            op.status,
            spec.policy,
            interruptions=op.interruptions,
            retry=spec.retry,
            next_attempt_at=op.next_attempt_at,
            now=time.time(),
        )
        if step.action == "query":
            if await self._found_by_query(job, spec, args, op, token):
                return
            step = after_interruption(op.interruptions, spec.retry)
        if step.action == "republish":
            await self._republish(job, op)
            return
        if op.status == "started":
            metrics.INTERRUPTIONS.labels(spec.name).inc()
        if step.action == "record_uncertain":
            error = _interrupted(op, spec)
            await self._record(job, token, "uncertain", error=error, interrupted=True)
            return
        if step.action == "record_interrupted":
            error = _interrupted(op, spec, spent=True)
            await self._record(job, token, "failed", error=error, interrupted=True)
            return
        if step.action == "rerun":
            await self.ledger.schedule_retry(
                job.operation_id,
                token,
                error=_interrupted(op, spec),
                retry_at=time.time() + step.delay,
                interrupted=True,
            )
            log.info(
                "interrupted call runs again",
                extra={
                    "event": "rerun",
                    "operation_id": job.operation_id,
                    "interruptions": op.interruptions + 1,
                    "delay": step.delay,
                },
            )
        if step.delay:
            await asyncio.sleep(step.delay)
        await self._run(job, spec, args, token)

    async def _arguments(self, job: ToolJob) -> Any:
        """The job's arguments, read from their blob when they travel by reference."""
        if job.arguments_blob_id is None:
            return job.arguments
        return json.loads(await self.ledger.read_blob(job.arguments_blob_id))

    async def _run(self, job: ToolJob, spec: ToolSpec, args: BaseModel, token: int) -> None:
        """Call the tool; each failure is judged by the tool's replay and retry policies."""
        while True:
            try:
                op = await self.ledger.mark_started(job.operation_id, token)
            except CallCancelled:
                error = {"type": "Cancelled", "message": "cancelled before the call went out"}
                await self._record(job, token, "cancelled", error=error)
                return
            log.info(
                "started",
                extra={
                    "event": "started",
                    "operation_id": job.operation_id,
                    "session_id": job.session_id,
                    "attempt": op.attempts,
                },
            )
            call = self._running.setdefault(
                job.operation_id, _RunningCall(job.operation_id, job.task_id, asyncio.Event())
            )
            cancel = call.cancel
            ctx = ToolContext(
                operation_id=job.operation_id,
                session_id=job.session_id,
                fence=token,
                attempt=op.attempts,
                cancel=cancel,
                live=self._live.publish,
            )
            try:
                async with asyncio.timeout(spec.timeout) as deadline:
                    with metrics.TOOL_SECONDS.labels(spec.name).time():
                        value = await spec.fn(args, ctx)
            except Exception as exc:  # the tool's failure is data; LeaseLost is not an Exception
                failure: Exception = exc
                if isinstance(exc, TimeoutError) and deadline.expired():
                    failure = TimeoutError(f"cancelled after its timeout of {spec.timeout}s")
                failures = op.attempts - op.interruptions
                verdict = judge_failure(failure, spec.policy, failures=failures, retry=spec.retry)
            else:
                await self._record_success(job, token, value)
                return
            finally:
                self._running.pop(job.operation_id, None)
            if verdict.action == "query":
                if await self._found_by_query(job, spec, args, op, token):
                    return
                verdict = retry_or_fail(
                    failure, failures=failures, retry=spec.retry, error=verdict.error
                )
            if verdict.action == "uncertain":
                await self._record(job, token, "uncertain", error=verdict.error)
                return
            if verdict.action == "fail":
                await self._record(job, token, "failed", error=verdict.error)
                return
            await self.ledger.schedule_retry(
                job.operation_id, token, error=verdict.error, retry_at=time.time() + verdict.delay
            )
            log.info(
                "retry scheduled",
                extra={
                    "event": "retry",
                    "operation_id": job.operation_id,
                    "delay": verdict.delay,
                    "error": verdict.error,
                },
            )
            await asyncio.sleep(verdict.delay)

    async def _found_by_query(
        self, job: ToolJob, spec: ToolSpec, args: BaseModel, op: OperationRecord, token: int
    ) -> bool:
        """Ask the external system whether the interrupted call took effect; record it if so."""
        assert spec.query is not None
        ctx = ToolContext(
            operation_id=job.operation_id,
            session_id=job.session_id,
            fence=token,
            attempt=op.attempts,
            cancel=asyncio.Event(),
        )
        async with asyncio.timeout(spec.timeout):
            answer: QueryAnswer = await spec.query(args, ctx)
        log.info(
            "queried",
            extra={
                "event": "queried",
                "operation_id": job.operation_id,
                "happened": answer.happened,
            },
        )
        if answer.happened:
            await self._record_success(job, token, answer.result, via="query")
        return answer.happened

    async def _record_success(
        self, job: ToolJob, token: int, value: Any, *, via: str | None = None
    ) -> None:
        try:
            result = to_jsonable_python(value)
            encoded = json.dumps(result).encode()
        except (TypeError, ValueError) as exc:
            await self._record_failure(
                job, token, "InvalidResult", f"the tool returned a value that is not JSON: {exc}"
            )
            return
        blob = encoded if len(encoded) > self.max_inline_result else None
        await self._record(
            job, token, "succeeded", result=None if blob else result, blob=blob, via=via
        )

    async def _record_failure(self, job: ToolJob, token: int, kind: str, message: str) -> None:
        error = {"type": kind, "message": message, "retryable": False}
        await self._record(job, token, "failed", error=error)

    async def _record(
        self,
        job: ToolJob,
        token: int,
        status: OperationStatus,
        *,
        result: Any = None,
        error: dict[str, Any] | None = None,
        blob: bytes | None = None,
        via: str | None = None,
        interrupted: bool = False,
    ) -> None:
        """Commit the outcome with its result event (``interrupted``: it follows an attempt
        cut short, counted as an interruption)."""
        event = _result_event(job, status)
        notify = OutboxMessage(self.broker.topology.results_queue(job.compat), encode(event))
        await self.ledger.record_outcome(
            job.operation_id,
            token,
            status=status,
            result=result,
            error=error,
            blob=blob,
            notify=notify,
            session_id=job.session_id,
            interrupted=interrupted,
        )
        metrics.TOOL_OUTCOMES.labels(job.tool, status).inc()
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

    async def _republish(self, job: ToolJob, op: OperationRecord) -> None:
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


@dataclass(frozen=True)
class _RunningCall:
    """A call in flight in this worker, and the event its context reads as ``cancelled()``."""

    operation_id: str
    task_id: str
    cancel: asyncio.Event


def _result_event(job: ToolJob, status: OperationStatus) -> ToolResult:
    return ToolResult(
        operation_id=job.operation_id,
        session_id=job.session_id,
        task_id=job.task_id,
        compat=job.compat,
        status=status,
        trace=current_carrier(),
    )


def _interrupted(op: OperationRecord, spec: ToolSpec, *, spent: bool = False) -> dict[str, Any]:
    """The error record of an attempt cut short by its worker's death or a lost lease."""
    interruptions = op.interruptions + 1
    if spent:
        message = (
            f"interrupted {interruptions} times (its worker died or lost its lease mid-call); "
            f"the budget of {spec.retry.max_interruptions} interruptions is spent"
        )
    else:
        message = (
            f"attempt {op.attempts} was interrupted (its worker died or lost its lease "
            f"mid-call); the effect may or may not have happened (replay policy {spec.policy!r})"
        )
    return {
        "type": "Interrupted",
        "message": message,
        "retryable": False,
        "attempt": op.attempts,
        "interruptions": interruptions,
    }
