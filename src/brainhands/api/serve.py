"""The API role: ``brainhands api``, one uvicorn server in front of one client.

It serves the routes of ``brainhands.api.app``, its OpenAPI document at ``/openapi.json``
(when turned on), and ``/healthz``, ``/readyz``, ``/metrics`` on the same port. Without
authentication (``BRAINHANDS_API_AUTH=none``) it says so, loudly, at start-up, and
refuses to listen beyond the loopback interface.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Iterator

import uvicorn

from brainhands.api.app import create_app
from brainhands.api.changes import SessionChanges
from brainhands.api.limits import BodyLimit
from brainhands.api.live import LiveNotes
from brainhands.api.settings import ApiSettings
from brainhands.client.direct import Client
from brainhands.shared.config import load_settings
from brainhands.shared.health import HealthServer
from brainhands.shared.runtime import stop_on_signals
from brainhands.shared.startup import Startup

log = logging.getLogger("brainhands.api")


class Server(uvicorn.Server):
    """uvicorn, with the role's own signal handling (``stop_on_signals``): SIGTERM drains
    the server, then the client closes."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def connect_client(settings: ApiSettings, host: str, port: int) -> Client:
    """An operator's client (each route names the session by its caller's tenant's key),
    once the store and RabbitMQ answer.

    Until then the API's port serves only ``/healthz`` and ``/readyz`` (503, saying what
    the process waits for), as a worker's health port does while it starts
    (``shared.startup``); its ``/metrics`` is for an ``admin`` key, so it waits for the
    routes, which come up once the client is connected.
    """
    starting = HealthServer(metrics=False)
    await starting.start(port, host)
    try:
        startup = Startup(
            deadline=settings.startup_deadline,
            retry_max=settings.startup_retry_max,
            report=starting.wait_for,
        )
        return await Client.from_settings(
            settings, compat=settings.api_compat, operator=True, startup=startup
        )
    finally:
        await starting.close()


async def api(args: argparse.Namespace) -> int:
    settings = load_settings(ApiSettings)
    host = args.host or settings.api_host
    port = settings.api_port if args.port is None else args.port
    settings.check_bind(host)
    if settings.api_auth == "none":
        log.warning(
            "AUTHENTICATION IS OFF: every request acts for the default tenant. Never expose this "
            "API beyond your own machine; set BRAINHANDS_API_AUTH=keys.",
            extra={"event": "auth_off"},
        )
    client = await connect_client(settings, host, port)
    async with client:
        changes = SessionChanges(client.store)
        await changes.start()
        live = LiveNotes(client.broker)
        await live.start()
        routes = create_app(client, changes, live, settings)
        config = uvicorn.Config(
            BodyLimit(routes, settings.api_max_body),
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            http="httptools",
        )
        server = Server(config)
        stop = stop_on_signals()
        serving = asyncio.create_task(server.serve())
        while not server.started and not serving.done():  # noqa: ASYNC110 -- uvicorn has no event
            await asyncio.sleep(0.05)
        if server.started:
            bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
            log.info(
                "serving the API",
                extra={"event": "api_listening", "host": host, "port": bound},
            )
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        routes.state.watchers.close()  # the event streams end, so that the server can
        server.should_exit = True
        await serving
        stopping.cancel()
        await live.close()
        await changes.close()
    return 0
