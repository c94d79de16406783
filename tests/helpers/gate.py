"""A gate in front of one service on loopback: closed, it resets every connection; open,
bytes pass both ways.

    async with gated(postgres_url) as gate:      # closed to begin with
        spawn(..., env={"BRAINHANDS_DATABASE_URL": gate.url})
        gate.open()

Closed, the gate accepts each connection and resets it at once (``SO_LINGER`` 0: a RST,
as from a server that is restarting), and resets the connections it was carrying. Unlike
``netns`` it needs no namespace or root: a worker reaches the gate at another port of
127.0.0.1, and only that worker's URL names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

CHUNK = 65536


class Gate:
    """A TCP proxy from a free port of 127.0.0.1 to the service that ``target`` names."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        assert parts.hostname and parts.port, f"{target} names no host and port"
        self.target = target
        self._host, self._port = parts.hostname, parts.port
        self._open = False
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.resets = 0
        """Connections reset while closed."""
        self.url = ""
        """``target`` with the gate's address in place of the service's (once started)."""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        parts = urlsplit(self.target)
        userinfo, at, _ = parts.netloc.rpartition("@")
        self.url = urlunsplit(parts._replace(netloc=f"{userinfo}{at}127.0.0.1:{port}"))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._reset_all()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def open(self) -> None:
        self._open = True

    def shut(self) -> None:
        """Closed from now on: every connection it carries is reset, as are new ones."""
        self._open = False
        self._reset_all()

    def _reset_all(self) -> None:
        for writer in list(self._writers):
            _reset(writer)
        self._writers.clear()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if not self._open:
            self.resets += 1
            _reset(client_w)
            return
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            server_r, server_w = await asyncio.open_connection(self._host, self._port)
        except OSError:
            _reset(client_w)
            self._tasks.discard(task)
            return
        self._writers |= {client_w, server_w}
        try:
            await asyncio.gather(_pump(client_r, server_w), _pump(server_r, client_w))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for writer in (client_w, server_w):
                _reset(writer)
                self._writers.discard(writer)
            self._tasks.discard(task)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(CHUNK):
        writer.write(data)
        await writer.drain()
    writer.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@contextlib.asynccontextmanager
async def gated(target: str) -> AsyncIterator[Gate]:
    """A closed ``Gate`` in front of the service at ``target``, removed on the way out."""
    gate = Gate(target)
    await gate.start()
    try:
        yield gate
    finally:
        await gate.close()
