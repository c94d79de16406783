"""The outbox relay: publishes committed outbox rows and marks them sent after the confirm.

Two paths, one rule: a row is marked sent only after the broker confirmed it, and a crash
between the confirm and the mark publishes the row again, which every consumer tolerates
(messages are triggers; the store dedupes).

- **Right after a commit.** While the relay runs, the commits of its own process hand it
  their rows (``wake`` is a commit listener, the receipt carries the rows) and it publishes
  them at once, with no query, ``batch_size`` at a time. The confirmed rows are marked sent
  off that path: ``mark_delay`` after the first confirm, every row confirmed by then in one
  statement (each with its own confirm time), so a mark costs no transaction of a call's
  own; the rows were written with ``publish_after`` one handoff period ahead, so other
  relays leave them alone meanwhile (the delay is well inside it). A process killed in
  that delay leaves its rows unmarked, and the polling relays publish them again after the
  handoff: a duplicate trigger, which every consumer tolerates. A row the relay could not
  get to before the last ``HANDOFF_MARGIN`` of its handoff (a burst of commits outran it)
  is left to the polling relays, which take it once the handoff is over: publishing it as
  well would send it twice.
- **Polling**, as the fallback: rows other processes wrote without a relay, rows whose
  writer died before publishing, rows whose publish failed. A poll claims them in a
  transaction (``FOR UPDATE SKIP LOCKED`` on PostgreSQL) and marks them in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator

from brainhands.shared import metrics
from brainhands.shared.broker import Broker, Outgoing
from brainhands.shared.errors import BrainhandsError, UnroutableMessage
from brainhands.shared.store import CommitReceipt, OutboxRow, Store

log = logging.getLogger("brainhands.relay")

MEASURE_EVERY = 5.0
"""Seconds between readings of the outbox backlog (for the metrics)."""
HANDOFF_MARGIN = 1.0
"""Seconds before the end of a row's handoff after which its writer's relay leaves it to the
polling relays (at most a fifth of the handoff)."""


class OutboxRelay:
    """Drains a store's outbox into RabbitMQ."""

    def __init__(
        self,
        store: Store,
        broker: Broker,
        *,
        batch_size: int = 100,
        poll_interval: float = 1.0,
        retention: float = 3600.0,
        prune_interval: float = 60.0,
        handoff: float = 5.0,
        mark_delay: float | None = None,
    ) -> None:
        self.store = store
        self.broker = broker
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.retention = retention
        self.prune_interval = prune_interval
        self.handoff = handoff
        self.mark_delay = min(HANDOFF_MARGIN, handoff / 5) / 2 if mark_delay is None else mark_delay
        """Seconds between a row's confirm and its mark at most (default: half the margin
        left before its handoff ends, so the mark lands before other relays may take it)."""
        self.published = 0
        self._wakeup = asyncio.Event()
        self._next_prune = 0.0
        self._next_measure = 0.0
        self._fresh: list[tuple[float, OutboxRow]] = []
        """Rows commits handed over, each with the monotonic time its handoff nearly ends."""
        self._publisher: asyncio.Task[None] | None = None
        self._confirmed: list[tuple[int, float]] = []
        """Rows handed over that the broker confirmed, and when, to be marked sent."""
        self._marker: asyncio.Task[None] | None = None
        self._mark_now = asyncio.Event()
        """Set while the relay stops: the marks wait no longer."""

    def wake(self, receipt: CommitReceipt | None = None) -> None:
        """A commit listener: publish the rows the commit wrote (or poll, if none are given)."""
        if receipt is not None and receipt.outbox and self.store.handoff.seconds is not None:
            until = time.monotonic() + self.handoff - min(HANDOFF_MARGIN, self.handoff / 5)
            self._fresh.extend((until, row) for row in receipt.outbox)
            if self._publisher is None or self._publisher.done():
                self._publisher = asyncio.create_task(self._publish_fresh())
        elif receipt is None or receipt.outbox:
            self._wakeup.set()

    async def flush(self, *, marked: bool = False) -> None:
        """Wait until the rows commits handed over so far are published (or left to the
        polling relays), and, if ``marked``, marked sent at once: a process that publishes
        its own commits' rows without running the relay's polling loop (a client) begins
        ``store.handoff``, calls this after its commits, and with ``marked`` before it
        closes."""
        if marked:
            self._mark_now.set()
        for task in ("_publisher", "_marker") if marked else ("_publisher",):
            # The publisher starts the marker.
            while (running := getattr(self, task)) is not None and not running.done():
                await asyncio.shield(running)

    async def run(self, stop: asyncio.Event) -> None:
        """Drain until ``stop`` is set; survives store and broker outages, backing off."""
        backoff = self.poll_interval
        self.store.handoff.begin(self.handoff)
        try:
            while not stop.is_set():
                self._wakeup.clear()
                try:
                    sent = await self.drain_once()
                    await self._housekeeping()
                except BrainhandsError as exc:
                    log.warning("relay pass failed: %s", exc, extra={"event": "relay_error"})
                    sent = 0
                    backoff = min(backoff * 2, 10 * self.poll_interval)
                else:
                    backoff = self.poll_interval
                if sent == self.batch_size:
                    continue  # more is waiting
                waiters = {
                    asyncio.ensure_future(self._wakeup.wait()),
                    asyncio.ensure_future(stop.wait()),
                }
                _, pending = await asyncio.wait(
                    waiters, timeout=backoff, return_when=asyncio.FIRST_COMPLETED
                )
                for waiter in pending:
                    waiter.cancel()
        finally:
            self.store.handoff.end()
            self._mark_now.set()
            for name in ("_publisher", "_marker"):  # the publisher may start a marker
                if (task := getattr(self, name)) is not None:
                    await asyncio.gather(task, return_exceptions=True)

    async def _publish_fresh(self) -> None:
        """Publish the rows commits handed over, ``batch_size`` at a time, except those whose
        handoff is nearly over (left to the polling relays)."""
        while self._fresh:
            batch, self._fresh = self._fresh[: self.batch_size], self._fresh[self.batch_size :]
            now = time.monotonic()
            rows = [row for until, row in batch if until > now]
            if len(rows) < len(batch):
                log.warning(
                    "left %d committed rows to the polling relays: their handoff was nearly over",
                    len(batch) - len(rows),
                    extra={"event": "relay_handoff_missed", "rows": len(batch) - len(rows)},
                )
            if not rows:
                continue
            with _failure_logged("publishing %d committed rows", len(rows)):
                confirmed = await self._publish(rows)
                at = time.time()
                self._confirmed += [(row_id, at) for row_id in confirmed]
            if self._confirmed and (self._marker is None or self._marker.done()):
                self._marker = asyncio.create_task(self._mark_confirmed())

    async def _mark_confirmed(self) -> None:
        """Mark the confirmed rows sent, ``mark_delay`` after the first: all those confirmed
        by then in one statement."""
        while self._confirmed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._mark_now.wait(), self.mark_delay)
            confirmed, self._confirmed = self._confirmed, []
            with _failure_logged("marking %d published rows sent", len(confirmed)):
                await self.store.outbox.mark_sent(confirmed)

    async def drain_once(self) -> int:
        """Publish one batch of unsent rows; return how many were confirmed and marked."""
        async with self.store.outbox.claim(self.batch_size) as claimed:
            if not claimed.rows:
                return 0
            confirmed = await self._publish(claimed.rows)
            await claimed.mark_sent(confirmed)
        return len(confirmed)

    async def _publish(self, rows: list[OutboxRow]) -> list[int]:
        """Publish ``rows``; return the ids of those the broker confirmed. A row routed to a
        queue nobody declared yet (a new session's Brain build, a pool before its first
        worker) has its queue declared and goes again at once, not at the next pass."""
        outcomes = await self._publish_each(rows)
        unroutable = [row for row in rows if isinstance(outcomes[row.id], UnroutableMessage)]
        routes = {row.routing_key for row in unroutable}
        declared = {key for key in sorted(routes) if await self._declare_route(key)}
        again = [row for row in unroutable if row.routing_key in declared]
        if again:
            outcomes.update(await self._publish_each(again))
        confirmed = [row.id for row in rows if outcomes[row.id] is None]
        self.published += len(confirmed)
        metrics.OUTBOX_PUBLISHED.inc(len(confirmed))
        if len(confirmed) < len(rows):
            log.warning(
                "published %d of %d outbox rows; the rest stay for the next pass",
                len(confirmed),
                len(rows),
                extra={"event": "relay_partial"},
            )
        return confirmed

    async def _publish_each(self, rows: list[OutboxRow]) -> dict[int, BaseException | None]:
        """Publish ``rows`` at once: each row's id and what went wrong (None: confirmed)."""
        outcomes = await self.broker.publish_many(
            [Outgoing(row.body, row.routing_key, row.headers) for row in rows]
        )
        return {row.id: error for row, error in zip(rows, outcomes, strict=True)}

    async def _declare_route(self, routing_key: str) -> bool:
        """Declare the queue of a pool or Brain build that nobody declared yet, so that its
        rows wait there for a worker instead of being stuck; False if the key names none."""
        if await self.broker.declare_route(routing_key):
            return True
        log.error(
            "outbox row routed to %s, which names no queue",
            routing_key,
            extra={"event": "relay_unroutable"},
        )
        return False

    async def _housekeeping(self) -> None:
        now = time.monotonic()
        if now >= self._next_measure:
            self._next_measure = now + MEASURE_EVERY
            backlog, oldest = await self.store.outbox.backlog()
            metrics.OUTBOX_BACKLOG.set(backlog)
            metrics.RELAY_LAG.set(time.time() - oldest if oldest is not None else 0.0)
        if now < self._next_prune:
            return
        self._next_prune = now + self.prune_interval
        pruned = await self.store.outbox.prune(older_than=self.retention)
        if pruned:
            log.info("pruned %d sent outbox rows", pruned, extra={"event": "relay_pruned"})


@contextlib.contextmanager
def _failure_logged(what: str, count: int) -> Iterator[None]:
    """Log a failure of ``what`` (of ``count`` rows) and go on: rows a hand-off did not
    publish or mark are polled, and published again, once their handoff period is over."""
    try:
        yield
    except BrainhandsError as exc:
        log.warning("%s failed: %s", what % count, exc, extra={"event": "relay_error"})
