"""What every long-running role runs beside its work: an embedded outbox relay woken by
the process's own commits, the health port, tracing, and the drain on a signal."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

from brainhands.shared.relay import OutboxRelay
from brainhands.shared.runtime import Services, stop_on_signals
from brainhands.shared.tracing import configure_tracing, flush_tracing
from brainhands.shared.witness import went_back


async def serve(
    services: Services,
    work: Callable[[asyncio.Event], Any],
    *,
    service: str,
    otlp_endpoint: str | None,
    consuming: Callable[[], bool] = lambda: True,
) -> None:
    """Run ``work`` with an embedded relay woken by this process's commits, the process's
    health port saying from now on whether it is ready.

    On a signal the work drains first; the relay stops after it, so outcomes committed
    while draining are still published.
    """
    configure_tracing(service, otlp_endpoint)
    stop = stop_on_signals()
    relay_stop = asyncio.Event()
    relay = OutboxRelay(services.store, services.broker)
    services.store.add_commit_listener(relay.wake)
    services.health.ready_when(
        {
            "store": services.store.ping,
            "rabbitmq": lambda: _now(services.broker.connected),
            "redis": services.redis.ping,
            # No: a worker found the store behind Redis's witness, and all work is refused.
            "store_intact": lambda: _intact(services),
            "consuming": lambda: _now(consuming()),
        }
    )
    # What exists by now (modules, compiled statements, clients) lives as long as the process:
    # kept out of the collector's full passes, which walked all of it and held up every pass
    # in flight (120-240 ms each, in Brains and Hands under a burst).
    gc.collect()
    gc.freeze()
    # What a tool call or a pass allocates is freed by reference counting: collections
    # as often as the default thresholds ask took ~5% of a Brain's CPU, these ~1%.
    gc.set_threshold(10_000, 20, 20)
    relay_task = asyncio.create_task(relay.run(relay_stop))
    try:
        await work(stop)
    finally:
        relay_stop.set()
        await relay_task
        await relay.drain_once()
        flush_tracing()


async def _now(value: bool) -> bool:
    return value


async def _intact(services: Services) -> bool:
    return await went_back(services.redis, services.keys) is None
