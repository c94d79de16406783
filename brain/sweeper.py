"""The sweeper: finds work whose trigger went missing and triggers it again.

One sweeper is active per deployment (whoever holds the ``sweeper`` lease); every Brain runs
a candidate. Each period it reads the store for sessions with something to do -- due timers,
runnable or interrupted tasks, winding-down parents, tool outcomes not yet applied, queued
submissions -- and wakes those no Brain holds; and it re-sends tool jobs that went without an
outcome or a live lease for too long. Normal traffic never waits for it: its period only
bounds how long a lost message can delay work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter

from brain.decide import TOOL_KIND
from shared import metrics
from shared.broker import Broker
from shared.errors import BrainhandsError
from shared.lease import Lease, LeaseManager
from shared.messages import SessionWake, ToolJob
from shared.store import Store
from shared.store.queries import calls_without_outcome, sessions_needing_attention

log = logging.getLogger("brainhands.sweeper")

RESOURCE = "sweeper"


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
    ) -> None:
        self.store = store
        self.broker = broker
        self.leases = leases
        self.period = period
        self.redispatch_after = redispatch_after
        self.recoveries: Counter[str] = Counter()
        self._lease: Lease | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep every period while holding the sweeper lease; stand by otherwise."""
        try:
            while not stop.is_set():
                try:
                    if await self._hold():
                        await self.sweep_once()
                except BrainhandsError as exc:
                    log.warning("sweep failed: %s", exc, extra={"event": "sweep_error"})
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
        for ref in sessions:
            if f"session:{ref.session_id}" in busy:
                continue
            wake = SessionWake(session_id=ref.session_id, compat=ref.compat, reason="sweeper")
            await self.broker.publish_routed(wake, self.broker.topology.brain_queue(ref.compat))
            sent["session_woken"] += 1
        calls = await calls_without_outcome(
            self.store.engine, older_than=now - self.redispatch_after
        )
        running = await self.leases.held([f"operation:{c.task.operation_id}" for c in calls])
        for call in calls:
            task = call.task
            if task.kind != TOOL_KIND or f"operation:{task.operation_id}" in running:
                continue
            assert task.operation_id is not None
            job = ToolJob(
                operation_id=task.operation_id,
                tool=task.input["tool"],
                arguments=task.input["arguments"],
                session_id=task.session_id,
                task_id=task.id,
                compat=call.compat,
                pool=task.input["pool"],
            )
            await self.broker.publish_routed(job, self.broker.topology.hands_queue(job.pool))
            sent["job_redispatched"] += 1
        if sent:
            log.info("swept", extra={"event": "swept", **sent})
        self.recoveries.update(sent)
        for kind, count in sent.items():
            metrics.SWEEPER_RECOVERIES.labels(kind).inc(count)
        return sent
