"""The limits per tool, enforced in Redis: one atomic script grants a call every limit it
falls under (``shared.limits.limits_of``), or says which refused and for how long.

Rates are GCRA: each limit keeps the theoretical arrival time of its next call, on Redis's
clock (``TIME``), so the Hands' clocks do not matter. A call whose turn is near
(``reserve_ahead_ms``) is granted that turn at once and starts when it comes: the time a
waiter takes to wake and ask again is not lost from the rate, whatever the load.

Concurrency slots are members of a sorted set scored by a deadline: a holder renews its
slots (``renew``, every slot it holds in one call) and drops them when its call ends
(``release``); a holder that dies stops renewing, and its slots free once their deadline
passes.

Redis restarting empty forgets the slots and the rates: the calls in flight at that moment
are not counted, so until they end a limit may be exceeded by them, and one rate interval
may start early. Nothing else is lost: the calls themselves are the store's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from brainhands.shared.errors import LeaseBackendError
from brainhands.shared.keys import Keys
from brainhands.shared.lease import register_script
from brainhands.shared.limits import Scope, WaitReason

RESERVE_AHEAD_MS = 300.0
"""How far ahead a call's turn under a rate is granted: more than a busy process takes to
wake, little enough that a Hands killed meanwhile wastes few turns."""


@dataclass(frozen=True)
class Refusal:
    """Why a call may not start yet: the limit (``scope``) that refused, for which reason,
    and how long until it might grant (ms, by Redis's clock)."""

    scope: str
    reason: WaitReason
    wait_ms: float


@dataclass(frozen=True)
class Slots:
    """A call's grant: the concurrency slots it holds, under ``holder``, and how long
    after the grant its turn under the rates comes (``start_in_ms``, by Redis's clock:
    reserved, ``reserve_ahead_ms`` at most)."""

    holder: str
    scopes: tuple[str, ...]
    start_in_ms: float = 0.0


class Limiter:
    """Grants, renews and frees calls' places under their limits, in one Redis.

    ``slot_ttl_ms``: how long a slot outlives its holder's last renewal.
    ``reserve_ahead_ms``: how far ahead a call's turn under a rate may be granted."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        slot_ttl_ms: int,
        reserve_ahead_ms: float = RESERVE_AHEAD_MS,
    ) -> None:
        if slot_ttl_ms <= 0:
            raise ValueError(f"slot_ttl_ms must be positive, got {slot_ttl_ms}")
        if reserve_ahead_ms < 0:
            raise ValueError(f"reserve_ahead_ms must not be negative, got {reserve_ahead_ms}")
        self.slot_ttl_ms = slot_ttl_ms
        self.reserve_ahead_ms = reserve_ahead_ms
        self._redis = redis
        self._keys = keys
        self._take = register_script(redis, "limit_take.lua")
        self._renew = register_script(redis, "limit_renew.lua")

    async def take(self, scopes: list[Scope], holder: str) -> Slots | Refusal:
        """Grant a call under ``holder`` a start under every one of ``scopes``, all or none:
        its ``Slots`` (those of the scopes that limit concurrency), or the ``Refusal``."""
        keys: list[str] = []
        args: list[str | float | int] = [holder, self.slot_ttl_ms, self.reserve_ahead_ms]
        for scope in scopes:
            keys += [self._keys.limit_rate(scope.name), self._keys.limit_slots(scope.name)]
            limit = scope.limit
            args += [limit.interval_ms, limit.tolerance_ms, limit.concurrency or 0]
        granted, wait_ms, *refused = await self._run(self._take, keys, args)
        if granted:
            held = tuple(s.name for s in scopes if s.limit.concurrency is not None)
            return Slots(holder, held, float(wait_ms))
        which, kind = refused
        reason: WaitReason = "rate" if kind == 1 else "concurrency"
        return Refusal(scopes[int(which) - 1].name, reason, float(wait_ms))

    async def renew(self, held: list[Slots]) -> list[bool]:
        """Move on the deadline of every slot of ``held``, in one round trip; per slot (in
        order), False when it was gone (its deadline passed, or Redis restarted empty)."""
        keys: list[str] = []
        args: list[str | float | int] = [self.slot_ttl_ms]
        for slots in held:
            keys += [self._keys.limit_slots(scope) for scope in slots.scopes]
            args += [slots.holder] * len(slots.scopes)
        if not keys:
            return []
        return [n == 1 for n in await self._run(self._renew, keys, args)]

    async def release(self, slots: Slots) -> None:
        """Free the slots of ``slots``: the call ended."""
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for scope in slots.scopes:
                    pipe.zrem(self._keys.limit_slots(scope), slots.holder)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise LeaseBackendError(f"Redis failed freeing limit slots: {exc!r}") from exc

    async def _run(
        self, script: AsyncScript, keys: list[str], args: list[str | float | int]
    ) -> Any:
        try:
            return await script(keys=keys, args=args)
        except (RedisError, OSError) as exc:  # OSError: socket errors the driver let through
            raise LeaseBackendError(f"Redis failed on limits ({keys[0]}): {exc!r}") from exc
