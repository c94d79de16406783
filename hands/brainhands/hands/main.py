"""The Hands role: one process serving one tool pool.

It imports the tool modules it is given and lists the tools of the MCP servers it is
configured with, declares its pool's tools in the store (what the Brains know of them),
then consumes the pool's jobs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from brainhands.hands.mcp.config import McpConfig, load_mcp_config
from brainhands.hands.sandbox import Sandboxes, refuse_unless_sandboxable
from brainhands.hands.settings import HandsSettings
from brainhands.hands.worker import HandsWorker
from brainhands.shared.config import load_settings
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.limiter import Limiter
from brainhands.shared.runtime import open_services
from brainhands.shared.serving import serve
from brainhands.shared.tools import load_tool_modules

if TYPE_CHECKING:
    from brainhands.hands.mcp.tools import McpTools

log = logging.getLogger("brainhands.hands")


async def hands(args: argparse.Namespace) -> int:
    settings = load_settings(HandsSettings)
    registry = load_tool_modules(args.tools)
    config = None
    if settings.mcp_config is not None:
        config = load_mcp_config(settings.mcp_config, environ=os.environ)
    if not args.tools and config is None:
        raise ConfigurationError(
            "give a tool module (--tools) or MCP servers (BRAINHANDS_MCP_CONFIG)"
        )
    sandboxes = Sandboxes(settings.sandbox_bwrap, settings.sandbox_first_user)
    # Before any service: a Hands that could only serve a sandboxed tool unsandboxed
    # never starts (an MCP server's tools declare no sandbox).
    await refuse_unless_sandboxable(
        sandboxes, registry.in_pool(args.pool), "BRAINHANDS_SANDBOX_BWRAP"
    )
    async with (
        open_services(settings, name=f"hands-{args.pool}") as services,
        _mcp_tools(config, args.pool) as mcp,
    ):
        if mcp is not None:
            await mcp.register(registry, services.store)
        if not registry.in_pool(args.pool):
            raise ConfigurationError(
                f"no tool of pool {args.pool!r} is registered by "
                f"{', '.join(args.tools) or 'no module'}{' or MCP server' if config else ''}; "
                f"pools there: {sorted({t.pool for t in registry}) or 'none'}"
            )
        served = [spec.declaration() for spec in registry if spec.pool == args.pool]
        changed = await services.store.declarations.declare_tools(served)
        log.info(
            "tools declared",
            extra={"event": "declared", "tools": [d.name for d in served], "changed": changed},
        )
        worker = HandsWorker(
            ledger=services.store.ledger,
            broker=services.broker,
            leases=services.leases(settings.lease_ttl_ms),
            registry=registry,
            pool=args.pool,
            concurrency=args.concurrency or settings.concurrency,
            shutdown_grace=settings.shutdown_grace,
            max_inline_result=settings.max_inline_result,
            limiter=Limiter(services.redis, services.keys, slot_ttl_ms=settings.lease_ttl_ms),
            limit_rules=settings.limit_rules,
            waiting_room=settings.limit_waiting,
            sandboxes=sandboxes,
        )
        run: Callable[[asyncio.Event], Awaitable[None]] = worker.run
        if mcp is not None:
            interval = settings.mcp_relist_interval
            run = mcp.relisting(worker.run, registry, services.store, interval=interval)
        await serve(
            services,
            run,
            service=f"brainhands-hands-{args.pool}",
            otlp_endpoint=settings.otlp_endpoint,
            consuming=lambda: worker.consuming,
        )
    return 0


@contextlib.asynccontextmanager
async def _mcp_tools(config: McpConfig | None, pool: str) -> AsyncIterator[McpTools | None]:
    """The configured MCP servers, stopped on the way out; None when there are none. The
    ``mcp`` SDK is imported only here: a Hands without MCP servers does not need it."""
    if config is None:
        yield None
        return
    try:
        from brainhands.hands.mcp.tools import McpTools
    except ImportError as exc:
        raise ConfigurationError(
            f"BRAINHANDS_MCP_CONFIG names MCP servers but the mcp SDK cannot be imported ({exc}): "
            "install the mcp extra: brainhands-hands[mcp], or brainhands[mcp] where the whole "
            "of brainhands is installed"
        ) from None
    mcp = McpTools(config, pool=pool)
    try:
        yield mcp
    finally:
        await mcp.close()
