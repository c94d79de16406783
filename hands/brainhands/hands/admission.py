"""Admission of a pool's jobs under their tools' limits (``shared.limits``): a job whose call
is over a limit waits here, in hand, until the limiter (``shared.limiter``) grants it.

A waiting job is neither acked nor requeued: it spends no delivery count and, as it waits
before its operation is claimed, no interruption either (a Hands killed meanwhile claimed
nothing). It does not poll in a tight loop: it sleeps until the limiter's next free time
(``limits.wake_in``), and a slot freed in this Hands wakes its waiters at once. The calls of
one set of limits queue here behind each other, so one of them asks Redis at a time. Its
watchers are told why it waits (``limits.WAITING_NOTES``, a live note).

Slots are held from the grant until the job is settled, and renewed meanwhile
(``renew_held``): the slots of a Hands that dies free when their deadline passes. A call's
turn under its rates is granted up to ``limiter.RESERVE_AHEAD_MS`` ahead; the call is
claimed meanwhile and goes out when its turn comes (``before_attempt``). A later attempt,
or a first one whose turn went stale, is granted a turn again. Those waits come after the
claim, so a Hands killed during one may be counted as having interrupted the call (as a
kill between any claim and its call is).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable

from brainhands.shared.errors import BrainhandsError, UnknownToolError
from brainhands.shared.limiter import Limiter, Refusal, Slots
from brainhands.shared.limits import (
    LATE_AT_MOST,
    WAITING_NOTES,
    LimitRules,
    Scope,
    limits_of,
    rate_scopes,
    wake_in,
)
from brainhands.shared.messages import LiveNote, ToolJob
from brainhands.shared.tenancy import split_key
from brainhands.shared.tools import ToolRegistry

log = logging.getLogger("brainhands.hands")


def _turn(slots: Slots) -> float:
    """When the turn ``slots`` were granted comes, by this process's monotonic clock."""
    return time.monotonic() + slots.start_in_ms / 1000


class Admission:
    """Holds each job of the pool until its call is within every limit it falls under."""

    def __init__(
        self,
        limiter: Limiter | None,
        rules: LimitRules,
        registry: ToolRegistry,
        pool: str,
        live: Callable[[LiveNote], None],
    ) -> None:
        self._limiter = limiter
        self._rules = rules
        self._registry = registry
        self._pool = pool
        self._live = live
        self._held: set[Slots] = set()
        self._turns: dict[str, float] = {}
        """When each admitted call's turn under its rates comes (``time.monotonic()``), by
        operation id."""
        self._queues: dict[tuple[str, ...], tuple[asyncio.Lock, list[None]]] = {}
        """Per set of limits: the lock its waiters queue on, and one entry per waiter."""
        self._freed = asyncio.Event()
        """Set (and replaced) whenever this Hands frees slots."""

    def limited(self) -> bool:
        """Whether any call of the pool may fall under a limit."""
        if self._limiter is None:
            return False
        rules = self._rules
        tools = {t.name for t in self._registry.in_pool(self._pool)}
        return (
            self._pool in rules.pools
            or any(t.limit is not None for t in self._registry.in_pool(self._pool))
            or bool(tools & set(rules.tools))
            or any(tool in tools for _, tool in rules.tenant_tools)
        )

    def scopes(self, job: ToolJob) -> list[Scope]:
        """The limits the call of ``job`` falls under."""
        if self._limiter is None:
            return []
        try:
            declared = self._registry.get(job.tool).limit
        except UnknownToolError:
            declared = None  # recorded as unknown later; the operator's rules still apply
        tenant, _ = split_key(job.session_id)
        return limits_of(job.tool, self._pool, tenant, declared=declared, rules=self._rules)

    @contextlib.asynccontextmanager
    async def admitted(self, job: ToolJob) -> AsyncIterator[None]:
        """Wait until the call of ``job`` is granted under every limit it falls under, and
        hold its slots while the block runs."""
        scopes = self.scopes(job)
        if not scopes:
            yield
            return
        slots = await self._wait(job, scopes)
        self._held.add(slots)
        self._turns[job.operation_id] = _turn(slots)
        try:
            yield
        finally:
            self._held.discard(slots)
            self._turns.pop(job.operation_id, None)
            if slots.scopes:
                await self._release(slots)

    async def before_attempt(self, job: ToolJob, *, first: bool) -> None:
        """Before an attempt of the call of ``job`` goes out, wait for its turn under its
        rates: the one its admission was granted, for the first attempt, unless it passed
        more than ``LATE_AT_MOST`` ago (the operation's lease was an earlier holder's, the
        process was starved of CPU: going now could bunch it with the calls granted after
        it); a turn of its own for any other attempt (each is a call the limited system
        sees). Its slots it holds already."""
        turn = self._turns.get(job.operation_id)
        if turn is None:
            return  # no limit
        stale = not first
        while True:
            if stale:
                scopes = rate_scopes(self.scopes(job))
                if not scopes:
                    return
                turn = self._turns[job.operation_id] = _turn(await self._wait(job, scopes))
            late = time.monotonic() - turn
            if late > LATE_AT_MOST:
                stale = True
            elif late < 0:
                await asyncio.sleep(-late)
                stale = False  # checked again: a starved process wakes late
            else:
                return

    async def _wait(self, job: ToolJob, scopes: list[Scope]) -> Slots:
        assert self._limiter is not None
        holder = f"{job.operation_id}:{uuid.uuid4().hex}"
        key = tuple(s.name for s in scopes)
        lock, waiters = self._queues.setdefault(key, (asyncio.Lock(), []))
        waiters.append(None)
        told: Refusal | None = None
        try:
            async with lock:
                while True:
                    answer = await self._limiter.take(scopes, holder)
                    if isinstance(answer, Slots):
                        return answer
                    if told is None or told.reason != answer.reason:
                        self._tell(job, answer)
                    told = answer
                    await self._sleep(answer)
        finally:
            waiters.pop()
            if not waiters:
                del self._queues[key]

    async def _sleep(self, refusal: Refusal) -> None:
        delay = wake_in(refusal.reason, refusal.wait_ms)
        if refusal.reason == "rate":
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._freed.wait(), delay)

    def _tell(self, job: ToolJob, refusal: Refusal) -> None:
        """Tell the call's watchers (and the log) why it waits."""
        message = WAITING_NOTES[refusal.reason]
        data = {"limit": refusal.scope, "wait_ms": refusal.wait_ms}
        log.info(
            message,
            extra={"event": "waiting", "operation_id": job.operation_id, "tool": job.tool, **data},
        )
        self._live(
            LiveNote(
                session_id=job.session_id,
                kind="progress",
                operation_id=job.operation_id,
                message=message,
                data=data,
            )
        )

    async def _release(self, slots: Slots) -> None:
        assert self._limiter is not None
        try:
            await self._limiter.release(slots)
        except BrainhandsError as exc:  # the slots free at their deadline instead
            log.warning("freeing limit slots failed", extra={"event": "slots", "error": str(exc)})
        self._freed.set()
        self._freed = asyncio.Event()

    async def renew_held(self) -> None:
        """Renew the slots held here every third of their TTL, until cancelled. A slot found
        gone (Redis restarted empty, or this Hands was paused past its deadline) is logged:
        its call goes on, and the limit may be exceeded by it until it ends."""
        if self._limiter is None:
            return
        while True:
            await asyncio.sleep(self._limiter.slot_ttl_ms / 3000)
            held = list(self._held)
            try:
                renewed = await self._limiter.renew(held)
            except BrainhandsError as exc:
                log.warning(
                    "renewing limit slots failed", extra={"event": "slots", "error": str(exc)}
                )
                continue
            if not all(renewed):
                log.warning(
                    "limit slots lost; their calls go on uncounted",
                    extra={"event": "slots_lost", "lost": renewed.count(False)},
                )
