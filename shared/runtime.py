"""Opening a process's connections from its settings, and stopping it on a signal."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass

from redis.asyncio import Redis

from shared.broker import Broker
from shared.config import CommonSettings
from shared.keys import Keys
from shared.lease import LeaseManager, connect_redis
from shared.store import Store
from shared.topology import Topology

log = logging.getLogger("brainhands.runtime")


@dataclass
class Services:
    """The store, the broker and Redis, as one process uses them."""

    store: Store
    broker: Broker
    redis: Redis
    keys: Keys

    def leases(self, ttl_ms: int) -> LeaseManager:
        return LeaseManager(self.redis, self.keys, ttl_ms=ttl_ms)


@contextlib.asynccontextmanager
async def open_services(settings: CommonSettings, *, name: str) -> AsyncIterator[Services]:
    """Connect to everything a worker needs; close it all on the way out."""
    store = await Store.open(settings.database_url, db_schema=settings.database_schema)
    try:
        topology = Topology(settings.namespace, delivery_limit=settings.delivery_limit)
        broker = await Broker.connect(settings.rabbitmq_url, topology, connection_name=name)
        try:
            redis = connect_redis(settings.redis_url)
            try:
                yield Services(store, broker, redis, Keys(settings.namespace))
            finally:
                await redis.aclose()
        finally:
            await broker.close()
    finally:
        await store.close()


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
