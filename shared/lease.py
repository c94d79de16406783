"""Redis leases with fencing tokens.

A lease says which worker may work on a resource right now; its fencing token says which
holder the store must believe. Redis only caches the token counter: the store's fence is the
truth. ``LeaseManager.acquire_fenced`` has the store confirm every token, and when Redis
forgot its counter (a restart without persistence) it raises the counter past the store's
fence and tries again, so tokens keep increasing whatever happened to Redis.

The same recovery lets counters expire: a resource's counter is dropped after
``counter_ttl_ms`` without an acquisition (a week by default), so Redis does not keep one key
for every session and tool call there ever was. The next acquisition of such a resource costs
one refusal by the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from types import TracebackType
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from shared import metrics
from shared.errors import LeaseBackendError, LeaseLost, StaleLeaseError
from shared.keys import Keys

COUNTER_TTL_MS = 7 * 24 * 3600 * 1000
"""How long a resource's token counter outlives its last acquisition in Redis."""


@dataclass(frozen=True)
class Lease:
    """One acquisition of the lease on a resource.

    ``token`` is the fencing token every store write made under this lease carries.
    ``acquired_at`` is ``time.monotonic()`` taken before the acquire request was sent, so
    unless renewed the lease is gone from Redis by ``acquired_at + ttl_ms / 1000``.
    """

    resource: str
    owner: str
    token: int
    ttl_ms: int
    acquired_at: float


class LeaseManager:
    """Acquires, renews and releases fenced leases in one Redis."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        ttl_ms: int = 10_000,
        counter_ttl_ms: int = COUNTER_TTL_MS,
    ) -> None:
        if ttl_ms <= 0:
            raise ValueError(f"ttl_ms must be positive, got {ttl_ms}")
        if counter_ttl_ms <= 0:
            raise ValueError(f"counter_ttl_ms must be positive, got {counter_ttl_ms}")
        self.ttl_ms = ttl_ms
        self.counter_ttl_ms = counter_ttl_ms
        self._redis = redis
        self._keys = keys
        self._acquire = _register(redis, "acquire")
        self._renew = _register(redis, "renew")
        self._release = _register(redis, "release")
        self._raise_floor = _register(redis, "raise_floor")

    async def acquire(
        self, resource: str, *, floor: int = 0, owner: str | None = None
    ) -> Lease | None:
        """Take the lease on ``resource`` if it is free; None when another holder has it.

        The token is greater than every token this Redis handed out for ``resource`` and
        greater than ``floor``. ``owner`` names the holder (a fresh id by default).
        """
        owner = owner or uuid.uuid4().hex
        sent = time.monotonic()
        token = await self._run(
            self._acquire,
            [self._keys.lease(resource), self._keys.fence(resource)],
            [owner, self.ttl_ms, floor, self.counter_ttl_ms],
        )
        if token == 0:
            return None
        metrics.LEASE_ACQUIRED.labels(resource.split(":", 1)[0]).inc()
        return Lease(resource, owner, int(token), self.ttl_ms, sent)

    async def renew(self, lease: Lease) -> bool:
        """Extend ``lease`` by its TTL; False when it expired or another holder has it."""
        renewed = await self._run(
            self._renew, [self._keys.lease(lease.resource)], [_holder(lease), lease.ttl_ms]
        )
        if renewed == 1:
            metrics.LEASE_RENEWED.inc()
        return bool(renewed == 1)

    async def release(self, lease: Lease) -> bool:
        """Let go of ``lease``; False when it had already expired or another holder has it."""
        released = await self._run(
            self._release, [self._keys.lease(lease.resource)], [_holder(lease)]
        )
        return bool(released == 1)

    async def held(self, resources: list[str]) -> set[str]:
        """Which of ``resources`` some holder has a lease on right now (one round trip)."""
        if not resources:
            return set()
        try:
            values = await self._redis.mget([self._keys.lease(r) for r in resources])
        except (RedisError, OSError) as exc:
            raise LeaseBackendError(f"Redis failed reading leases: {exc!r}") from exc
        return {r for r, v in zip(resources, values, strict=True) if v is not None}

    async def raise_floor(self, resource: str, floor: int) -> None:
        """Make every later token of ``resource`` greater than ``floor``."""
        await self._run(
            self._raise_floor, [self._keys.fence(resource)], [floor, self.counter_ttl_ms]
        )

    async def acquire_fenced(
        self,
        resource: str,
        claim: Callable[[int], Awaitable[object]],
        *,
        attempts: int = 3,
        owner: str | None = None,
    ) -> Lease | None:
        """Acquire ``resource`` with a token the store has accepted.

        ``claim(token)`` is the store's fence claim: it moves the stored fence up to
        ``token`` if it is strictly lower, and otherwise refuses by raising
        ``StaleLeaseError`` carrying the stored fence. On refusal Redis is behind the store
        (it restarted empty): the lease is released, the counter raised to the store's
        fence, and the acquisition tried again, ``attempts`` times in all.

        Returns None when another holder has the lease or the store kept refusing.
        """
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        floor = 0
        for _ in range(attempts):
            lease = await self.acquire(resource, floor=floor, owner=owner)
            if lease is None:
                return None
            try:
                refused_at = await _refused_at(claim, lease)
            except BaseException:
                # The claim's own error matters more; an unreleased lease expires anyway.
                with contextlib.suppress(LeaseBackendError):
                    await self.release(lease)
                raise
            if refused_at is None:
                return lease
            # Raise the counter before letting go, so nobody acquires from the stale one.
            await self.raise_floor(resource, refused_at)
            await self.release(lease)
            floor = refused_at
        return None

    def hold(
        self, lease: Lease, *, renew_every: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[Lease]:
        """Keep ``lease`` alive while the body of ``async with`` runs.

        A background task renews it every ``renew_every`` seconds (a third of the TTL by
        default). When a renewal finds the lease gone, fails, or comes after the TTL had
        run out (the process was paused), the body is cancelled and ``LeaseLost`` raised
        out of the ``async with``. A cancellation from elsewhere propagates unchanged.
        Leaving the block stops renewing but does not release the lease.
        """
        every = lease.ttl_ms / 3000 if renew_every is None else renew_every
        if not 0 < every < lease.ttl_ms / 1000:
            raise ValueError(f"renew_every must be between 0 and the TTL, got {every}s")
        return _Hold(self, lease, every)

    async def _run(self, script: AsyncScript, keys: list[str], args: list[str | int]) -> Any:
        try:
            return await script(keys=keys, args=args)
        except (RedisError, OSError) as exc:  # OSError: socket errors the driver let through
            raise LeaseBackendError(f"Redis failed on {keys[0]}: {exc!r}") from exc


class _Hold:
    """The ``async with`` of ``LeaseManager.hold``: renews, and stops the body on loss."""

    def __init__(self, manager: LeaseManager, lease: Lease, every: float) -> None:
        self._manager = manager
        self._lease = lease
        self._every = every
        self._lost: str | None = None

    async def __aenter__(self) -> Lease:
        body = asyncio.current_task()
        if body is None:
            raise RuntimeError("LeaseManager.hold() must be used inside a task")
        self._body = body
        self._cancelling = body.cancelling()
        self._renewer = asyncio.create_task(
            self._renew_until_lost(), name=f"renew lease {self._lease.resource}"
        )
        return self._lease

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Stopped before any await, so it cannot cancel the body once the block is left.
        self._renewer.cancel()
        if self._lost is None:
            await asyncio.wait([self._renewer])
            return
        # Take back our own cancel request, as asyncio.timeout does; one from elsewhere
        # remains counted and must win.
        cancelled_elsewhere = self._body.uncancel() > self._cancelling
        await asyncio.wait([self._renewer])
        if cancelled_elsewhere and exc_type is asyncio.CancelledError:
            return
        raise LeaseLost(self._lease.resource, self._lost) from exc

    async def _renew_until_lost(self) -> None:
        reason = await self._renew_while_held()
        self._lost = reason
        self._body.cancel(f"lease on {self._lease.resource} lost: {reason}")

    async def _renew_while_held(self) -> str:
        """Renew until the lease is lost; return why."""
        ttl = self._lease.ttl_ms / 1000
        # The lease surely lasts until ttl after the last confirmed request was *sent*.
        valid_from = self._lease.acquired_at
        while True:
            await asyncio.sleep(max(0.0, valid_from + self._every - time.monotonic()))
            sent = time.monotonic()
            metrics.LEASE_RENEWAL_LAG.observe(max(0.0, sent - valid_from - self._every))
            left = valid_from + ttl - sent
            if left <= 0:
                return "not renewed within its TTL (was the process paused?)"
            try:
                async with asyncio.timeout(left):
                    renewed = await self._manager.renew(self._lease)
                metrics.LEASE_RENEWAL_SECONDS.observe(time.monotonic() - sent)
            except TimeoutError:
                return "Redis did not confirm a renewal before the lease expired"
            except Exception as exc:  # whatever broke, we can no longer vouch for the lease
                return f"renewal failed: {exc}"
            if not renewed:
                return "it expired or another holder took it"
            if time.monotonic() > valid_from + ttl:
                return "the renewal was confirmed only after the lease had expired"
            valid_from = sent


async def _refused_at(claim: Callable[[int], Awaitable[object]], lease: Lease) -> int | None:
    """None when the store accepted ``lease.token``; else the floor the next token needs."""
    try:
        await claim(lease.token)
    except StaleLeaseError as exc:
        return max(exc.current or 0, lease.token)
    return None


def _holder(lease: Lease) -> str:
    """The value acquire.lua stored in the lease key for this acquisition."""
    return f"{lease.owner}:{lease.token}"


def _register(redis: Redis, name: str) -> AsyncScript:
    source = (resources.files("shared") / "lease_scripts" / f"{name}.lua").read_text("utf-8")
    return redis.register_script(source)


def connect_redis(url: str) -> Redis:
    """A Redis client for leases: short timeouts and a single quick retry.

    The client's default retries back off for seconds; a lease holder must learn sooner that
    Redis is gone, since its renewals are bounded by the TTL.
    """
    from redis.asyncio.retry import Retry
    from redis.backoff import ConstantBackoff

    return Redis.from_url(
        url,
        socket_timeout=2.0,
        socket_connect_timeout=2.0,
        retry=Retry(ConstantBackoff(0.05), 1),
        health_check_interval=15,
    )
