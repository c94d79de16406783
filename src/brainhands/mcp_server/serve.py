"""The MCP server role: ``brainhands mcp``, the deployment's agents for MCP clients.

``--transport http`` serves streamable HTTP at ``/mcp`` on ``BRAINHANDS_MCP_SERVER_HOST``
and ``_PORT``; every request needs an API key (``Authorization: Bearer bh_...``), the
API's own (``brainhands keys create``), and one without a valid key is refused before
the MCP session sees it (401, problem+json). ``--transport stdio`` serves the one local
client that started the process, on its stdin and stdout, acting as the CLI does (the
settings' tenant and identity); the log goes to stderr. Either way a client that declares
the Tasks extension gets its runs as tasks (``mcp_server.tasks``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging

import uvicorn
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from brainhands.api.keys import VerifiedKeys
from brainhands.api.known import KnownAgents
from brainhands.api.problems import problem
from brainhands.api.quota import Quotas
from brainhands.api.serve import Server
from brainhands.client.direct import Client
from brainhands.mcp_server.callers import Identify, KeyHolders, local_caller
from brainhands.mcp_server.settings import McpServerSettings
from brainhands.mcp_server.tasks import RunTasks
from brainhands.mcp_server.tools import AgentServer
from brainhands.shared.config import load_settings
from brainhands.shared.runtime import stop_on_signals
from brainhands.shared.startup import Startup

log = logging.getLogger("brainhands.mcp_server")


class RequireKey:
    """Lets through only the HTTP requests whose key ``identify`` recognises: a client
    without one learns it at its first request, and no MCP session is opened for it. Each
    key's requests, and each address's requests with no valid key (a guesser's), are held
    to ``quotas`` as the HTTP API holds them: over the rate, 429 with ``Retry-After``."""

    def __init__(self, app: ASGIApp, identify: Identify, quotas: Quotas) -> None:
        self.app = app
        self.identify = identify
        self.quotas = quotas

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        who = await self.identify(Headers(scope=scope))
        client = scope.get("client")
        address = client[0] if client else "-"
        try:  # a key's requests, or an address's that carried no valid key
            self.quotas.take(who.principal.key_id if who else f"address:{address}")
        except HTTPException as over:
            busy = problem(429, "Too Many Requests", str(over.detail))
            busy.headers.update(over.headers or {})
            await busy(scope, receive, send)
            return
        if who is None:
            refused = problem(
                401,
                "Unauthorized",
                "an API key is needed (Authorization: Bearer bh_...); "
                "this one is missing, malformed, unknown or revoked",
            )
            refused.headers["WWW-Authenticate"] = "Bearer"
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def mcp(args: argparse.Namespace) -> int:
    settings = load_settings(McpServerSettings)
    startup = Startup(deadline=settings.startup_deadline, retry_max=settings.startup_retry_max)
    client = await Client.from_settings(
        settings, compat=settings.mcp_server_compat, operator=True, startup=startup
    )
    async with client:
        identify = local_caller(settings) if args.transport == "stdio" else None
        if identify is None:
            identify = KeyHolders(VerifiedKeys(client.store))
        server = AgentServer(
            client,
            identify,
            agents=KnownAgents(
                client.store, settings.mcp_server_compat, ttl=settings.mcp_server_agents_ttl
            ),
            wait=settings.mcp_server_wait,
            extensions=[RunTasks(client, identify)],
        )
        if args.transport == "stdio":
            stdio = asyncio.create_task(server.run_stdio_async())
            await _until_stopped(stdio)
            stdio.cancel()  # stopped by a signal; no-op once stdin has closed
            with contextlib.suppress(asyncio.CancelledError):
                await stdio
            return 0
        host = args.host or settings.mcp_server_host
        port = settings.mcp_server_port if args.port is None else args.port
        quotas = Quotas(
            rate=settings.mcp_server_rate, burst=settings.mcp_server_burst, max_streams=1
        )
        app = RequireKey(server.streamable_http_app(host=host), identify, quotas)
        config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False)
        http = Server(config)
        serving = asyncio.create_task(http.serve())
        while not http.started and not serving.done():  # noqa: ASYNC110 -- uvicorn has no event
            await asyncio.sleep(0.05)
        if http.started:
            bound = http.servers[0].sockets[0].getsockname()[1] if http.servers else port
            log.info(
                "serving MCP over streamable HTTP at /mcp",
                extra={"event": "mcp_listening", "host": host, "port": bound},
            )
        await _until_stopped(serving)
        http.should_exit = True
        await serving
    return 0


async def _until_stopped(serving: asyncio.Task[None]) -> None:
    """Wait until ``serving`` ends or a signal asks the process to stop."""
    stop = asyncio.create_task(stop_on_signals().wait())
    await asyncio.wait({serving, stop}, return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
