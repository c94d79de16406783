"""Keeping held leases alive: one renewer per ``LeaseManager`` renews every lease held
through it, all in one script call per round, on a Redis connection of its own.

With dozens of leases held in a busy process, one renewal per lease, each waiting for the
event loop and for a pooled connection, came late enough to lose leases nobody else wanted
(issue 14). A lease found gone, a renewal that fails, or one not confirmed before the lease
runs out by the local clock cancels the body that works under the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

from redis.asyncio import Redis

from brainhands.shared import metrics
from brainhands.shared.errors import LeaseBackendError, LeaseLost

log = logging.getLogger("brainhands.lease")


class Renewable(Protocol):
    """What the renewer reads of a lease (``shared.lease.Lease`` is one)."""

    @property
    def resource(self) -> str: ...
    @property
    def ttl_ms(self) -> int: ...
    @property
    def acquired_at(self) -> float: ...


L = TypeVar("L", bound=Renewable)


@dataclass(eq=False)
class _Held(Generic[L]):
    """A lease inside ``hold()``, and the task that works under it."""

    lease: L
    body: asyncio.Task[Any]
    renewed_at: float
    """``time.monotonic()`` before the last confirmed request (acquisition or renewal) was
    sent: Redis keeps the lease at least until one TTL later."""
    expiry: asyncio.TimerHandle | None = None
    """Loses the lease when it runs out by the local clock with no renewal confirmed."""
    renewing: bool = False
    """A renewal of it is on its way to Redis."""
    lost: str | None = None

    @property
    def expires_at(self) -> float:
        return self.renewed_at + self.lease.ttl_ms / 1000


class Renewer(Generic[L]):
    """Renews every lease held through one manager, all in one script call per round, on a
    Redis connection no other request waits for; runs while any lease is held.

    ``renew_all(leases, client)`` renews ``leases`` on ``client`` and says which are still
    held; ``renew_every`` and ``ttl_ms`` are the manager's.

    A round is due when the least recently renewed lease is ``renew_every`` old; it renews
    every lease that would be due within half an interval, so rounds stay few however the
    acquisitions are spread. How late the round starts (the event loop was busy) and its
    round trip are exported, with a warning once half the margin is used up.
    """

    def __init__(
        self,
        redis: Redis,
        renew_all: Callable[[list[L], Redis], Awaitable[list[bool]]],
        *,
        renew_every: float,
        ttl_ms: int,
    ) -> None:
        self._redis = redis
        self._renew_all = renew_all
        self._every = renew_every
        self._ttl_ms = ttl_ms
        self._held: set[_Held[L]] = set()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running = False

    def hold(self, lease: L) -> Holding[L]:
        """Keep ``lease`` alive while the body of ``async with`` runs (``LeaseManager.hold``)."""
        return Holding(self, lease)

    def track(self, held: _Held[L]) -> None:
        self._held.add(held)
        self._watch(held)
        self._changed.set()  # its renewal may be due sooner than the renewer's next round
        if not self._running:
            self._running = True
            self._task = asyncio.create_task(self._renew_while_held(), name="renew leases")

    def untrack(self, held: _Held[L]) -> None:
        self._held.discard(held)
        if held.expiry is not None:
            held.expiry.cancel()
        self._changed.set()

    def _watch(self, held: _Held[L]) -> None:
        """(Re)arm the timer that loses ``held`` when it runs out unrenewed: a timer, not the
        round's timeout, so that a late reply for one lease cannot cost the others their
        renewal, and a lease is still given up at once."""
        if held.expiry is not None:
            held.expiry.cancel()
        held.expiry = asyncio.get_running_loop().call_at(held.expires_at, self._expire, held)

    def _expire(self, held: _Held[L]) -> None:
        if held.renewing:
            self._lose(held, "Redis did not confirm a renewal before the lease expired")
        else:
            self._lose(held, "not renewed within its TTL (was the process paused?)")

    async def _renew_while_held(self) -> None:
        every = self._every
        # One connection, taken at the first round for as long as this runs: most leases are
        # let go of before their first renewal, and a client costs as much as a round.
        redis: Redis | None = None
        try:
            while self._held:
                due = min(h.renewed_at for h in self._held) + every
                if (wait := due - time.monotonic()) > 0:
                    self._changed.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self._changed.wait()
                    continue
                if redis is None:
                    redis = self._redis.client()
                await self._renew_round(due, redis)
        finally:
            # Before any await: a lease tracked from now on starts a new renewer.
            self._running = False
            for held in list(self._held):  # left by an error or a cancel: nobody renews them
                self._lose(held, "lease renewal stopped")
            if redis is not None:
                await redis.aclose()

    async def _renew_round(self, due: float, redis: Redis) -> None:
        every = self._every
        started = time.monotonic()
        metrics.LEASE_RENEWAL_LAG.observe(started - due)
        for held in [h for h in self._held if h.expires_at <= started]:
            self._expire(held)  # its timer is due too, but may come after this round
        batch = [h for h in self._held if h.renewed_at + every / 2 <= started]
        if not batch:
            return
        for held in batch:
            held.renewing = True
        try:
            # Past the last of them, each lease's own timer has given it up.
            async with asyncio.timeout(max(h.expires_at for h in batch) - started):
                renewed = await self._renew_all([h.lease for h in batch], redis)
        except TimeoutError:
            return
        except LeaseBackendError as exc:  # whatever broke, we can no longer vouch for them
            for held in batch:
                self._lose(held, f"renewal failed: {exc}")
            return
        finally:
            for held in batch:
                held.renewing = False
        confirmed = time.monotonic()
        metrics.LEASE_RENEWAL_SECONDS.observe(confirmed - started)
        for held, still_ours in zip(batch, renewed, strict=True):
            if held not in self._held:  # its block was left meanwhile
                continue
            if not still_ours:
                self._lose(held, "it expired or another holder took it")
            elif confirmed > held.expires_at:
                self._lose(held, "the renewal was confirmed only after the lease had expired")
            else:
                held.renewed_at = started
                self._watch(held)
        margin = self._ttl_ms / 1000 - every
        if confirmed - due > margin / 2:
            log.warning(
                "lease renewal %.0f ms late (event loop lag %.0f ms, Redis %.0f ms); "
                "leases are lost beyond %.0f ms",
                (confirmed - due) * 1000,
                (started - due) * 1000,
                (confirmed - started) * 1000,
                margin * 1000,
                extra={
                    "event": "lease_renewal_late",
                    "lag": started - due,
                    "round_trip": confirmed - started,
                    "leases": len(batch),
                },
            )

    def _lose(self, held: _Held[L], reason: str) -> None:
        if held not in self._held:  # lost already, or its block was left
            return
        held.lost = reason
        self.untrack(held)
        held.body.cancel(f"lease on {held.lease.resource} lost: {reason}")


class Holding(Generic[L]):
    """The ``async with`` of ``LeaseManager.hold``: has the lease renewed, and the body
    stopped on loss. Inside it, ``expires_at`` says how long the lease is known to be held."""

    def __init__(self, renewer: Renewer[L], lease: L) -> None:
        self._renewer = renewer
        self._lease = lease

    @property
    def lease(self) -> L:
        """The lease held."""
        return self._lease

    @property
    def expires_at(self) -> float:
        """``time.monotonic()`` at which the lease runs out unless a renewal is confirmed
        first: one TTL after the last confirmed request was sent. A body about to act where
        no fence guards it reads it rather than trust that the expiry timer ran first: after
        a pause, a body that became ready before the pause runs before that timer."""
        return self._held.expires_at

    async def __aenter__(self) -> L:
        body = asyncio.current_task()
        if body is None:
            raise RuntimeError("LeaseManager.hold() must be used inside a task")
        self._cancelling = body.cancelling()
        self._held = _Held(self._lease, body, self._lease.acquired_at)
        self._renewer.track(self._held)
        return self._lease

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Untracked before any await, so the renewer cannot cancel the body once it is left.
        self._renewer.untrack(self._held)
        if self._held.lost is None:
            return
        # Take back the renewer's cancel request, as asyncio.timeout does; one from
        # elsewhere remains counted and must win.
        if self._held.body.uncancel() > self._cancelling and exc_type is asyncio.CancelledError:
            return
        raise LeaseLost(self._lease.resource, self._held.lost) from exc
