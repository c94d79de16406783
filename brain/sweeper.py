"""The sweeper: finds work whose trigger went missing and triggers it again.

One sweeper is active per deployment (whoever holds the ``sweeper`` lease); every Brain runs
a candidate. Each period it reads the store for sessions with something to do -- due timers,
runnable or interrupted tasks, winding-down parents, tool outcomes not yet applied, queued
submissions -- and wakes those no Brain holds; and it re-sends tool jobs that went without an
outcome or a live lease for too long. Normal traffic never waits for it: its period only
bounds how long a lost message can delay work.

A session whose Brain queue holds a backlog looks just like one whose wake-up was lost: its
wake-up is still queued. Waking it again would only add to the backlog the Brains are
working through, so there the sweeper waits ``backlog_grace`` instead (``plan_wake_ups``).

A row it cannot turn into a job (a tool task whose input lacks what a job needs) is reported
once and skipped; the other calls are still re-sent. Nothing that goes wrong in a sweep stops
the sweeper, or the Brain it runs in: the failure is logged and the next period tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from brain.decide import TOOL_KIND
from shared import metrics
from shared.broker import Broker
from shared.errors import BrainhandsError, BrokerError
from shared.lease import Lease, LeaseManager
from shared.messages import SessionWake, ToolJob
from shared.store import Store
from shared.store.queries import (
    PendingCall,
    SessionRef,
    calls_without_outcome,
    sessions_needing_attention,
)

log = logging.getLogger("brainhands.sweeper")

RESOURCE = "sweeper"


def plan_wake_ups(
    sessions: Sequence[SessionRef],
    *,
    backlogs: Mapping[str, int],
    woken_at: Mapping[str, float],
    now: float,
    grace: float,
    backlog_grace: float,
) -> tuple[list[SessionRef], list[SessionRef]]:
    """Split ``sessions`` into those to wake now and those to hold back.

    A session is woken once its need is ``grace`` old. While its Brain queue holds messages
    (``backlogs``: ready messages per compat), its own wake-up is most likely among them and a
    duplicate would only queue behind it: then both the need and the sweeper's last wake-up
    of the session (``woken_at``) must be ``backlog_grace`` old. That still recovers a lost
    wake-up, without re-sending every waiting session each period while the backlog lasts.
    """
    wake: list[SessionRef] = []
    hold: list[SessionRef] = []
    for ref in sessions:
        if backlogs.get(ref.compat, 0) > 0:
            waited = now - max(ref.since, woken_at.get(ref.session_id, ref.since))
            enough = max(grace, backlog_grace)
        else:
            waited, enough = now - ref.since, grace
        (wake if waited >= enough else hold).append(ref)
    return wake, hold


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
    ) -> None:
        self.store = store
        self.broker = broker
        self.leases = leases
        self.period = period
        self.redispatch_after = redispatch_after
        self.backlog_grace = backlog_grace
        self.recoveries: Counter[str] = Counter()
        self._lease: Lease | None = None
        # When this sweeper last woke each session, kept while it can still hold one back.
        self._woken_at: dict[str, float] = {}
        self._unsendable: set[str] = set()
        """Calls already reported as impossible to re-send."""

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep every period while holding the sweeper lease; stand by otherwise."""
        try:
            while not stop.is_set():
                try:
                    if await self._hold():
                        await self.sweep_once()
                except BrainhandsError as exc:
                    log.warning("sweep failed: %s", exc, extra={"event": "sweep_error"})
                except Exception:
                    log.exception("sweep crashed; trying again", extra={"event": "sweep_crashed"})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.period)
        finally:
            if self._lease is not None:
                with contextlib.suppress(BrainhandsError):
                    await self.leases.release(self._lease)

    async def _hold(self) -> bool:
        if self._lease is not None and await self.leases.renew(self._lease):
            return True
        self._lease = await self.leases.acquire(RESOURCE)
        if self._lease is not None:
            log.info("sweeping", extra={"event": "sweeper_active"})
        return self._lease is not None

    async def sweep_once(self) -> Counter[str]:
        """One pass; returns how many triggers of each kind it sent."""
        sent: Counter[str] = Counter()
        now = time.time()
        # Work is only re-triggered once its own trigger had a period to land.
        sessions = await sessions_needing_attention(self.store.engine, now=now, grace=self.period)
        busy = await self.leases.held([f"session:{s.session_id}" for s in sessions])
        idle = [ref for ref in sessions if f"session:{ref.session_id}" not in busy]
        backlogs = await self._backlogs({ref.compat for ref in idle})
        self._woken_at = {
            sid: at for sid, at in self._woken_at.items() if at > now - self.backlog_grace
        }
        wake_ups, held = plan_wake_ups(
            idle,
            backlogs=backlogs,
            woken_at=self._woken_at,
            now=now,
            grace=self.period,
            backlog_grace=self.backlog_grace,
        )
        if held:
            log.info(
                "held back %d wake-ups: their Brain queues hold a backlog",
                len(held),
                extra={
                    "event": "sweep_held_back",
                    "held_back": len(held),
                    "backlogs": {ref.compat: backlogs[ref.compat] for ref in held},
                    "backlog_grace": self.backlog_grace,
                },
            )
            metrics.SWEEPER_HELD_BACK.inc(len(held))
        for ref in wake_ups:
            wake = SessionWake(session_id=ref.session_id, compat=ref.compat, reason="sweeper")
            await self.broker.publish_routed(wake, self.broker.topology.brain_queue(ref.compat))
            self._woken_at[ref.session_id] = now
            sent["session_woken"] += 1
        calls = await calls_without_outcome(
            self.store.engine, older_than=now - self.redispatch_after
        )
        running = await self.leases.held([f"operation:{c.task.operation_id}" for c in calls])
        for call in calls:
            task = call.task
            if task.kind != TOOL_KIND or f"operation:{task.operation_id}" in running:
                continue
            job = self._job(call)
            if job is None:
                continue
            await self.broker.publish_routed(job, self.broker.topology.hands_queue(job.pool))
            sent["job_redispatched"] += 1
        if sent:
            log.info("swept", extra={"event": "swept", **sent})
        self.recoveries.update(sent)
        for kind, count in sent.items():
            metrics.SWEEPER_RECOVERIES.labels(kind).inc(count)
        return sent

    def _job(self, call: PendingCall) -> ToolJob | None:
        """The job of a tool call, as the Brain first sent it; None if its row is malformed."""
        task = call.task
        try:
            return ToolJob(
                operation_id=task.operation_id,
                tool=task.input["tool"],
                arguments=task.input["arguments"],
                session_id=task.session_id,
                task_id=task.id,
                compat=call.compat,
                pool=task.input["pool"],
            )
        except (KeyError, TypeError, ValidationError) as exc:
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

    async def _backlogs(self, compats: set[str]) -> dict[str, int]:
        """Ready messages in the Brain queue of each compat; 0 where that cannot be read, so
        that a broker failure never stops the sweep (its publishes will tell)."""

        async def depth(compat: str) -> int:
            queue = self.broker.topology.brain_queue(compat)
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

        ordered = sorted(compats)
        return dict(zip(ordered, await asyncio.gather(*map(depth, ordered)), strict=True))
