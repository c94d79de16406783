"""Waiting for the services a process needs while it starts.

A worker started during an outage (the store restarting, RabbitMQ not up yet, a partition
between them) must not die with a traceback and leave its supervisor to guess: it logs one
line naming the service it waits for, tries again with a growing pause, and says on
``/readyz`` what it waits for (``HealthServer.wait_for``). If the service stays away longer
than the start-up deadline, the process ends with that line (``StartupFailed``: exit status 2,
no traceback); an answer that no retry can mend (a wrong password, a database that does not
exist, a certificate that does not verify) ends it at once, with its reason.

Whether a failure is worth another attempt is decided in one place, ``retryable_at_startup``,
a pure function of the exception.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import random
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aiormq.exceptions
import redis.exceptions

from brainhands.shared.broker import Broker
from brainhands.shared.config import ENV_PREFIX, redacted_url
from brainhands.shared.errors import BrainhandsError, StartupFailed
from brainhands.shared.store import Store, object_store_at
from brainhands.shared.topology import Topology

log = logging.getLogger("brainhands.startup")

T = TypeVar("T")

DEADLINE_VARIABLE = f"{ENV_PREFIX}STARTUP_DEADLINE"
WORKSPACE_OBJECTS_VARIABLE = f"{ENV_PREFIX}WORKSPACE_OBJECTS"
FIRST_PAUSE = 0.1
"""Seconds before the second attempt; each later pause doubles, up to the settings' cap."""
ATTEMPT_TIMEOUT = 10.0
"""Seconds one attempt may take: behind a partition a connection is neither refused nor
answered, and the drivers' own connect timeouts run up to a minute."""
LAST_ATTEMPT = 1.0
"""Seconds the attempt at the deadline still gets (a deadline may pass by this much)."""

TRANSIENT_SQLSTATES = frozenset(
    {
        "57P01",  # admin_shutdown: the server is being stopped (a restart, a failover)
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now: "the database system is starting up"
        "53300",  # too_many_connections: others' connections end, ours then fit
    }
)
"""PostgreSQL's codes for a server that will answer later; all of class 08 (connection
exception) also are."""
TRANSIENT_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.EHOSTDOWN,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.EADDRNOTAVAIL,
    }
)
PERMANENT = (
    ssl.SSLError,
    redis.exceptions.AuthenticationError,
    redis.exceptions.AuthorizationError,
    aiormq.exceptions.AuthenticationError,
    aiormq.exceptions.ProbableAuthenticationError,
    aiormq.exceptions.IncompatibleProtocolError,
    aiormq.exceptions.ConnectionNotAllowed,
)
"""Answers that say "not you, not like this" rather than "not now". Checked before the
broader classes they derive from (an AMQP or Redis authentication error is a
``ConnectionError`` too)."""


def retryable_at_startup(exc: BaseException) -> bool:
    """Whether another attempt may reach the service that just failed with ``exc``.

    Yes for a connection refused, reset or timed out, a name that does not resolve (yet: in a
    cluster the service's name may appear after the worker), a PostgreSQL server starting up,
    shutting down or out of connections, Redis loading its dataset. No for an authentication
    or authorisation failure, a TLS failure, an unknown database, or anything not known to be
    passing. The innermost cause decides: a driver's wrapper says less than what it wraps.
    """
    for link in reversed(_causes(exc)):
        verdict = _verdict(link)
        if verdict is not None:
            return verdict
    return False


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what caused it, outermost first (each link once)."""
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    return chain


def _verdict(exc: BaseException) -> bool | None:
    """What one link of a chain says, or None if it says nothing either way."""
    if isinstance(exc, PERMANENT):
        return False
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate.startswith("08") or sqlstate in TRANSIENT_SQLSTATES
    if isinstance(exc, socket.gaierror | ConnectionError | TimeoutError):
        return True
    if isinstance(exc, OSError):
        # No errno: every address of a name failed, each its own way ("Multiple exceptions").
        return exc.errno is None or exc.errno in TRANSIENT_ERRNOS
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return True
    if isinstance(exc, BrainhandsError):
        return exc.retryable
    return None


def startup_pause(failures: int, *, cap: float) -> float:
    """The longest pause after ``failures`` failed attempts in a row (1 or more): doubling
    from ``FIRST_PAUSE``, never above ``cap``. The caller waits a random part of it (from half
    to all), so that workers started together do not all knock at the same moments."""
    return min(cap, FIRST_PAUSE * 2.0 ** min(failures - 1, 32))


def describe(exc: BaseException) -> str:
    """``exc`` on one line: its type and first line (a driver's original error rather than
    SQLAlchemy's wrapper, whose message runs to several lines)."""
    shown = getattr(exc, "orig", None) or exc
    lines = str(shown).strip().splitlines()
    return f"{type(shown).__name__}: {lines[0] if lines else repr(shown)}"


class Startup:
    """One process's start-up: reaching each service in turn, waiting for it if it must.

    ``deadline``: seconds to wait for one service that does not answer (from its first
    attempt); ``retry_max``: the longest pause between attempts; ``report(service)`` is
    told what the process waits for now, None once it waits for nothing
    (``HealthServer.wait_for``).
    """

    def __init__(
        self,
        *,
        deadline: float,
        retry_max: float,
        report: Callable[[str | None], None] = lambda service: None,
    ) -> None:
        self.deadline = deadline
        self.retry_max = retry_max
        self.report = report

    async def reach(self, service: str, url: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()``'s result once it succeeds; ``StartupFailed`` if it fails in a way no
        retry mends, or still fails ``deadline`` seconds after the first try.

        ``service`` names it on ``/readyz`` and in the log (``store``, ``rabbitmq``,
        ``redis``); ``url`` is shown without its password.
        """
        where = f"{service} at {redacted_url(url)}"
        started = time.monotonic()
        give_up_at = started + self.deadline
        failures = 0
        while True:
            try:
                # The last attempt too gets a moment, even if the pause before it ran out.
                left = max(give_up_at - time.monotonic(), LAST_ATTEMPT)
                async with asyncio.timeout(min(ATTEMPT_TIMEOUT, left)):
                    result = await attempt()
            except Exception as exc:
                if not retryable_at_startup(exc):
                    raise StartupFailed(f"{where} refused this process: {describe(exc)}") from exc
                failures += 1
                if failures == 1:
                    self.report(service)
                    log.warning(
                        "waiting for %s: %s; trying again for up to %g s (%s)",
                        where,
                        describe(exc),
                        self.deadline,
                        DEADLINE_VARIABLE,
                        extra={"event": "startup_waiting", "service": service},
                    )
                left = give_up_at - time.monotonic()
                if left <= 0:
                    raise StartupFailed(
                        f"gave up waiting for {where}: no answer within {self.deadline:g} s "
                        f"({DEADLINE_VARIABLE}); last error: {describe(exc)}"
                    ) from exc
                pause = startup_pause(failures, cap=self.retry_max) * random.uniform(0.5, 1.0)
                await asyncio.sleep(min(left, pause))
                continue
            if failures:
                self.report(None)
                log.info(
                    "%s answers, after %.1f s",
                    where,
                    time.monotonic() - started,
                    extra={"event": "startup_reached", "service": service},
                )
            return result


async def reach_store(
    startup: Startup | None,
    url: str,
    *,
    db_schema: str | None,
    pool_size: int = 10,
    workspace_objects: str | None = None,
) -> Store:
    """The store at ``url``, once it answers a query (``Startup.reach``); with no
    ``startup``, opened at once, its errors raised as they come. ``workspace_objects``: the
    URL of the object store for workspace objects' bytes (``WORKSPACE_OBJECTS_VARIABLE``)."""
    objects = object_store_at(workspace_objects, WORKSPACE_OBJECTS_VARIABLE)
    if startup is None:
        return await Store.open(
            url, db_schema=db_schema, pool_size=pool_size, workspace_objects=objects
        )

    async def attempt() -> Store:
        store = await Store.open(
            url, db_schema=db_schema, pool_size=pool_size, workspace_objects=objects
        )
        try:
            await store.ping()
        except BaseException:
            await store.close()
            raise
        return store

    return await startup.reach("store", url, attempt)


async def reach_broker(
    startup: Startup | None, url: str, topology: Topology, *, name: str
) -> Broker:
    """A connection to RabbitMQ named ``name``, once one opens (``Startup.reach``); with no
    ``startup``, one attempt."""

    async def attempt() -> Broker:
        return await Broker.connect(url, topology, connection_name=name)

    return await attempt() if startup is None else await startup.reach("rabbitmq", url, attempt)
