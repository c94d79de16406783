"""The long-running roles: Brain, Hands, relay and sweeper processes."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable
from typing import Any

from brainhands.brain.agent import agent_kinds, load_agent_modules, start_agent_or_task
from brainhands.brain.models import ModelSettings, model_from_settings
from brainhands.brain.registry import load_task_modules
from brainhands.brain.settings import BrainSettings
from brainhands.brain.sweeper import Sweeper
from brainhands.brain.worker import BrainWorker
from brainhands.hands.settings import HandsSettings
from brainhands.hands.worker import HandsWorker
from brainhands.shared.config import CommonSettings, load_settings
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.health import HealthServer
from brainhands.shared.lease import LeaseManager
from brainhands.shared.progress import QueueProgress
from brainhands.shared.relay import OutboxRelay
from brainhands.shared.runtime import Services, open_services, stop_on_signals
from brainhands.shared.store import OperationLedger
from brainhands.shared.store.declarations import declare_tools
from brainhands.shared.tools import load_tool_modules
from brainhands.shared.tracing import configure_tracing, flush_tracing

log = logging.getLogger("brainhands.hands")


async def hands(args: argparse.Namespace) -> int:
    settings = load_settings(HandsSettings)
    registry = load_tool_modules(args.tools)
    if not registry.in_pool(args.pool):
        raise ConfigurationError(
            f"no tool of pool {args.pool!r} is registered by {', '.join(args.tools)}; "
            f"pools there: {sorted({t.pool for t in registry}) or 'none'}"
        )
    async with open_services(settings, name=f"hands-{args.pool}") as services:
        served = [spec.declaration() for spec in registry if spec.pool == args.pool]
        changed = await declare_tools(services.store, served)
        log.info(
            "tools declared",
            extra={"event": "declared", "tools": [d.name for d in served], "changed": changed},
        )
        worker = HandsWorker(
            ledger=OperationLedger(services.store),
            broker=services.broker,
            leases=services.leases(settings.lease_ttl_ms),
            registry=registry,
            pool=args.pool,
            concurrency=args.concurrency or settings.concurrency,
            shutdown_grace=settings.shutdown_grace,
            max_inline_result=settings.max_inline_result,
        )
        await serve(
            services,
            worker.run,
            http_port=settings.http_port,
            service=f"brainhands-hands-{args.pool}",
            otlp_endpoint=settings.otlp_endpoint,
            consuming=lambda: worker.consuming,
        )
    return 0


async def brain(args: argparse.Namespace) -> int:
    settings = load_settings(BrainSettings)
    # Built once, for every agent that names no model; no connection is opened until used.
    model = model_from_settings(load_settings(ModelSettings))
    tools = load_tool_modules(args.tools or [])
    agents = load_agent_modules(args.agents or []).with_model(model)
    tasks = load_task_modules(args.tasks or []).include(agent_kinds(agents, tools))
    if not tasks.kinds:
        raise ConfigurationError("nothing to run: give --tasks MODULE and/or --agents MODULE")
    async with open_services(settings, name=f"brain-{'-'.join(args.compat)}") as services:
        leases = services.leases(settings.lease_ttl_ms)
        worker = BrainWorker(
            store=services.store,
            broker=services.broker,
            leases=leases,
            tasks=tasks,
            tools=tools,
            compats=args.compat,
            concurrency=settings.concurrency,
            max_restarts=settings.max_restarts,
            shutdown_grace=settings.shutdown_grace,
            start_submission=start_agent_or_task,
            progress=QueueProgress(services.redis, services.keys),
        )
        sweeper = sweeper_of(services, leases, settings)

        async def work(stop: asyncio.Event) -> None:
            jobs = [worker.run(stop)]
            if not args.no_sweeper:
                jobs.append(sweeper.run(stop))
            await asyncio.gather(*jobs)

        try:
            await serve(
                services,
                work,
                http_port=settings.http_port,
                service="brainhands-brain",
                otlp_endpoint=settings.otlp_endpoint,
                consuming=lambda: worker.consuming,
            )
        finally:
            await model.aclose()
    return 0


async def sweeper(args: argparse.Namespace) -> int:
    settings = load_settings(BrainSettings)
    async with open_services(settings, name="sweeper") as services:
        sweeper = sweeper_of(services, services.leases(settings.lease_ttl_ms), settings)
        await serve(
            services,
            sweeper.run,
            http_port=settings.http_port,
            service="brainhands-sweeper",
            otlp_endpoint=settings.otlp_endpoint,
        )
    return 0


def sweeper_of(services: Services, leases: LeaseManager, settings: BrainSettings) -> Sweeper:
    return Sweeper(
        store=services.store,
        broker=services.broker,
        leases=leases,
        period=settings.sweeper_period,
        backlog_grace=settings.sweeper_backlog_grace,
        blocked_recheck=settings.sweeper_blocked_recheck,
        redispatch_after=settings.redispatch_after,
        progress=QueueProgress(services.redis, services.keys),
    )


async def relay(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    async with open_services(settings, name="relay") as services:
        # The embedded relay of ``serve`` is the whole job here.
        await serve(
            services,
            _until_stopped,
            http_port=settings.http_port,
            service="brainhands-relay",
            otlp_endpoint=settings.otlp_endpoint,
        )
    return 0


async def _until_stopped(stop: asyncio.Event) -> None:
    await stop.wait()


async def serve(
    services: Services,
    work: Callable[[asyncio.Event], Any],
    *,
    http_port: int,
    service: str,
    otlp_endpoint: str | None,
    consuming: Callable[[], bool] = lambda: True,
) -> None:
    """Run ``work`` with an embedded relay woken by this process's commits, and the
    process's health port.

    On a signal the work drains first; the relay stops after it, so outcomes committed
    while draining are still published.
    """
    configure_tracing(service, otlp_endpoint)
    stop = stop_on_signals()
    relay_stop = asyncio.Event()
    relay = OutboxRelay(services.store, services.broker)
    services.store.add_commit_listener(relay.wake)
    health = HealthServer(
        {
            "store": services.store.ping,
            "rabbitmq": lambda: _now(services.broker.connected),
            "redis": services.redis.ping,
            "consuming": lambda: _now(consuming()),
        }
    )
    if http_port >= 0:
        await health.start(http_port)
    relay_task = asyncio.create_task(relay.run(relay_stop))
    try:
        await work(stop)
    finally:
        relay_stop.set()
        await relay_task
        await relay.drain_once()
        await health.close()
        flush_tracing()


async def _now(value: bool) -> bool:
    return value
