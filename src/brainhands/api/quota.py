"""What one API key may take of an API process: requests at a rate, event streams at once.

A key over its rate, or opening a stream past its cap, is answered 429 with
``Retry-After``, and nothing it asked for is done; other keys are not slowed. Counted per
process: with N API replicas behind a balancer a key gets up to N times the rate, which
bounds what one key costs each process -- the point -- not what it costs the deployment.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.exceptions import HTTPException


@dataclass
class _Bucket:
    tokens: float
    at: float


class Quotas:
    """A token bucket of ``burst`` requests refilled at ``rate`` a second, and at most
    ``max_streams`` open event streams, per key."""

    def __init__(self, *, rate: float, burst: int, max_streams: int) -> None:
        self.rate = rate
        self.burst = burst
        self.max_streams = max_streams
        self._buckets: dict[str, _Bucket] = {}
        self._streams: dict[str, int] = {}

    def take(self, key_id: str) -> None:
        """Count one request of ``key_id``; 429 if it is over its rate."""
        now = time.monotonic()
        bucket = self._buckets.get(key_id)
        if bucket is None:
            if len(self._buckets) >= 100_000:  # keys idle long enough are full again anyway
                self._buckets = {k: b for k, b in self._buckets.items() if b.tokens < self.burst}
            bucket = self._buckets[key_id] = _Bucket(float(self.burst), now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
        bucket.at = now
        if bucket.tokens < 1:
            wait = math.ceil((1 - bucket.tokens) / self.rate)
            raise HTTPException(
                429,
                f"this API key is over its rate of {self.rate:g} requests a second",
                headers={"Retry-After": str(wait)},
            )
        bucket.tokens -= 1

    def open_stream(self, key_id: str) -> Callable[[], None]:
        """Count one more open stream of ``key_id`` (429 if all its streams are open);
        returns what closes it, to be called once."""
        open_now = self._streams.get(key_id, 0)
        if open_now >= self.max_streams:
            raise HTTPException(
                429,
                f"this API key has {open_now} event streams open, its most; close one first",
                headers={"Retry-After": "5"},
            )
        self._streams[key_id] = open_now + 1

        def close() -> None:
            left = self._streams[key_id] - 1
            if left:
                self._streams[key_id] = left
            else:
                del self._streams[key_id]

        return close
