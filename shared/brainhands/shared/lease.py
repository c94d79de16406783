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

The same round trips keep Redis as the witness of what the store had committed
(``shared.witness``): a release records what its holder committed last, an acquisition
returns that record, and a caller that finds its store behind it refuses to go on. While a
worker's finding is there, every acquisition raises ``StoreWentBack``.

Held leases are renewed by one task per ``LeaseManager`` (``shared.renewal``), in one script
call for all of them. Acquisitions and releases are batched the same way (``shared.batch``):
those asked for while one is on its way to Redis share the next script call, each answered on
its own.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from brainhands.shared import metrics
from brainhands.shared.batch import Batcher
from brainhands.shared.errors import (
    LeaseBackendError,
    NotFoundError,
    StaleLeaseError,
    StoreWentBack,
)
from brainhands.shared.keys import Keys
from brainhands.shared.renewal import Holding, Renewer
from brainhands.shared.witness import declare_went_back, read_evidence, went_back

COUNTER_TTL_MS = 7 * 24 * 3600 * 1000
"""How long a resource's token counter outlives its last acquisition in Redis."""
HANDED_TTL_MS = 15 * 60 * 1000
"""How long Redis remembers that a lease was handed over (``LeaseManager.release``; at most
the counter's TTL): an acquisition after that claims the store's fence at once, as after any
other release."""


@dataclass(frozen=True)
class Lease:
    """One acquisition of the lease on a resource.

    ``token`` is the fencing token every store write made under this lease carries.
    ``acquired_at`` is ``time.monotonic()`` taken before the acquire request was sent, so
    unless renewed the lease is gone from Redis by ``acquired_at + ttl_ms / 1000``.
    ``witnessed`` is what an earlier holder released the resource saying the store had
    committed (``shared.witness``), None when Redis holds no such record. ``handed_over``:
    the previous token's holder handed the lease over (``LeaseManager.release``), so no
    earlier holder can still write, and the store's fence may be claimed by this holder's
    first commit instead of before its work (``LeaseManager.acquire_fenced``'s ``check``).
    """

    resource: str
    owner: str
    token: int
    ttl_ms: int
    acquired_at: float
    witnessed: int | None = None
    handed_over: bool = False


@dataclass(frozen=True)
class _Asked:
    """One acquisition asked for: a resource, the owner to hold it, the token's floor."""

    resource: str
    owner: str
    floor: int


@dataclass(frozen=True)
class _Letting:
    """One release asked for: the lease, what its holder committed last (if anything), and
    whether it hands the lease over."""

    lease: Lease
    witness: int | None
    hand_over: bool


WentBack = Callable[[Lease], StoreWentBack | None]
"""Compares what a fence claim read with ``Lease.witnessed``: the proof that the store went
back, or None (``shared.witness``)."""


class LeaseManager:
    """Acquires, renews and releases fenced leases in one Redis.

    ``renew_every``: seconds between renewals of a held lease, a quarter of the TTL by
    default, so a renewal may come three quarters of the TTL late before the lease is lost.
    ``hand_over``: whether leases may be handed over (``release``). That relies on Redis never
    losing a write it acknowledged, short of restarting empty: a failover to a replica that
    missed the last writes could give a paused holder's token to a second holder, and the
    store's fence, not yet claimed, would not tell them apart. So it is off with Sentinels.
    """

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        ttl_ms: int = 10_000,
        counter_ttl_ms: int = COUNTER_TTL_MS,
        renew_every: float | None = None,
        hand_over: bool = True,
    ) -> None:
        if ttl_ms <= 0:
            raise ValueError(f"ttl_ms must be positive, got {ttl_ms}")
        if counter_ttl_ms <= 0:
            raise ValueError(f"counter_ttl_ms must be positive, got {counter_ttl_ms}")
        every = ttl_ms / 4000 if renew_every is None else renew_every
        if not 0 < every < ttl_ms / 1000:
            raise ValueError(f"renew_every must be between 0 and the TTL, got {every}s")
        self.ttl_ms = ttl_ms
        self.counter_ttl_ms = counter_ttl_ms
        self.renew_every = every
        self.hand_over = hand_over
        self._redis = redis
        self._keys = keys
        self._acquire = register_script(redis, "acquire.lua")
        self._renew = register_script(redis, "renew.lua")
        self._release = register_script(redis, "release.lua")
        self._raise_floor = register_script(redis, "raise_floor.lua")
        self._renewer: Renewer[Lease] = Renewer(
            redis,
            lambda leases, client: self.renew_all(leases, redis=client),
            renew_every=every,
            ttl_ms=ttl_ms,
        )
        # Acquisitions and releases asked for while one is on its way share the next trip.
        self._acquiring: Batcher[_Asked, tuple[int, Any, bool]] = Batcher(
            self._acquire_batch, what="lease_acquisitions"
        )
        self._releasing: Batcher[_Letting, bool] = Batcher(
            self._release_batch, what="lease_releases"
        )
        self.finder = f"{socket.gethostname()}:{os.getpid()}"
        """Who this process is, in the evidence of a store found gone back."""

    async def acquire(
        self, resource: str, *, floor: int = 0, owner: str | None = None
    ) -> Lease | None:
        """Take the lease on ``resource`` if it is free; None when another holder has it.

        The token is greater than every token this Redis handed out for ``resource`` and
        greater than ``floor``. ``owner`` names the holder (a fresh id by default).
        Raises ``StoreWentBack`` while a worker's finding that the store went back stands.
        """
        owner = owner or uuid.uuid4().hex
        sent = time.monotonic()
        token, witnessed, handed_over = await self._acquiring(_Asked(resource, owner, floor))
        if token < 0:
            raise read_evidence(witnessed)
        if token == 0:
            return None
        metrics.LEASE_ACQUIRED.labels(resource.split(":", 1)[0]).inc()
        witness = None if witnessed is None else int(witnessed)
        handed_over = handed_over and self.hand_over
        return Lease(resource, owner, token, self.ttl_ms, sent, witness, handed_over)

    async def _acquire_batch(self, batch: list[_Asked]) -> list[tuple[int, Any, bool]]:
        keys = [self._keys.store_went_back()]
        args: list[str | int] = [self.ttl_ms, self.counter_ttl_ms]
        for asked in batch:
            r = asked.resource
            keys += [self._keys.lease(r), self._keys.fence(r), self._keys.witness(r)]
            keys.append(self._keys.handed(r))
            args += [asked.owner, asked.floor]
        answers = await self._run(self._acquire, keys, args)
        return [(int(token), seen, handed == 1) for token, seen, handed in answers]

    async def store_went_back(self) -> StoreWentBack | None:
        """The standing finding that the store went back, if a worker made one: no
        acquisition succeeds meanwhile, and a holder that works on its own (the sweeper)
        stands by too."""
        return await went_back(self._redis, self._keys)

    async def renew(self, lease: Lease) -> bool:
        """Extend ``lease`` by its TTL; False when it expired or another holder has it."""
        [renewed] = await self.renew_all([lease])
        return renewed

    async def renew_all(self, leases: list[Lease], *, redis: Redis | None = None) -> list[bool]:
        """Extend each of ``leases`` by its TTL in one round trip (on ``redis``, default the
        manager's client); False for each that expired or another holder has."""
        args: list[str | int] = []
        for lease in leases:
            args += [_holder(lease), lease.ttl_ms]
        keys = [self._keys.lease(lease.resource) for lease in leases]
        renewed = [n == 1 for n in await self._run(self._renew, keys, args, redis=redis)]
        metrics.LEASE_RENEWED.inc(sum(renewed))
        return renewed

    async def release(
        self, lease: Lease, *, witness: int | None = None, hand_over: bool = False
    ) -> bool:
        """Let go of ``lease``; False when it had already expired or another holder has it.

        ``witness``: what the holder's last commit left in the store -- a session's version,
        the fence of an operation's final outcome -- recorded for the next holder to compare
        (``shared.witness``). Give it only for a commit the store acknowledged.
        ``hand_over``: the holder ended its work normally and nothing of it is in flight, so
        the next holder may claim the store's fence with its first commit (recorded only if
        the lease was still held).
        """
        return await self._releasing(_Letting(lease, witness, hand_over))

    async def _release_batch(self, batch: list[_Letting]) -> list[bool]:
        keys: list[str] = []
        args: list[str | int] = [self.counter_ttl_ms, min(HANDED_TTL_MS, self.counter_ttl_ms)]
        for letting in batch:
            resource = letting.lease.resource
            keys += [self._keys.lease(resource), self._keys.witness(resource)]
            keys.append(self._keys.handed(resource))
            args += [_holder(letting.lease), "" if letting.witness is None else letting.witness]
            args.append(letting.lease.token if letting.hand_over and self.hand_over else "")
        return [n == 1 for n in await self._run(self._release, keys, args)]

    async def held(self, resources: list[str]) -> set[str]:
        """Which of ``resources`` some holder has a lease on right now (one round trip)."""
        if not resources:
            return set()
        try:
            values = await self._redis.mget([self._keys.lease(r) for r in resources])
        except (RedisError, OSError) as exc:
            raise LeaseBackendError(f"Redis failed reading leases: {exc!r}") from exc
        return {r for r, v in zip(resources, values, strict=True) if v is not None}

    async def forget(self, resources: list[str]) -> int:
        """Delete every key of ``resources`` (lease, fence, witness, hand-over): resources of
        a session erased, which nothing will take again. How many keys there were."""
        keys = [
            key
            for r in resources
            for key in (
                self._keys.lease(r),
                self._keys.fence(r),
                self._keys.witness(r),
                self._keys.handed(r),
            )
        ]
        if not keys:
            return 0
        try:
            return int(await self._redis.delete(*keys))
        except (RedisError, OSError) as exc:
            raise LeaseBackendError(f"Redis failed deleting keys: {exc!r}") from exc

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
        went_back: WentBack | None = None,
        check: Callable[[int], Awaitable[object]] | None = None,
    ) -> Lease | None:
        """Acquire ``resource`` with a token the store has accepted.

        ``claim(token)`` is the store's fence claim: it moves the stored fence up to
        ``token`` if it is strictly lower, and otherwise refuses by raising
        ``StaleLeaseError`` carrying the stored fence. On refusal Redis is behind the store
        (it restarted empty): the lease is released, the counter raised to the store's
        fence, and the acquisition tried again, ``attempts`` times in all.

        ``check(token)``, if given, is used instead of ``claim`` for a lease that was handed
        over (``Lease.handed_over``): it refuses as ``claim`` does but leaves the fence where
        it is, and the holder's first write claims it (``fence < :t``) -- one transaction
        less. A lease that was not handed over (its holder may be paused, not gone) is always
        claimed at once, so that holder can change nothing from then on.

        ``went_back(lease)`` compares what the claim read (or found missing: the claim
        raised ``NotFoundError``) with the lease's witness. When the store is behind it,
        the deployment's went-back flag is set, the lease released, and ``StoreWentBack``
        raised: nothing is done on a store that lost acknowledged commits.

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
                claiming = check if check is not None and lease.handed_over else claim
                refused_at = await self._claimed(lease, claiming, went_back)
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

    async def _claimed(
        self, lease: Lease, claim: Callable[[int], Awaitable[object]], went_back: WentBack | None
    ) -> int | None:
        """``_refused_at``, and then the witness compared with what the claim read."""
        try:
            refused_at = await _refused_at(claim, lease)
        except NotFoundError:
            # A row the witness saw committed and the store no longer has went back too.
            if went_back is None or (found := went_back(lease)) is None:
                raise
        else:
            if refused_at is not None or went_back is None or (found := went_back(lease)) is None:
                return refused_at
        await self.declare_went_back(found)
        raise found

    async def declare_went_back(self, found: StoreWentBack) -> None:
        """Set the deployment's went-back flag with ``found`` as the evidence (the first
        finding is kept); from now on every acquisition raises ``StoreWentBack``."""
        try:
            await declare_went_back(self._redis, self._keys, found, by=self.finder)
        except (RedisError, OSError) as exc:
            raise LeaseBackendError(f"Redis failed setting the went-back flag: {exc!r}") from exc

    def hold(self, lease: Lease) -> Holding[Lease]:
        """Keep ``lease`` alive while the body of ``async with`` runs.

        The manager's renewer extends it every ``renew_every`` seconds, counted from the
        last renewal Redis confirmed (from the acquisition at first). When the lease is
        found gone, a renewal fails, or none was confirmed before the lease ran out by the
        local clock (the process was paused, Redis did not answer), the body is cancelled
        and ``LeaseLost`` raised out of the ``async with``. A cancellation from elsewhere
        propagates unchanged. Leaving the block stops renewing but does not release the
        lease. Inside it, ``Holding.expires_at`` says until when the lease is known held.
        """
        return self._renewer.hold(lease)

    async def _run(
        self,
        script: AsyncScript,
        keys: list[str],
        args: list[str | int],
        *,
        redis: Redis | None = None,
    ) -> Any:
        try:
            return await script(keys=keys, args=args, client=redis)
        except (RedisError, OSError) as exc:  # OSError: socket errors the driver let through
            raise LeaseBackendError(f"Redis failed on {keys[0]}: {exc!r}") from exc


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


def register_script(redis: Redis, name: str) -> AsyncScript:
    """The script ``lease_scripts/<name>`` of this package, registered on ``redis``."""
    source = (resources.files("brainhands.shared") / "lease_scripts" / name).read_text("utf-8")
    return redis.register_script(source)


def connect_redis(
    url: str, *, sentinels: Sequence[tuple[str, int]] = (), sentinel_master: str = "brainhands"
) -> Redis:
    """A Redis client for leases: short timeouts and a single quick retry.

    The client's default retries back off for seconds; a lease holder must learn sooner that
    Redis is gone, since its renewals are bounded by the TTL.

    With ``sentinels``, the client asks them where the primary of ``sentinel_master`` is, and
    asks again when a connection to it fails: after a failover it follows the promoted
    replica without a restart (``url`` then gives only the database and the password). A
    replica promoted without the primary's last writes may hand out a token again; the
    store's fence refuses it and the counter is raised past it (``acquire_fenced``), as
    after a restart that lost everything.
    """
    from redis.asyncio.retry import Retry
    from redis.asyncio.sentinel import Sentinel
    from redis.backoff import ConstantBackoff

    options: dict[str, Any] = {
        "socket_timeout": 2.0,
        "socket_connect_timeout": 2.0,
        "retry": Retry(ConstantBackoff(0.05), 1),
        "health_check_interval": 15,
    }
    if not sentinels:
        return Redis.from_url(url, **options)
    target = Redis.from_url(url).connection_pool.connection_kwargs
    for key in ("db", "username", "password"):
        if target.get(key) is not None:
            options[key] = target[key]
    sentinel = Sentinel(
        list(sentinels), socket_timeout=2.0, socket_connect_timeout=2.0, sentinel_kwargs={}
    )
    client: Redis = sentinel.master_for(sentinel_master, redis_class=Redis, **options)
    return client
