"""Reading the PostgreSQL protocol as it passes a relay (``netns.Relay``), to cut a client
off from its server at one chosen statement: the lost acknowledgement of a commit.

A store write is one statement sent alone (a chained draft, implicitly committed at its
Sync) or ends with ``COMMIT``; either way the client learns that it committed only from the
server's answer. ``CommitCut`` lets the statement reach the server and swallows the answer
(the client cannot know that it committed), or drops the statement itself (nothing
happened), then keeps the whole service cut for ``hold`` seconds and kills the connection,
as a partition that outlived the client's patience would. The relay watches the answer it
swallows, so the test knows which of the two the server did.

The relay declines TLS (answers ``N`` to the client's SSLRequest, as a server without TLS
does) so that it can read the messages.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.helpers.netns import Relay

ENCRYPTION_REQUESTS = (80877103, 80877104)
"""SSLRequest and GSSENCRequest: the codes of the untyped messages a client may send first."""
ANSWER_WITHIN = 30.0


@dataclass
class Trap:
    """Something to do at the next statement ``matches`` accepts (its SQL text)."""

    matches: Callable[[str], bool]
    statement: str | None = None
    """The SQL text it caught."""
    answer: str | None = None
    """What the server answered (``CommandComplete ...`` or ``ErrorResponse ...``); None
    while it has not, or when the statement never reached it."""
    done: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class CommitCut(Trap):
    """Cut the store off at the statement.

    ``reaches_server``: the statement reaches the server and the answer never comes back
    (it committed, the client cannot know); otherwise the statement itself is dropped (it
    did not commit). Afterwards the service stays cut for ``hold`` seconds, then that
    connection dies and the others go on (``done``)."""

    reaches_server: bool = True
    hold: float = 1.0


@dataclass
class OnAnswer(Trap):
    """Call ``then`` once the server answered the statement, before the client reads the
    answer (``done``): e.g. cut another service right after a commit."""

    then: Callable[[], None] = lambda: None


def _cstrings(payload: bytes, count: int) -> list[str]:
    parts = payload.split(b"\0", count)
    return [p.decode(errors="replace") for p in parts[:count]]


class PgWatch:
    """One client connection's two byte streams, framed into messages as they pass."""

    def __init__(
        self, relay: Relay, client_w: asyncio.StreamWriter, server_w: asyncio.StreamWriter
    ) -> None:
        self.relay = relay
        self.client_w, self.server_w = client_w, server_w
        self._up = bytearray()
        self._down = bytearray()
        self._started = False
        self._statements: dict[str, str] = {}
        self._syncs = 1  # the startup is answered by a ReadyForQuery too
        self._ready = 0
        self.trap: Trap | None = None
        self.cutting = False
        """A ``CommitCut`` fired here: nothing more passes either way."""
        self._answer_at: int | None = None
        self._answered = asyncio.Event()
        self._dropping = False

    def from_client(self, data: bytes) -> bytes:
        """The bytes to forward to the server, of the complete messages in ``data``."""
        self._up += data
        out = bytearray()
        while True:
            message = self._next_client_message()
            if message is None:
                return bytes(out)
            if not self._dropping:
                out += message
            trapped = self.trap is not None and self._answer_at is None and not self._dropping
            if trapped and message[:1] in (b"S", b"Q"):  # the trapped statement's Sync
                self._answer_at = self._syncs
                self._dropping = self.cutting  # what follows is lost in the cut

    def _next_client_message(self) -> bytes | None:
        if not self._started:
            if len(self._up) < 8:
                return None
            length, code = struct.unpack("!ii", self._up[:8])
            if code in ENCRYPTION_REQUESTS:
                del self._up[:8]
                self.client_w.write(b"N")
                return b""
            if len(self._up) < length:
                return None
            self._started = True
            message = bytes(self._up[:length])
            del self._up[:length]
            return message
        if len(self._up) < 5:
            return None
        kind, length = bytes(self._up[:1]), struct.unpack("!i", self._up[1:5])[0]
        if len(self._up) < 1 + length:
            return None
        message = bytes(self._up[: 1 + length])
        del self._up[: 1 + length]
        self._read_client(kind, message[5:])
        return b"" if self._dropping else message

    def _read_client(self, kind: bytes, payload: bytes) -> None:
        sql = None
        if kind == b"P":
            name, query = _cstrings(payload, 2)
            self._statements[name] = query
        elif kind == b"B":
            sql = self._statements.get(_cstrings(payload, 2)[1])
        elif kind == b"Q":
            sql = _cstrings(payload, 1)[0]
        if kind in (b"S", b"Q"):
            self._syncs += 1
        if sql is None:
            return
        self.relay.saw(sql)
        armed = self.relay.armed
        if armed is None or self.trap is not None or not armed.matches(sql):
            return
        self.relay.armed = None
        self.trap = armed
        armed.statement = sql
        if isinstance(armed, CommitCut):
            self.cutting = True
            self.relay.cut()
            if not armed.reaches_server:
                self._dropping = True
                self._answered.set()
            self.relay.run(self._end(armed))

    async def _end(self, cut: CommitCut) -> None:
        await asyncio.sleep(cut.hold)
        try:
            await asyncio.wait_for(self._answered.wait(), ANSWER_WITHIN)
        finally:
            self.client_w.transport.abort()
            self.server_w.transport.abort()
            self.relay.heal()
            cut.done.set()

    def from_server(self, data: bytes) -> bytes:
        """The bytes to forward to the client: none once a cut fired."""
        self._down += data
        while len(self._down) >= 5:
            kind, length = bytes(self._down[:1]), struct.unpack("!i", self._down[1:5])[0]
            if len(self._down) < 1 + length:
                break
            payload = bytes(self._down[5 : 1 + length])
            del self._down[: 1 + length]
            self._read_server(kind, payload)
        return b"" if self.cutting else data

    def _read_server(self, kind: bytes, payload: bytes) -> None:
        if kind == b"Z":
            self._ready += 1
        trap = self.trap
        if trap is None or self._answer_at is None or self._ready < self._answer_at - 1:
            return
        if self._ready > self._answer_at or self._answered.is_set():
            return
        if kind == b"C":
            trap.answer = trap.answer or f"CommandComplete {_cstrings(payload, 1)[0]}"
        elif kind == b"E":
            fields = {f[:1]: f[1:].decode(errors="replace") for f in payload.split(b"\0") if f}
            trap.answer = f"ErrorResponse {fields.get(b'C')} {fields.get(b'M')}"
        elif kind == b"Z":
            self._answered.set()
            if isinstance(trap, OnAnswer):
                trap.then()
                trap.done.set()
