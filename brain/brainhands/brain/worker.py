"""The Brain worker: consumes wake-ups and tool results for its compatibility keys, takes the
session's lease, advances the session until nothing is runnable, and lets go.

Wake-ups and results come from two queues, and both kinds of pass share ``concurrency``
slots (``brain.gate``), where a waiting result goes first and wake-ups leave half the slots
to results while any run: a burst of new sessions does not hold back the results of the
sessions already running.

A message only says "look at session S"; the store says what to do. So duplicates, losses and
reordering cost nothing but time: a duplicate finds nothing runnable, and a loss is found by
the sweeper.

The worker keeps the state of the sessions it advanced last (``KEPT_SESSIONS`` of them). When
it takes such a session again and the fence claim finds it at the same version, nothing of
it changed but its submissions, its inbox and its tool outcomes, so only those are read again
(in one statement on PostgreSQL, whatever woke the pass).

A pass applies every tool outcome it finds, not only the one that woke it, so after a fan-out
most result messages arrive for calls already applied. Such a message is acknowledged without
a pass when the call's task is settled: the worker remembers the calls its own passes settled
(``KEPT_CALLS`` of them), and asks the store about a call when it knows the session but not
the call as waiting, or when the session's lease was busy (its holder may have applied the
call meanwhile). A session it does not know gets a pass, which reads it anyway. A redelivered
message always gets a pass: it may be the only trigger left of a pass that died after
settling the call but before running what the settlement made ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from typing import Any

from brainhands.brain.arrivals import LEASE_WAIT_MARGIN
from brainhands.brain.edits import StartSubmission, start_from_input
from brainhands.brain.gate import PassGate
from brainhands.brain.registry import TaskRegistry
from brainhands.brain.scheduler import SessionRunner
from brainhands.shared import metrics
from brainhands.shared.broker import Broker
from brainhands.shared.delivery import Delivery
from brainhands.shared.errors import (
    BrainhandsError,
    LeaseLost,
    NotFoundError,
    StaleLeaseError,
    StoreWentBack,
)
from brainhands.shared.keys import session_resource
from brainhands.shared.lease import Lease, LeaseManager
from brainhands.shared.live import LivePublisher
from brainhands.shared.messages import CancelNotice, Message, SessionWake, ToolResult
from brainhands.shared.progress import QueueProgress
from brainhands.shared.settlement import judge_delivery, misplaced, settle
from brainhands.shared.store import ClaimedSession, SessionState, Store, ToolCatalog
from brainhands.shared.tracing import message_span
from brainhands.shared.witness import session_went_back

log = logging.getLogger("brainhands.brain")


LOCAL_TIMER_HORIZON = 300.0
"""Timers due within this many seconds are also kept in memory, so they fire on time; the
sweeper remains the durable backstop."""

KEPT_SESSIONS = 1000
"""Sessions whose state a worker keeps between passes (least recently advanced dropped)."""

KEPT_CALLS = 10_000
"""Tool calls whose applied results a worker remembers (oldest dropped)."""


@dataclass(frozen=True)
class Trigger:
    """The delivery that woke a pass, told on the line that ends it (``advanced``, ``busy``
    or ``already_applied``)."""

    by: str
    """The message's type: ``wake`` (a submission, the sweeper, a timer) or ``tool_result``."""
    redelivered: bool
    received_at: float
    """When the worker took the delivery (epoch seconds)."""

    def log(self) -> dict[str, Any]:
        return {"by": self.by, "redelivered": self.redelivered, "received_at": self.received_at}


class BrainWorker:
    """Advances sessions of the compatibility keys ``compats``."""

    def __init__(
        self,
        *,
        store: Store,
        broker: Broker,
        leases: LeaseManager,
        tasks: TaskRegistry,
        tools: ToolCatalog,
        compats: list[str],
        concurrency: int = 16,
        max_restarts: int = 5,
        declaration_grace: float = 30.0,
        shutdown_grace: float = 20.0,
        start_submission: StartSubmission = start_from_input,
        progress: QueueProgress | None = None,
    ) -> None:
        self.store = store
        self.broker = broker
        self.leases = leases
        self.tasks = tasks
        self.tools = tools
        self.compats = compats
        self.concurrency = concurrency
        self.max_restarts = max_restarts
        self.declaration_grace = declaration_grace
        self.shutdown_grace = shutdown_grace
        self.start_submission = start_submission
        self.progress = progress
        """Where the publish times of the messages received are noted for the sweeper."""
        self.consuming = False
        """True while the wake-up and result queues are consumed (readiness)."""
        self._gate = PassGate(concurrency)
        self._live = LivePublisher(broker)
        self._timers: set[asyncio.TimerHandle] = set()
        self._publishing: set[asyncio.Task[None]] = set()
        self._kept: OrderedDict[str, SessionState] = OrderedDict()
        self._applied: OrderedDict[str, None] = OrderedDict()

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; running sessions get the grace period to finish."""
        consumers = []
        topology = self.broker.topology
        for compat in self.compats:
            # Results on a queue and a prefetch of their own, so they are received even
            # while a burst of wake-ups fills the other's; the gate lets them in first.
            for queue in (
                await topology.declare_brain(self.broker.channel, compat),
                await topology.declare_results(self.broker.channel, compat),
            ):
                consumers.append(
                    await self.broker.consume(queue, self.handle, prefetch=self.concurrency)
                )
                log.info("consuming", extra={"event": "consuming", "queue": queue})
        self.consuming = True
        if self.progress is not None:
            await self.progress.run(stop)
        else:
            await stop.wait()
        self.consuming = False
        log.info("draining", extra={"event": "draining"})
        for timer in self._timers:
            timer.cancel()
        for consumer in consumers:
            await consumer.cancel(grace=self.shutdown_grace)

    async def handle(self, message: Message, delivery: Delivery) -> None:
        if self.progress is not None:
            self.progress.note(delivery.routing_key, delivery.published_at)
        if not isinstance(message, SessionWake | ToolResult):
            await settle(self.broker.park, delivery, judge_delivery(misplaced(message)))
            return
        if delivery.returned:
            metrics.labelled(metrics.REDELIVERIES, "brain").inc()
        # What woke the pass, on the line that ends it: one INFO line for each delivery.
        trigger = Trigger(message.type, delivery.returned, time.time())
        log.debug(
            "woken", extra={"event": "woken", "session_id": message.session_id, **trigger.log()}
        )
        # A redelivered result always gets a pass (see the module's docstring).
        result = message if isinstance(message, ToolResult) and not delivery.returned else None
        ended: LeaseLost | None = None
        if result is None or not await self._already_applied(result, trigger):
            try:
                # Results first: a pass waiting for a slot goes before waiting wake-ups.
                async with self._gate.slot(urgent=isinstance(message, ToolResult)):
                    with message_span(
                        "brainhands.brain.pass",
                        message.trace,
                        {"session_id": message.session_id, "trigger": message.type},
                    ):
                        await self.advance(message.session_id, trigger, result=result)
            except LeaseLost as exc:
                metrics.LEASE_LOST.inc()
                log.warning(
                    "session lease lost; handing back",
                    extra={
                        "event": "lease_lost",
                        "session_id": message.session_id,
                        "reason": exc.reason,
                        **trigger.log(),
                    },
                )
                ended = exc
        await settle(self.broker.park, delivery, judge_delivery(ended))

    async def advance(
        self, session_id: str, trigger: Trigger, *, result: ToolResult | None = None
    ) -> None:
        """Take the session, run it until nothing is runnable, let go (``result``: the tool
        result this pass is for, if it may be skipped once applied)."""
        claimed: list[ClaimedSession] = []
        lease = await self._acquire(session_id, claimed, trigger, result)
        if lease is None:
            return
        committed: SessionState | None = None
        try:
            async with self.leases.hold(lease):
                runner = SessionRunner(
                    store=self.store,
                    tasks=self.tasks,
                    tools=self.tools,
                    topology=self.broker.topology,
                    session_id=session_id,
                    fence=lease.token,
                    claims_fence=lease.handed_over,
                    max_restarts=self.max_restarts,
                    declaration_grace=self.declaration_grace,
                    start_submission=self.start_submission,
                    compats=frozenset(self.compats),
                    live=self._live,
                )
                summary = await runner.run(claimed[-1])
            committed = runner.snapshot() if summary.foreign is None else claimed[-1].state
        except StaleLeaseError as exc:
            self._kept.pop(session_id, None)
            metrics.STALE_REJECTED.inc()
            log.warning(
                "superseded on session; stopped",
                extra={
                    "event": "stale",
                    "session_id": session_id,
                    "fence": lease.token,
                    "current": exc.current,
                    **trigger.log(),
                },
            )
            return
        except NotFoundError:
            log.warning(
                "wake-up for an unknown session",
                extra={"event": "unknown_session", "session_id": session_id, **trigger.log()},
            )
            return
        except BaseException:
            self._kept.pop(session_id, None)
            raise
        finally:
            # The version the pass left is Redis's witness of the store (``shared.witness``).
            # A pass that ended normally has nothing in flight: it hands the lease over, if
            # its token is the store's fence (claimed with the lease or by a commit).
            witness = None if committed is None else committed.session.version
            hand_over = committed is not None and not runner.claims_fence
            with contextlib.suppress(BrainhandsError):
                await self.leases.release(lease, witness=witness, hand_over=hand_over)
        if summary.foreign is None:
            assert committed is not None
            self._keep(session_id, committed)
            self._remember_applied(claimed[-1].state, committed)
        else:
            log.warning(
                "session of another build; passed on",
                extra={
                    "event": "foreign",
                    "session_id": session_id,
                    "compat": summary.foreign,
                    **trigger.log(),
                },
            )
            wake = SessionWake(session_id=session_id, compat=summary.foreign, reason="handover")
            await self.broker.publish_routed(
                wake, self.broker.topology.brain_queue(summary.foreign)
            )
            return
        metrics.SESSIONS_ADVANCED.inc()
        log.info(
            "session advanced",
            extra={
                "event": "advanced",
                "session_id": session_id,
                "phases": summary.phases,
                "commits": summary.commits,
                # Where the fence was claimed: with the lease, by the first commit, or not.
                "claim": claim_of(lease, summary.commits),
                "next_wake": summary.next_wake,
                **trigger.log(),
            },
        )
        if summary.next_wake is not None:
            self._remember_timer(session_id, runner.compat, summary.next_wake)
        for operation_id in summary.cancelled_calls:
            notice = CancelNotice(
                operation_id=operation_id,
                session_id=session_id,
                reason="the task that made the call was cancelled",
            )
            with contextlib.suppress(BrainhandsError):  # best effort: the store has the fact
                await self.broker.broadcast(notice, self.broker.topology.cancel_key)

    async def _acquire(
        self,
        session_id: str,
        claimed: list[ClaimedSession],
        trigger: Trigger,
        result: ToolResult | None,
    ) -> Lease | None:
        """The session's lease; what its fence claim read is appended to ``claimed``.

        None if another pass holds it past the lease's time (its holder re-checks for new
        results before letting go), or, while waiting for it, ``result`` was applied.
        ``StoreWentBack`` when the store is behind what Redis witnessed of the session, or
        while such a finding stands: the delivery is held (``shared.witness``).
        """
        resource = session_resource(session_id)
        deadline = time.monotonic() + self.leases.ttl_ms / 1000 + LEASE_WAIT_MARGIN

        async def claim(token: int, *, defer: bool = False) -> None:
            known = self._kept.get(session_id)
            claimed.append(await self.store.claim_session(session_id, token, known, defer=defer))

        def went_back(lease: Lease) -> StoreWentBack | None:
            stored = claimed[-1].state.session.version if claimed else None
            return session_went_back(resource, lease.witnessed, stored)

        waits = 0
        while True:
            lease = await self.leases.acquire_fenced(
                resource, claim, went_back=went_back, check=partial(claim, defer=True)
            )
            if lease is not None:
                return lease
            if time.monotonic() > deadline:
                log.info(
                    "session busy",
                    extra={"event": "busy", "session_id": session_id, **trigger.log()},
                )
                return None
            await asyncio.sleep(min(0.2, self.leases.ttl_ms / 5000))
            waits += 1
            # Asked after 1, 2, 4, 8... waits: a long pass costs a few reads, not one a wait.
            if (
                result is not None
                and waits & (waits - 1) == 0
                and await self._already_applied(result, trigger, waited=True)
            ):
                return None

    def _keep(self, session_id: str, state: SessionState) -> None:
        self._kept[session_id] = state
        self._kept.move_to_end(session_id)
        while len(self._kept) > KEPT_SESSIONS:
            self._kept.popitem(last=False)

    async def _already_applied(
        self, result: ToolResult, trigger: Trigger, *, waited: bool = False
    ) -> bool:
        """Whether ``result``'s call is settled (then it is logged as skipped); ``waited``:
        the session's lease was found busy."""
        if result.operation_id not in self._applied:
            kept = self._kept.get(result.session_id)
            if not waited and (
                kept is None or any(t.id == result.task_id for t in kept.open_tasks)
            ):
                return False  # unknown session, or waiting as far as this worker knows
            found = await self.store.queries.tasks_by_ids([result.task_id])
            task = found.get(result.task_id)
            if task is None or task.session_id != result.session_id or task.status != "terminal":
                return False
        log.info(
            "result already applied",
            extra={
                "event": "already_applied",
                "session_id": result.session_id,
                "operation_id": result.operation_id,
                **trigger.log(),
            },
        )
        return True

    def _remember_applied(self, before: SessionState, after: SessionState) -> None:
        """Note the calls that were waited on before the pass and are settled after it."""
        still_open = {t.operation_id for t in after.open_tasks}
        for task in before.open_tasks:
            if task.operation_id and task.operation_id not in still_open:
                self._applied[task.operation_id] = None
        while len(self._applied) > KEPT_CALLS:
            self._applied.popitem(last=False)

    def _remember_timer(self, session_id: str, compat: str, at: float) -> None:
        delay = at - time.time()
        if delay > LOCAL_TIMER_HORIZON:
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.discard(handle)
            wake = SessionWake(session_id=session_id, compat=compat, reason="timer")
            queue = self.broker.topology.brain_queue(compat)
            task = loop.create_task(self._publish_quietly(wake, queue))
            self._publishing.add(task)
            task.add_done_callback(self._publishing.discard)

        handle = loop.call_later(max(0.0, delay), fire)
        self._timers.add(handle)

    async def _publish_quietly(self, wake: SessionWake, queue: str) -> None:
        try:
            await self.broker.publish(wake, queue)
        except BrainhandsError as exc:  # the sweeper will find the timer anyway
            log.warning("timer wake-up not sent: %s", exc, extra={"event": "timer_lost"})


def claim_of(lease: Lease, commits: int) -> str:
    """Where a pass claimed its session's fence: ``acquire`` (a lease not handed over),
    ``first_commit``, or ``none`` (handed over, and it committed nothing)."""
    if not lease.handed_over:
        return "acquire"
    return "first_commit" if commits else "none"
