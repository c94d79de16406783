"""The Hands worker: takes tool jobs from its pool's queue and runs each one at most as its
replay policy allows, recording every outcome in the operation ledger.

Per job: take the operation's lease (Redis) and claim its row with the lease's fencing token
(store), then decide from the row (and, for a ``query`` tool, whether the job may have been
delivered before) whether to publish an existing outcome again, run the tool, ask the tool's
query function, or record ``uncertain`` (``hands.decide``). Only an ``unsafe`` call commits
``started`` before it goes out; a ``safe`` or ``query`` one goes from the claim straight to
the tool. The outcome and its result event are committed together, guarded by the token; the
job is acked only after that commit (``shared.settlement`` decides how each delivery is
settled). A call in progress is one object (``hands.running``). Before all that, a job whose
tool is limited waits, in hand and claiming nothing, until its call is within its limits
(``hands.admission``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from pydantic import ValidationError

from brainhands.hands.admission import Admission
from brainhands.hands.decide import (
    Step,
    after_query,
    goes_out_unmarked,
    judge_attempt,
    next_step,
    retry_or_fail,
    take_over,
    tool_failures,
)
from brainhands.hands.outcomes import Outcomes
from brainhands.hands.running import HeldJob, RunningCall, RunningCalls, lease_vouched
from brainhands.hands.sandbox import Sandboxes, call_sandbox
from brainhands.hands.workspace import WorkspaceFiles, attempt_workdir
from brainhands.shared import metrics
from brainhands.shared.broker import Broker
from brainhands.shared.calls import ToolCallIntent
from brainhands.shared.delivery import Delivery
from brainhands.shared.errors import (
    BrainhandsError,
    CallCancelled,
    LeaseLost,
    StaleLeaseError,
    StoreWentBack,
    UnknownToolError,
    WorkspaceMoved,
)
from brainhands.shared.keys import operation_resource
from brainhands.shared.lease import Lease, LeaseManager
from brainhands.shared.limiter import Limiter
from brainhands.shared.limits import LimitRules
from brainhands.shared.live import LivePublisher
from brainhands.shared.messages import (
    MAX_INLINE_JSON,
    CancelNotice,
    Message,
    ToolJob,
)
from brainhands.shared.renewal import Holding
from brainhands.shared.settlement import judge_delivery, misplaced, settle
from brainhands.shared.store import (
    OperationClaim,
    OperationLedger,
    OperationStatus,
)
from brainhands.shared.tools import QueryAnswer, ToolRegistry, describe_invalid_arguments
from brainhands.shared.tracing import message_span
from brainhands.shared.witness import operation_went_back

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
        limiter: Limiter | None = None,
        limit_rules: LimitRules | None = None,
        waiting_room: int = 0,
        sandboxes: Sandboxes | None = None,
        workspaces: WorkspaceFiles | None = None,
    ) -> None:
        self.ledger = ledger
        self.broker = broker
        self.leases = leases
        self.registry = registry
        self.pool = pool
        self.concurrency = concurrency
        self.shutdown_grace = shutdown_grace
        self._outcomes = Outcomes(ledger, broker, max_inline_result)
        self.consuming = False
        """True while the pool's queue is consumed (readiness)."""
        self.cancel_check_period = cancel_check_period
        self._live = LivePublisher(broker)
        self._running = RunningCalls()
        self._admission = Admission(
            limiter, limit_rules or LimitRules(), registry, pool, self._live.publish
        )
        self.waiting_room = waiting_room
        """Jobs held waiting for their limits beyond ``concurrency`` (when any tool of the
        pool is limited), so that one tool's waiting calls leave room for the others'."""
        self._spots = asyncio.Semaphore(concurrency)
        """Jobs processed at once, waiting ones not counted."""
        self._sandboxes = sandboxes or Sandboxes()
        self._workspaces = workspaces or WorkspaceFiles(ledger.workspaces)

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, then drain: running tools get the grace period."""
        topology = self.broker.topology
        queue = await topology.declare_hands_pool(self.broker.channel, self.pool)
        room = self.waiting_room if self._admission.limited() else 0
        consumer = await self.broker.consume(queue, self.handle, prefetch=self.concurrency + room)
        notices = await topology.declare_cancel_listener(self.broker.channel)
        listener = await self.broker.consume(notices, self.on_cancel)
        watcher = asyncio.create_task(self._running.watch(self.ledger, self.cancel_check_period))
        renewer = asyncio.create_task(self._admission.renew_held())
        log.info("consuming", extra={"event": "consuming", "queue": queue, "pool": self.pool})
        self.consuming = True
        await stop.wait()
        self.consuming = False
        await listener.cancel()
        watcher.cancel()
        log.info("draining", extra={"event": "draining", "running": len(self._running)})
        self._running.cancel_all()
        await consumer.cancel(grace=self.shutdown_grace)
        renewer.cancel()  # held slots are renewed while their calls drain

    async def handle(self, message: Message, delivery: Delivery) -> None:
        """Process one delivery; ack only after the outcome is durable."""
        if not isinstance(message, ToolJob):
            await settle(self.broker.park, delivery, judge_delivery(misplaced(message)))
            return
        with message_span(
            "brainhands.hands.job",
            message.trace,
            {"operation_id": message.operation_id, "tool": message.tool},
        ):
            # Waiting for a limit takes no spot: other tools' jobs go on meanwhile.
            async with self._admission.admitted(message), self._spots:
                await self._handle(message, delivery)

    async def _handle(self, job: ToolJob, delivery: Delivery) -> None:
        metrics.labelled(metrics.JOBS_RECEIVED, self.pool).inc()
        if delivery.returned:
            metrics.labelled(metrics.REDELIVERIES, "hands").inc()
        fields = {"operation_id": job.operation_id, "session_id": job.session_id, "tool": job.tool}
        log.debug(
            "received",
            extra={
                **fields,
                "event": "received",
                "redelivered": delivery.returned,
                "delivery_count": delivery.delivery_count,
            },
        )
        claimed: list[OperationClaim] = []
        intent = ToolCallIntent.of_job(job).operation_columns()

        async def claim(token: int) -> None:
            claimed.append(await self.ledger.claim(job.operation_id, token, intent=intent))

        lease = await self._acquire(job, claim, claimed)
        ended: BaseException | None = None
        if lease is None:
            # A live holder renews the lease and will publish the result itself.
            log.info("held by another worker", extra={**fields, "event": "skipped"})
        else:
            log.debug("claimed", extra={**fields, "event": "claimed", "fence": lease.token})
            held = HeldJob(job, lease.token)
            ended = await self._hold(lease, held, claimed[-1], delivery.delivered_before, fields)
        await settle(self.broker.park, delivery, judge_delivery(ended))
        if lease is not None and ended is None:
            metrics.labelled(metrics.JOBS_ACKED, self.pool).inc()
            log.debug("acked", extra={**fields, "event": "acked"})

    async def _hold(
        self,
        lease: Lease,
        held: HeldJob,
        claim: OperationClaim,
        delivered_before: bool,
        fields: dict[str, str],
    ) -> LeaseLost | StaleLeaseError | None:
        """Process the job under its lease, then let go; what it ended with, if it was
        refused for the lease (``settlement.judge_delivery`` settles the delivery by it).
        ``delivered_before``: the job may have reached a worker before (``Delivery``)."""
        final: int | None = None
        try:
            holding = self.leases.hold(lease)
            async with holding:
                await self._process(held, claim, delivered_before, holding)
            final = lease.token  # every way through ends with the outcome committed
        except LeaseLost as exc:
            metrics.LEASE_LOST.inc()
            log.warning(
                "lease lost; job handed back",
                extra={**fields, "event": "lease_lost", "reason": exc.reason},
            )
            return exc
        except StaleLeaseError as exc:
            metrics.STALE_REJECTED.inc()
            log.warning(
                "superseded by a newer holder; nothing recorded",
                extra={**fields, "event": "stale", "fence": lease.token, "current": exc.current},
            )
            return exc
        finally:
            with contextlib.suppress(BrainhandsError):  # final: Redis's witness of the outcome
                await self.leases.release(lease, witness=final)
        return None

    async def on_cancel(self, message: Message, delivery: Delivery) -> None:
        """A cancel notice: if the call runs here, its context now says ``cancelled()``."""
        if isinstance(message, CancelNotice):
            self._running.cancel(message.operation_id)
        # Whatever it was, it is done with: a notice is only the fast path to a stored fact.
        await settle(self.broker.park, delivery, judge_delivery(None))

    async def _acquire(
        self, job: ToolJob, claim: Any, claimed: list[OperationClaim]
    ) -> Lease | None:
        """The operation's lease, waiting up to one TTL for a holder that may have died;
        ``StoreWentBack`` when the row lost an outcome Redis witnessed (``shared.witness``)."""
        resource = operation_resource(job.operation_id)
        deadline = time.monotonic() + self.leases.ttl_ms / 1000 + 1.0

        def went_back(lease: Lease) -> StoreWentBack | None:
            stored = claimed[-1].operation.status if claimed else None
            return operation_went_back(resource, lease.witnessed, stored)

        while True:
            lease = await self.leases.acquire_fenced(resource, claim, went_back=went_back)
            if lease is not None or time.monotonic() > deadline:
                return lease
            await asyncio.sleep(self.leases.ttl_ms / 5000)

    async def _process(
        self,
        held: HeldJob,
        claim: OperationClaim,
        delivered_before: bool,
        holding: Holding[Lease],
    ) -> None:
        job, op = held.job, claim.operation
        try:
            spec = self.registry.get(job.tool)
        except UnknownToolError as exc:
            await self._outcomes.failure(held, "UnknownToolError", str(exc))
            return
        try:
            args = spec.args_model.model_validate(await self._arguments(job))
        except ValidationError as exc:
            await self._outcomes.failure(held, "InvalidArguments", describe_invalid_arguments(exc))
            return
        call = RunningCall(job, held.fence, spec, args)
        policy, retry = spec.policy, spec.retry
        step = next_step(
            op.status,
            policy,
            unmarked_before=claim.unmarked_before,
            delivered_before=delivered_before,
            interruptions=op.interruptions,
            retry=retry,
            next_attempt_at=op.next_attempt_at,
            now=time.time(),
        )
        if step.action == "republish":
            await self._outcomes.republish(call, op)
            return
        if step.action == "run" and not step.delay:  # the hot path: straight to the tool
            await self._run(call, op.attempts, op.interruptions, holding, claim.cancel_requested)
            return
        await self._take_over(call, step, claim, holding)

    async def _take_over(
        self, call: RunningCall, step: Step, claim: OperationClaim, holding: Holding[Lease]
    ) -> None:
        """A call that does not go straight to the tool: one an earlier holder cut short, or
        whose start is deferred (a query, a backoff; ``decide.Takeover``)."""
        job, op, spec = call.job, claim.operation, call.spec
        policy, retry = spec.policy, spec.retry
        taken = take_over(
            op.status,
            policy,
            retry,
            attempts=op.attempts,
            interruptions=op.interruptions,
            unmarked_before=claim.unmarked_before,
        )
        if taken.interrupted:
            metrics.INTERRUPTIONS.labels(spec.name).inc()
        if step.action in ("record_uncertain", "record_interrupted"):
            status, error = taken.ending(step.action)
            await self._outcomes.record(
                call, status, error=error, interrupted=True, attempted=taken.attempted
            )
            return
        deferred = taken.deferred(
            error=op.error, next_attempt_at=op.next_attempt_at, now=time.time()
        )
        await self.ledger.schedule_retry(
            job.operation_id,
            call.fence,
            error=deferred.error,
            retry_at=deferred.retry_at,
            interrupted=taken.interrupted,
            attempted=taken.attempted,
        )
        if step.action == "query":
            attempted = not taken.interrupted  # else counted just now, with the settle
            if await self._found_by_query(call, taken.queried_attempt, attempted=attempted):
                return
            step = after_query(
                interrupted=taken.interrupted, interruptions=taken.interruptions, retry=retry
            )
            if step.action == "record_interrupted":  # counted already, with the settle
                await self._outcomes.record(call, "failed", error=taken.cut_short(spent=True))
                return
        if taken.interrupted:
            log.info(
                "interrupted call runs again",
                extra={
                    "event": "rerun",
                    "operation_id": job.operation_id,
                    "interruptions": taken.interruptions_counted,
                    "delay": deferred.backoff,
                },
            )
        if deferred.retry_at is not None and deferred.retry_at > time.time():
            await asyncio.sleep(deferred.retry_at - time.time())
        await self._run(call, taken.attempts, taken.interruptions_counted, holding, None)

    async def _arguments(self, job: ToolJob) -> Any:
        """The job's arguments, read from their blob when they travel by reference."""
        if job.arguments_blob_id is None:
            return job.arguments
        return json.loads(await self.ledger.read_blob(job.arguments_blob_id))

    async def _run(
        self,
        call: RunningCall,
        attempts: int,
        interruptions: int,
        holding: Holding[Lease],
        cancel_requested: bool | None,
    ) -> None:
        """Call the tool; each failure is judged by the tool's replay and retry policies.

        ``attempts`` and ``interruptions`` are the row's counts so far. ``cancel_requested``
        is what the claim read of the call's cancel, given when the holder comes straight
        from its claim (None otherwise): only then may the first attempt go out with no
        started mark (``decide.goes_out_unmarked``), checking the cancel the claim read.
        Every other attempt marks its start, which refuses a call whose cancel committed."""
        job, spec = call.job, call.spec
        straight = cancel_requested is not None
        while True:
            await self._admission.before_attempt(job, first=straight)
            unmarked = goes_out_unmarked(
                spec.policy, straight_from_claim=straight, lease_lasts=lease_vouched(holding)
            )
            started = await self._start(
                call, attempts, unmarked=unmarked, cancel_requested=cancel_requested
            )
            if started is None:
                return
            attempt, started_at = started
            log.info(
                "started",
                extra={
                    "event": "started",
                    "operation_id": job.operation_id,
                    "session_id": job.session_id,
                    "attempt": attempt,
                    "marked": not unmarked,
                },
            )
            failure = await self._attempt(call, attempt, unmarked=unmarked, started_at=started_at)
            if failure is None:
                return
            failures = tool_failures(attempt, interruptions)
            verdict = judge_attempt(
                failure,
                spec.policy,
                failures=failures,
                interruptions=interruptions,
                retry=spec.retry,
            )
            if verdict.action == "again":
                await self.ledger.schedule_retry(
                    job.operation_id,
                    call.fence,
                    error=verdict.error,
                    retry_at=time.time(),
                    interrupted=True,
                    attempted=unmarked,
                )
                attempts, interruptions, straight = attempt, interruptions + 1, False
                log.info(
                    "workspace moved on: the call runs again on its new version",
                    extra={"event": "workspace_moved", "operation_id": job.operation_id},
                )
                continue
            if verdict.action == "query":
                if await self._found_by_query(call, attempt, attempted=unmarked):
                    return
                verdict = retry_or_fail(
                    failure, failures=failures, retry=spec.retry, error=verdict.error
                )
            if verdict.action in ("uncertain", "fail"):
                status: OperationStatus = "uncertain" if verdict.action == "uncertain" else "failed"
                await self._outcomes.record(
                    call, status, error=verdict.error, attempted=unmarked, started_at=started_at
                )
                return
            await self.ledger.schedule_retry(
                job.operation_id,
                call.fence,
                error=verdict.error,
                retry_at=time.time() + verdict.delay,
                attempted=unmarked,
            )
            attempts, straight = attempt, False
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

    async def _attempt(
        self, call: RunningCall, attempt: int, *, unmarked: bool, started_at: float | None
    ) -> Exception | None:
        """Run attempt ``attempt`` of the tool, in its workspace and sandbox when it has
        them: None once its success is recorded (with the workspace's next version, when it
        changed it), else what it failed with (``WorkspaceMoved``: its changes were
        discarded, another call's version came first)."""
        job, spec = call.job, call.spec
        async with contextlib.AsyncExitStack() as scope:
            cancel = scope.enter_context(self._running.attempt(call))
            sandbox = scope.enter_context(call_sandbox(self._sandboxes, spec.sandbox))
            workdir = scope.enter_context(attempt_workdir(self._sandboxes, spec, sandbox))
            checkout = None
            if spec.workspace is not None and workdir is not None:
                if not spec.workspace_read_only:
                    await scope.enter_async_context(
                        self._workspaces.writing(job.session_id, spec.workspace)
                    )
                checkout = await self._workspaces.materialise(
                    job.session_id, spec.workspace, workdir.path, workdir.user
                )
            ctx = call.context(attempt, cancel, self._live.publish, self.ledger, sandbox, workdir)
            try:
                async with asyncio.timeout(spec.timeout) as deadline:
                    with metrics.labelled(metrics.TOOL_SECONDS, spec.name).time():
                        value = await spec.fn(call.args, ctx)
            except Exception as exc:  # the tool's failure is data; LeaseLost is not one
                if isinstance(exc, TimeoutError) and deadline.expired():
                    return TimeoutError(f"cancelled after its timeout of {spec.timeout}s")
                return exc
            changed = None
            if checkout is not None and workdir is not None and not spec.workspace_read_only:
                changed = await self._workspaces.capture(checkout, workdir.path)
            try:
                await self._outcomes.success(
                    call, value, attempted=unmarked, started_at=started_at, workspace=changed
                )
            except WorkspaceMoved as moved:
                return moved
            return None

    async def _start(
        self, call: RunningCall, attempts: int, *, unmarked: bool, cancel_requested: bool | None
    ) -> tuple[int, float | None] | None:
        """Begin an attempt: its number and, when it goes out unmarked, the time it went out
        (a marked one's is the mark's). None when the call's cancel stops it, recorded
        ``cancelled``: an unmarked attempt checks the cancel its claim read
        (``cancel_requested``), a marked one is refused by its mark."""
        if unmarked and not cancel_requested:
            return attempts + 1, time.time()
        if not unmarked:
            with contextlib.suppress(CallCancelled):
                op = await self.ledger.mark_started(call.job.operation_id, call.fence)
                return op.attempts, None
        error = {"type": "Cancelled", "message": "cancelled before the call went out"}
        await self._outcomes.record(call, "cancelled", error=error)
        return None

    async def _found_by_query(self, call: RunningCall, attempt: int, *, attempted: bool) -> bool:
        """Ask the external system whether the interrupted call took effect; record what it
        learned if it learned the outcome (``attempted``: counting the attempt that made it,
        which went out unmarked). False: the call did not happen, and may run again."""
        assert call.spec.query is not None
        # An event of its own: a query is no attempt, and nothing asks it to stop.
        ctx = call.context(attempt, asyncio.Event(), ledger=self.ledger)
        async with asyncio.timeout(call.spec.timeout):
            answer: QueryAnswer = await call.spec.query(call.args, ctx)
        log.info(
            "queried",
            extra={
                "event": "queried",
                "operation_id": call.job.operation_id,
                "happened": answer.happened,
            },
        )
        if answer.happened is None:
            error = {"type": "Unknown", "message": answer.error or "the query could not tell"}
            await self._outcomes.record(call, "uncertain", error=error, attempted=attempted)
        elif answer.happened and answer.error is not None:
            error = {"type": "ToolError", "message": answer.error}
            await self._outcomes.record(call, "failed", error=error, attempted=attempted)
        elif answer.happened:
            await self._outcomes.success(call, answer.result, via="query", attempted=attempted)
        return answer.happened is not False
