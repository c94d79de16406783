"""The Hands role: one process serving one tool pool.

It imports the tool modules it is given, declares its pool's tools in the store (what the
Brains know of them), then consumes the pool's jobs.
"""

from __future__ import annotations

import argparse
import logging

from brainhands.hands.settings import HandsSettings
from brainhands.hands.worker import HandsWorker
from brainhands.shared.config import load_settings
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.runtime import open_services
from brainhands.shared.serving import serve
from brainhands.shared.tools import load_tool_modules

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
        )
        await serve(
            services,
            worker.run,
            service=f"brainhands-hands-{args.pool}",
            otlp_endpoint=settings.otlp_endpoint,
            consuming=lambda: worker.consuming,
        )
    return 0
