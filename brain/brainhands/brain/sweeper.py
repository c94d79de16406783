"""The sweeper: finds work whose trigger went missing and triggers it again.

One sweeper is active per deployment (whoever holds the ``sweeper`` lease); every Brain runs
a candidate. Each period it reads the store for sessions with something to do -- due timers
and signal-wait timeouts, runnable or interrupted tasks, winding-down parents, tool outcomes
not yet applied, queued submissions with no root task ahead of them, inbox requests (a
cancel, a signal a task waits for) not yet applied -- and wakes those no Brain holds; and
it re-sends tool jobs that went without an outcome or a live lease for too long, flagged as
re-sent (a ``query`` tool then asks before it runs: the first copy may have made the call
and died before any commit). Normal
traffic never waits for it: its period only bounds how long a lost message can delay work.

A need whose trigger is still on its way looks just like one whose trigger was lost. So the
sweeper holds a wake-up back (``plan_wake_ups``) while the session has rows in the outbox
(the relays will publish them), and while its Brain queues hold a backlog, until their
delivery marks (``shared.progress``) show that all that was published for the session has
been delivered. Waking it sooner would only add to the backlog the Brains are working
through. No hold lasts longer than ``MAX_BACKLOG_BACKOFF`` backlog graces; without a mark
(none shared yet, Redis restarted) a hold lasts ``backlog_grace``, twice as long after each
wake-up the sweeper sent the session.

A session whose only need is a blocked task (a kind or version no Brain that looked had a
handler for) is not woken each period: its Brain would only find the same. It is looked at
again ``blocked_recheck`` after the block, then twice as long after each look, up to
``MAX_BACKLOG_BACKOFF`` times, in case a build that knows the kind has come up since.

It also fires the schedules whose tick has come (``brain.schedules``): each tick is one
submission, whichever sweepers fire it and however often.

A row it cannot turn into a job (a tool task whose input lacks what a job needs) is reported
once and skipped; the other calls are still re-sent. Nothing that goes wrong in a sweep stops
the sweeper, or the Brain it runs in: the failure is logged and the next period tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from redis.exceptions import RedisError

from brainhands.brain.callbacks import Callbacks
from brainhands.brain.decide import TOOL_KIND
from brainhands.brain.retention import BATCH as RETENTION_BATCH
from brainhands.brain.retention import Retention, expire
from brainhands.brain.schedules import LATE_AFTER, fire_schedules
from brainhands.shared import metrics
from brainhands.shared.broker import Broker
from brainhands.shared.calls import ToolCallIntent
from brainhands.shared.delivery import REPUBLISHED_HEADER
from brainhands.shared.errors import (
    BrainhandsError,
    BrokerError,
    StoreWentBack,
    UnroutableMessage,
)
from brainhands.shared.keys import SWEEPER_RESOURCE, operation_resource, session_resource
from brainhands.shared.lease import Lease, LeaseManager
from brainhands.shared.messages import SessionWake, ToolJob
from brainhands.shared.progress import QueueProgress
from brainhands.shared.store import PendingCall, SessionRef, Store

log = logging.getLogger("brainhands.sweeper")

MAX_BACKLOG_BACKOFF = 8
RETENTION_EVERY = 60.0
"""Seconds between looks for sessions past their retention (at once again after a full
batch)."""
"""The longest hold of a wake-up, in backlog graces."""
REPUBLISHED = {REPUBLISHED_HEADER: "sweeper"}
"""The headers of a job the sweeper publishes again."""
MARK_MARGIN = 2.0
"""Seconds a queue's delivery mark must be past a session's time before what was published
for the session is taken as delivered: marks are whole seconds, and clocks differ a little."""


@dataclass(frozen=True)
class Watch:
    """What the sweeper saw of a session while it needs attention: since when the session had
    nothing left in the outbox (``clear_since``; None while it has), and the sweeper's own
    wake-ups of it (the last one's time, how many)."""

    clear_since: float | None = None
    woken_at: float | None = None
    woken: int = 0


def watch_sessions(
    watched: Mapping[str, Watch], sessions: Sequence[SessionRef], unsent: set[str], now: float
) -> dict[str, Watch]:
    """The watch of each of ``sessions`` after a sweep at ``now`` that found ``unsent`` (the
    sessions with outbox rows not yet published); a session no longer listed is dropped, so
    its next need starts afresh."""
    updated: dict[str, Watch] = {}
    for ref in sessions:
        watch = watched.get(ref.session_id, Watch())
        if ref.session_id in unsent:
            watch = dataclasses.replace(watch, clear_since=None)
        elif watch.clear_since is None:
            watch = dataclasses.replace(watch, clear_since=now)
        updated[ref.session_id] = watch
    return updated


def plan_wake_ups(
    sessions: Sequence[SessionRef],
    *,
    watched: Mapping[str, Watch],
    backlogs: Mapping[str, int],
    marks: Mapping[str, float],
    now: float,
    grace: float,
    backlog_grace: float,
) -> tuple[list[SessionRef], list[SessionRef]]:
    """Split ``sessions`` into those to wake now and those to hold back.

    A session is woken once its need is ``grace`` old, unless its trigger may still be on its
    way:

    - While the session has outbox rows no relay has published yet, the relays will send
      them: it is held.
    - While its Brain queues hold messages (``backlogs``: ready messages per compat), its
      trigger is most likely among them, and a duplicate would only queue behind it. It is
      held until the queue's delivery mark (``marks``: per compat, the publish time of the
      newest message delivered from the queue) is ``MARK_MARGIN`` past both the moment its
      outbox was seen empty and the sweeper's last wake-up of it (``watched``): then all that
      was published for it has been delivered, so its trigger was lost.

    No hold lasts longer than ``MAX_BACKLOG_BACKOFF`` backlog graces past the need's start
    and the sweeper's last wake-up, in case a mark or the outbox is stuck. Without a mark (none
    shared yet, or Redis restarted) a hold lasts ``backlog_grace``, doubled for each wake-up
    the sweeper already sent (up to that cap).
    """
    wake: list[SessionRef] = []
    hold: list[SessionRef] = []
    for ref in sessions:
        watch = watched.get(ref.session_id, Watch())
        due = now - ref.since >= grace
        if due and (watch.clear_since is None or backlogs.get(ref.compat, 0) > 0):
            latest = max(ref.since, watch.woken_at or ref.since)
            mark = marks.get(ref.compat)
            delivered = (
                watch.clear_since is not None
                and mark is not None
                and max(latest, watch.clear_since) <= mark - MARK_MARGIN
            )
            # A mark says the queue moves: hold as long as the cap allows. Without one, back
            # off from backlog_grace, doubling with each wake-up sent.
            backoff = min(2**watch.woken, MAX_BACKLOG_BACKOFF)
            graces = MAX_BACKLOG_BACKOFF if mark is not None else backoff
            due = delivered or now - latest >= max(grace, backlog_grace * graces)
        (wake if due else hold).append(ref)
    return wake, hold


def due_rechecks(
    sessions: Sequence[SessionRef], *, watched: Mapping[str, Watch], now: float, recheck: float
) -> list[SessionRef]:
    """Those of ``sessions`` (each with only blocked tasks) to wake now: ``recheck`` after the
    block or the sweeper's last wake-up of it, doubled per wake-up it sent, up to the cap."""
    due = []
    for ref in sessions:
        watch = watched.get(ref.session_id, Watch())
        latest = max(ref.since, watch.woken_at or ref.since)
        if now - latest >= recheck * min(2**watch.woken, MAX_BACKLOG_BACKOFF):
            due.append(ref)
    return due


class Sweeper:
    """Re-triggers work from the store's facts."""

    def __init__(
        self,
        *,
        store: Store,
        broker: Broker,
        leases: LeaseManager,
        period: float = 1.0,
        redispatch_after: float = 15.0,
        backlog_grace: float = 10.0,
        blocked_recheck: float = 60.0,
        progress: QueueProgress | None = None,
        callbacks: Callbacks | None = None,
        schedule_late_after: float = LATE_AFTER,
        workspace_collect_every: float = 3600.0,
        workspace_margin: float = 3600.0,
        retention: Retention | None = None,
    ) -> None:
        self.store = store
        self.retention = retention or Retention()
        """How long finished sessions are kept before this sweeper erases them."""
        self._expired_at = 0.0
        self.workspace_collect_every = workspace_collect_every
        """Seconds between collections of the workspace objects no version names."""
        self.workspace_margin = workspace_margin
        """How long an object a writer touched is kept for the version that will name it
        (``Workspaces.collect``)."""
        self._collected_at = time.time()
        self.schedule_late_after = schedule_late_after
        """Seconds a schedule's tick may be late and still be submitted; older ones were
        missed, and the schedule's policy decides (``shared.schedules``)."""
        self.callbacks = callbacks
        """Posts the webhooks of ended submissions (None: this deployment posts none)."""
        self.broker = broker
        self.leases = leases
        self.period = period
        self.redispatch_after = redispatch_after
        self.backlog_grace = backlog_grace
        self.blocked_recheck = blocked_recheck
        self.progress = progress
        """Where the Brain queues' delivery marks are read (None: hold by time only)."""
        self.recoveries: Counter[str] = Counter()
        self._lease: Lease | None = None
        self._watched: dict[str, Watch] = {}
        """What this sweeper saw of each session, kept while the session needs attention."""
        self._unsendable: set[str] = set()
        """Calls already reported as impossible to re-send."""

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep every period while holding the sweeper lease; stand by otherwise."""
        try:
            while not stop.is_set():
                try:
                    if await self._hold():
                        if finding := await self.leases.store_went_back():
                            raise finding
                        await self.sweep_once()
                except StoreWentBack as exc:
                    # Its re-sends would only be held, but its webhooks would go out.
                    log.warning("not sweeping: %s", exc, extra={"event": "sweep_held"})
                except BrainhandsError as exc:
                    log.warning("sweep failed: %s", exc, extra={"event": "sweep_error"})
                except Exception:
                    log.exception("sweep crashed; trying again", extra={"event": "sweep_crashed"})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.period)
        finally:
            if self.callbacks is not None:
                await self.callbacks.aclose()
            if self._lease is not None:
                with contextlib.suppress(BrainhandsError):
                    await self.leases.release(self._lease)

    async def _hold(self) -> bool:
        if self._lease is not None and await self.leases.renew(self._lease):
            return True
        self._lease = await self.leases.acquire(SWEEPER_RESOURCE)
        if self._lease is not None:
            log.info("sweeping", extra={"event": "sweeper_active"})
        return self._lease is not None

    async def sweep_once(self) -> Counter[str]:
        """One pass; returns how many triggers of each kind it sent."""
        sent: Counter[str] = Counter()
        now = time.time()
        # Work is only re-triggered once its own trigger had a period to land.
        sessions = await self.store.queries.sessions_needing_attention(now=now, grace=self.period)
        unsent = await self.store.outbox.sessions_with_unsent([s.session_id for s in sessions])
        self._watched = watch_sessions(self._watched, sessions, unsent, now)
        busy = await self.leases.held([session_resource(s.session_id) for s in sessions])
        idle = [ref for ref in sessions if session_resource(ref.session_id) not in busy]
        blocked = [ref for ref in idle if ref.blocked]
        idle = [ref for ref in idle if not ref.blocked]
        depths = await self._depths({ref.compat for ref in idle})
        backlogs = {compat: sum(queues.values()) for compat, queues in depths.items()}
        marks = await self._marks(depths)
        rechecks = due_rechecks(
            blocked, watched=self._watched, now=now, recheck=self.blocked_recheck
        )
        wake_ups, held = plan_wake_ups(
            idle,
            watched=self._watched,
            backlogs=backlogs,
            marks=marks,
            now=now,
            grace=self.period,
            backlog_grace=self.backlog_grace,
        )
        if held:
            log.info(
                "held back %d wake-ups: their triggers may still be in the outbox or queued",
                len(held),
                extra={
                    "event": "sweep_held_back",
                    "held_back": len(held),
                    "unsent": sum(ref.session_id in unsent for ref in held),
                    "backlogs": {ref.compat: backlogs[ref.compat] for ref in held},
                    "marks": {ref.compat: marks[ref.compat] for ref in held if ref.compat in marks},
                    "backlog_grace": self.backlog_grace,
                },
            )
            metrics.SWEEPER_HELD_BACK.inc(len(held))
        for ref in [*wake_ups, *rechecks]:
            wake = SessionWake(session_id=ref.session_id, compat=ref.compat, reason="sweeper")
            await self.broker.publish_routed(wake, self.broker.topology.brain_queue(ref.compat))
            watch = self._watched[ref.session_id]
            self._watched[ref.session_id] = dataclasses.replace(
                watch, woken_at=now, woken=watch.woken + 1
            )
            sent["blocked_rechecked" if ref.blocked else "session_woken"] += 1
        calls = await self.store.queries.calls_without_outcome(
            older_than=now - self.redispatch_after
        )
        running = await self.leases.held(
            [operation_resource(str(c.task.operation_id)) for c in calls]
        )
        for call in calls:
            task = call.task
            if task.kind != TOOL_KIND or operation_resource(str(task.operation_id)) in running:
                continue
            job = self._job(call)
            if job is None:
                continue
            await self._republish(job)
            sent["job_redispatched"] += 1
        sent.update(await self._keep_house(now))
        if sent:
            log.info("swept", extra={"event": "swept", **sent})
        self.recoveries.update(sent)
        for kind, count in sent.items():
            metrics.SWEEPER_RECOVERIES.labels(kind).inc(count)
        return sent

    async def _keep_house(self, now: float) -> Counter[str]:
        """What a pass does beside re-triggering work: schedules' ticks, workspace objects'
        collection, sessions past their retention, erased sessions' Redis keys, webhooks."""
        sent: Counter[str] = Counter()
        ticks = await fire_schedules(
            self.store, self.broker.topology, late_after=self.schedule_late_after, now=now
        )
        if ticks:
            sent["schedule_ticked"] += ticks
        if now - self._collected_at >= self.workspace_collect_every:
            self._collected_at = now
            spaces = self.store.workspaces
            for tenant in await spaces.tenants():
                gone = await spaces.collect(tenant, untouched_since=now - self.workspace_margin)
                if gone:
                    sent["workspace_objects_collected"] += gone
        if now - self._expired_at >= RETENTION_EVERY:
            self._expired_at = now
            expired = await expire(self.store, self.retention)
            if expired:
                sent["session_expired"] += expired
            if expired == RETENTION_BATCH:
                self._expired_at = 0.0  # more are due: the next pass goes on
        forgotten = await self._forget_erased()
        if forgotten:
            sent["erased_session_keys_deleted"] += forgotten
        if self.callbacks is not None:
            delivered = await self.callbacks.deliver_due()
            if delivered:
                sent["callback_delivered"] += delivered
        return sent

    async def _forget_erased(self) -> int:
        """Delete the Redis keys of erased sessions and their calls; how many erasures."""
        pending = await self.store.erasures.pending_resources(limit=100)
        if pending:
            await self.leases.forget([r for resources in pending.values() for r in resources])
            await self.store.erasures.resources_deleted(list(pending))
        return len(pending)

    async def _republish(self, job: ToolJob) -> None:
        """Send ``job`` to its pool again, flagged (``REPUBLISHED_HEADER``): its first copy may
        have reached a worker that made the call and died before any commit, so a ``query``
        tool asks before it runs (``Delivery.delivered_before``). Declares the pool's queue
        when none is bound yet, as ``Broker.publish_routed`` does."""
        queue = self.broker.topology.hands_queue(job.pool)
        try:
            await self.broker.publish(job, queue, headers=REPUBLISHED)
        except UnroutableMessage:
            if not await self.broker.declare_route(queue):
                raise
            await self.broker.publish(job, queue, headers=REPUBLISHED)

    def _job(self, call: PendingCall) -> ToolJob | None:
        """The job of a tool call, as the Brain first sent it; None if its row is malformed."""
        task = call.task
        try:
            return ToolCallIntent.from_task(task).job(compat=call.compat)
        except ValueError as exc:  # pydantic's ValidationError among them
            if task.id not in self._unsendable:
                self._unsendable.add(task.id)
                log.error(
                    "cannot re-send the job of tool task %s: its input is malformed (%s)",
                    task.id,
                    repr(exc),
                    extra={
                        "event": "sweep_unsendable",
                        "task_id": task.id,
                        "session_id": task.session_id,
                    },
                )
            return None

    async def _depths(self, compats: set[str]) -> dict[str, dict[str, int]]:
        """Ready messages in each Brain queue (wake-ups, results) of each compat; 0 where that
        cannot be read, so that a broker failure never stops the sweep (its publishes will
        tell)."""

        async def depth(queue: str) -> int:
            try:
                return await self.broker.ready_count(queue)
            except BrokerError as exc:
                log.warning(
                    "depth of %s unknown, taken as 0: %s",
                    queue,
                    exc,
                    extra={"event": "sweep_depth_unknown", "queue": queue},
                )
                return 0

        queues = [(c, q) for c in sorted(compats) for q in self.broker.topology.brain_queues(c)]
        counts = await asyncio.gather(*(depth(q) for _, q in queues))
        depths: dict[str, dict[str, int]] = {c: {} for c in compats}
        for (compat, queue), count in zip(queues, counts, strict=True):
            depths[compat][queue] = count
        return depths

    async def _marks(self, depths: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
        """The delivery mark of each compat with a backlog: the oldest mark of its queues
        that hold messages (a trigger may be in either). None where one of them has no mark
        or they cannot be read (then the wake-ups are held by time only)."""
        backed_up = {c: [q for q, n in qs.items() if n > 0] for c, qs in depths.items()}
        backed_up = {c: qs for c, qs in backed_up.items() if qs}
        if self.progress is None or not backed_up:
            return {}
        try:
            marks = await self.progress.read([q for qs in backed_up.values() for q in qs])
        except (RedisError, OSError) as exc:
            log.warning("delivery marks unknown: %s", exc, extra={"event": "sweep_marks_unknown"})
            return {}
        return {
            compat: min(marks[q] for q in queues)
            for compat, queues in backed_up.items()
            if all(q in marks for q in queues)
        }
