"""The Brain-side roles: Brain, sweeper and relay processes.

None of them imports ``brainhands.hands`` or any tool code: a Brain knows tools by what
their Hands pools declared in the store (``ToolCatalog``)."""

from __future__ import annotations

import argparse
import asyncio
import functools

from brainhands.brain.agent import agent_kinds, load_agent_modules, start_agent_or_task
from brainhands.brain.callbacks import Callbacks
from brainhands.brain.hosted import drivers_of, hosted_kinds
from brainhands.brain.models import ModelSettings, model_from_settings
from brainhands.brain.registry import load_task_modules
from brainhands.brain.settings import BrainSettings
from brainhands.brain.sweeper import Sweeper
from brainhands.brain.tenant_budget import TenantBudgets
from brainhands.brain.worker import BrainWorker
from brainhands.shared.config import CommonSettings, load_settings
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.lease import LeaseManager
from brainhands.shared.progress import QueueProgress
from brainhands.shared.runtime import Services, open_services
from brainhands.shared.serving import serve
from brainhands.shared.store import ToolCatalog


async def brain(args: argparse.Namespace) -> int:
    settings = load_settings(BrainSettings)
    # Built once, for every agent that names no model; no connection is opened until used.
    model_settings = load_settings(ModelSettings)
    model = model_from_settings(model_settings)
    window = model_settings.context_window
    agents = load_agent_modules(args.agents or []).with_model(model, window=window)
    tasks = load_task_modules(args.tasks or [])
    drivers = drivers_of(agents.hosted.values())
    if not tasks.kinds and not agents.agents and not drivers:
        raise ConfigurationError("nothing to run: give --tasks MODULE and/or --agents MODULE")
    async with open_services(settings, name=f"brain-{'-'.join(args.compat)}") as services:
        services.store.document_increments = settings.document_increments
        # Hosted agents too: the API and the MCP server take submissions for the names.
        await services.store.declarations.declare_agents(args.compat, [*agents.agents, *drivers])
        tools = ToolCatalog(services.store)
        grace = settings.tool_declaration_grace
        tasks = tasks.include(agent_kinds(agents, tools, declaration_grace=grace))
        if drivers:
            tasks.include(hosted_kinds(drivers, tools, TenantBudgets(services.store)))
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
            declaration_grace=grace,
            shutdown_grace=settings.shutdown_grace,
            start_submission=functools.partial(start_agent_or_task, hosted=drivers),
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
            service="brainhands-sweeper",
            otlp_endpoint=settings.otlp_endpoint,
        )
    return 0


def sweeper_of(services: Services, leases: LeaseManager, settings: BrainSettings) -> Sweeper:
    secret = settings.webhook_secret
    callbacks = (
        None
        if secret is None
        else Callbacks(
            services.store, secret.get_secret_value().encode(), settings.webhook_allow_list
        )
    )
    return Sweeper(
        store=services.store,
        broker=services.broker,
        leases=leases,
        period=settings.sweeper_period,
        backlog_grace=settings.sweeper_backlog_grace,
        blocked_recheck=settings.sweeper_blocked_recheck,
        redispatch_after=settings.redispatch_after,
        progress=QueueProgress(services.redis, services.keys),
        callbacks=callbacks,
        schedule_late_after=settings.schedule_late_after,
        retention=settings.retention,
    )


async def relay(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    async with open_services(settings, name="relay") as services:
        # The embedded relay of ``serve`` is the whole job here.
        await serve(
            services,
            _until_stopped,
            service="brainhands-relay",
            otlp_endpoint=settings.otlp_endpoint,
        )
    return 0


async def _until_stopped(stop: asyncio.Event) -> None:
    await stop.wait()
