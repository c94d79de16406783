"""How far each work queue has been delivered, shared in Redis: the sweeper's way to tell a
trigger still queued behind a backlog from a trigger that was lost.

Every message carries its publish time (the AMQP ``timestamp``, whole seconds). A queue
delivers in order, so once a consumer received a message published at ``P``, every message
published to that queue before ``P`` has been delivered too. Consumers note the newest
publish time they received per queue (``note``: in memory, per delivery) and share it every
``period`` (``share``: one ``ZADD ... GT``, so the mark only moves forward, whichever worker
is ahead). The sweeper reads the marks (``read``): a need that began well before its queue's
mark, on a session nobody holds, has had its trigger delivered and is not waiting for it.

The marks are hints. A requeued message goes back in front of newer ones, and a Redis that
restarted empty has no marks at all: the sweeper then falls back to its time-based rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from brainhands.shared.keys import Keys

log = logging.getLogger("brainhands.progress")

SHARE_EVERY = 1.0
"""Seconds between a consumer's writes of its marks."""
MARKS_TTL_S = 3600
"""The marks vanish this long after the last write: a queue nobody consumes has no mark."""


class QueueProgress:
    """The delivery marks of work queues: noted by consumers, read by the sweeper."""

    def __init__(self, redis: Redis, keys: Keys, *, period: float = SHARE_EVERY) -> None:
        self.period = period
        self._redis = redis
        self._key = keys.queue_progress()
        self._noted: dict[str, float] = {}

    def note(self, queue: str, published_at: float | None) -> None:
        """A message published at ``published_at`` (None: not stamped) left ``queue``."""
        if published_at is not None and published_at > self._noted.get(queue, 0.0):
            self._noted[queue] = published_at

    async def share(self) -> None:
        """Write the marks noted since the last write (each only if it moves forward)."""
        if not self._noted:
            return
        noted, self._noted = self._noted, {}
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zadd(self._key, noted, gt=True)
            pipe.expire(self._key, MARKS_TTL_S)
            await pipe.execute()

    async def read(self, queues: Iterable[str]) -> dict[str, float]:
        """The mark of each of ``queues`` that has one."""
        names = list(queues)
        if not names:
            return {}
        scores = await self._redis.zmscore(self._key, names)
        return {q: float(s) for q, s in zip(names, scores, strict=True) if s is not None}

    async def run(self, stop: asyncio.Event) -> None:
        """Share the marks every ``period`` until ``stop`` is set. A failed write is logged
        and its marks are dropped: the next deliveries note newer ones, which supersede them."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.period)
            try:
                await self.share()
            except (RedisError, OSError) as exc:
                log.warning(
                    "sharing delivery marks failed: %s", exc, extra={"event": "progress_error"}
                )
