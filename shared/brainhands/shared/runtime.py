"""Opening a process's connections from its settings (waiting for services that do not
answer yet, and for the store's schema to be ready for this build), and stopping it on a
signal."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from redis.asyncio import Redis

from brainhands.shared.broker import Broker
from brainhands.shared.config import CommonSettings
from brainhands.shared.health import HealthServer
from brainhands.shared.keys import Keys
from brainhands.shared.lease import LeaseManager, connect_redis
from brainhands.shared.startup import Startup, reach_broker, reach_store
from brainhands.shared.store import Store, behind_head, head_revision

log = logging.getLogger("brainhands.runtime")

SCHEMA_POLL = 1.0
"""Seconds between looks at the schema revision while it is behind this build."""
SCHEMA_REMINDER = 30.0
"""Seconds between warnings while waiting for the migration."""


@dataclass
class Services:
    """The store, the broker and Redis, as one process uses them, and its health port."""

    store: Store
    broker: Broker
    redis: Redis
    keys: Keys
    hand_over: bool = True
    """Whether leases may be handed over (``LeaseManager``): not with Sentinels."""
    health: HealthServer = field(default_factory=HealthServer)
    """Serving from the start (not ready until ``serve`` says what it checks)."""

    def leases(self, ttl_ms: int) -> LeaseManager:
        return LeaseManager(self.redis, self.keys, ttl_ms=ttl_ms, hand_over=self.hand_over)


@contextlib.asynccontextmanager
async def open_services(settings: CommonSettings, *, name: str) -> AsyncIterator[Services]:
    """Connect to everything a worker needs, waiting for a service that does not answer yet
    (``shared.startup``) while the health port says so; close it all on the way out."""
    async with contextlib.AsyncExitStack() as opened:
        health = HealthServer()
        if settings.http_port >= 0:
            await health.start(settings.http_port)
        opened.push_async_callback(health.close)
        startup = Startup(
            deadline=settings.startup_deadline,
            retry_max=settings.startup_retry_max,
            report=health.wait_for,
        )
        url = settings.database_url
        store = await reach_store(
            startup,
            url,
            db_schema=settings.database_schema,
            workspace_objects=settings.workspace_objects,
        )
        opened.push_async_callback(store.close)
        await wait_for_schema(store, startup, url)
        topology = settings.topology()
        broker = await reach_broker(startup, settings.rabbitmq_url, topology, name=name)
        opened.push_async_callback(broker.close)
        redis = connect_redis(
            settings.redis_url,
            sentinels=settings.sentinel_addresses,
            sentinel_master=settings.redis_sentinel_master,
        )
        opened.push_async_callback(redis.aclose)
        where = settings.redis_url
        if settings.redis_sentinels:
            where = f"{settings.redis_sentinels} (Sentinels of {settings.redis_sentinel_master})"
        await startup.reach("redis", where, redis.ping)
        hand_over = settings.lease_hand_over and not settings.sentinel_addresses
        yield Services(store, broker, redis, Keys(settings.namespace), hand_over, health)


async def wait_for_schema(
    store: Store, startup: Startup, url: str, *, poll: float = SCHEMA_POLL
) -> None:
    """Wait until the store's schema has every migration this build needs.

    During a deploy the migration job and the new workers start together: a worker that
    found the schema behind would fail on its first write, so it waits (not ready, saying
    why) instead. The store failing meanwhile is waited for as at any start
    (``Startup.reach``).
    """
    said = 0.0
    while behind_head(revision := await startup.reach("store", url, store.revision)):
        startup.report("store schema")
        if time.monotonic() - said > SCHEMA_REMINDER:
            said = time.monotonic()
            log.warning(
                "the store's schema is at %s, this build needs %s: run `brainhands migrate`; "
                "waiting",
                revision or "nothing (empty)",
                head_revision(),
                extra={"event": "schema_behind", "revision": revision},
            )
        await asyncio.sleep(poll)
    startup.report(None)


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT: the process drains and exits 0."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):

        def on_signal(sig: signal.Signals = sig) -> None:
            log.info("%s received; draining", sig.name, extra={"event": "signal"})
            stop.set()

        loop.add_signal_handler(sig, on_signal)
    return stop
