"""A TCP proxy on loopback that loses answers: it forwards both ways, and the first time a
chunk from the server holds one of its markers, it closes both connections instead of
passing that chunk on. The request reached the server and took effect; its answer never
arrives (a dropped response, the server still up)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class DroppingProxy:
    """Listens on ``port`` (0: a free one) and forwards to ``upstream``'s port."""

    def __init__(self, upstream: int, markers: list[bytes]) -> None:
        self.upstream = upstream
        self.pending = list(markers)
        """Markers whose answer is still to be dropped (each once)."""
        self.dropped: list[bytes] = []
        self.port = 0

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[DroppingProxy]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        async with server:
            yield self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        closing = asyncio.Event()
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer, closing, drops=False)),
            asyncio.create_task(self._pump(up_reader, writer, closing, drops=True)),
        ]
        await closing.wait()
        for task in pumps:
            task.cancel()
        for w in (writer, up_writer):
            w.close()
            with contextlib.suppress(Exception):
                await w.wait_closed()

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        closing: asyncio.Event,
        *,
        drops: bool,
    ) -> None:
        try:
            while chunk := await source.read(65536):
                if drops and (marker := self._marker(chunk)) is not None:
                    self.pending.remove(marker)
                    self.dropped.append(marker)
                    return
                sink.write(chunk)
                await sink.drain()
        except ConnectionError:
            pass
        finally:
            closing.set()

    def _marker(self, chunk: bytes) -> bytes | None:
        return next((m for m in self.pending if m in chunk), None)
