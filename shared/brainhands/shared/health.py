"""The HTTP port of every worker process: ``/healthz``, ``/readyz`` and ``/metrics``.

- ``/healthz``: the process is alive (its event loop answers).
- ``/readyz``: it can do its job now: the store, RabbitMQ and Redis answer, it consumes,
  and no worker found the store gone back in time (``shared.witness``). While the process
  starts it answers 503 with what it waits for (``{"ready": false, "waiting_for": "store"}``,
  ``shared.startup``), so that a worker started during an outage is seen waiting, and alive.
- ``/metrics``: Prometheus exposition of ``shared.metrics``.

A minimal HTTP/1.1 server on asyncio: three GET paths need no framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger("brainhands.health")

Check = Callable[[], Awaitable[bool]]


class HealthServer:
    """Serves health, readiness and metrics for one process."""

    def __init__(
        self,
        checks: dict[str, Check] | None = None,
        *,
        timeout: float = 2.0,
        metrics: bool = True,
    ) -> None:
        self.checks = checks
        """What ``/readyz`` asks; None while the process starts (not ready)."""
        self.waiting_for: str | None = None
        """The service a starting process waits for (None: none, it is setting itself up)."""
        self.timeout = timeout
        self.metrics = metrics
        """Whether ``/metrics`` is served (not on a port that the world reaches)."""
        self._server: asyncio.Server | None = None

    def wait_for(self, service: str | None) -> None:
        """Say on ``/readyz`` that the starting process waits for ``service``."""
        self.waiting_for = service

    def ready_when(self, checks: dict[str, Check]) -> None:
        """The process has started: from now on ``/readyz`` asks ``checks``."""
        self.checks = checks
        self.waiting_for = None

    async def start(self, port: int, host: str = "0.0.0.0") -> int:
        """Listen on ``port`` (0: any free one); return the port."""
        self._server = await asyncio.start_server(self._serve, host, port)
        bound = int(self._server.sockets[0].getsockname()[1])
        log.info("serving health", extra={"event": "health_listening", "port": bound})
        return bound

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def readiness(self) -> dict[str, bool | str]:
        """``ready`` and each check's answer (a check that raises or times out says no); while
        the process starts, ``ready`` is false and ``waiting_for`` says for what."""
        if self.checks is None:
            return {"ready": False, "waiting_for": self.waiting_for or "start-up"}
        results: dict[str, bool | str] = {}
        for name, check in self.checks.items():
            try:
                results[name] = bool(await asyncio.wait_for(check(), self.timeout))
            except Exception:  # a check that fails in any way means "not ready"
                results[name] = False
        return {"ready": all(results.values()), **results}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass  # headers: nothing here needs them
            parts = request.decode("latin-1").split()
            path = parts[1] if len(parts) > 1 else "/"
            status, content_type, body = await self._answer(path)
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, path: str) -> tuple[str, str, bytes]:
        if path == "/healthz":
            return "200 OK", "application/json", b'{"alive": true}'
        if path == "/readyz":
            results = await self.readiness()
            status = "200 OK" if results["ready"] else "503 Service Unavailable"
            return status, "application/json", json.dumps(results).encode()
        if path == "/metrics" and self.metrics:
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest()
        return "404 Not Found", "text/plain", b"not found"
