"""Egress: the one way out of a sandbox that declares hosts (``Sandbox(hosts=...)``).

A sandbox has no network of its own (``bwrap --unshare-all``): only a loopback device. For
a command whose tool names hosts, the Hands opens a listening socket on that loopback,
``PROXY_ADDRESS`` inside the sandbox's network namespace, before the command starts, and
serves it as an HTTP proxy from the Hands' side: ``CONNECT host:port`` (HTTPS, or any TCP)
and plain HTTP requests in absolute form. The command finds it through ``http_proxy`` and
``https_proxy``, which every common client reads (curl, pip, git, Python's urllib, httpx,
requests). Names are resolved on the Hands, so the sandbox needs no resolver.

A host is let through when the declaration names it: ``pypi.org`` (ports 443 and 80),
``pypi.org:8443`` (that port only), ``*.pythonhosted.org`` (any name under it, on 443 and
80). Anything else is answered ``403`` and remembered, so the command's result says what
it reached for. A process that ignores the proxy reaches nothing: there is no route out.

The socket is made by a short helper process (``_LISTEN``) that joins the sandbox's user
and network namespaces, binds, and hands the listening socket back over a socket pair: a
socket stays in the namespace it was made in, and joining a user namespace takes a process
with one thread, which a Hands is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from brainhands.shared.tools import host_rule

log = logging.getLogger(__name__)

PROXY_ADDRESS = ("127.0.0.1", 3128)
"""Where a sandbox's proxy listens, inside the sandbox's own network namespace."""
WEB_PORTS = (443, 80)
"""The ports a host declared without one may be reached on."""
CONNECT_SECONDS = 10.0

_LISTEN = """
import ctypes, fcntl, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
pid, port, reply = sys.argv[1], int(sys.argv[2]), socket.socket(fileno=int(sys.argv[3]))
net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
if libc.setns(net, 0x40000000) != 0:
    # Not root: join the user namespace that owns the network one (NS_GET_USERNS), which
    # this user made, to hold the capability there.
    if libc.setns(fcntl.ioctl(net, 0xB701), 0x10000000) != 0 or libc.setns(net, 0x40000000):
        sys.exit("cannot join the sandbox's namespaces: " + os.strerror(ctypes.get_errno()))
listener = socket.socket()
listener.bind(("127.0.0.1", port))
listener.listen(64)
socket.send_fds(reply, [b"listening"], [listener.fileno()])
"""


def proxy_environment() -> dict[str, str]:
    """What tells a sandboxed command's clients to go through its proxy."""
    url = "http://{}:{}".format(*PROXY_ADDRESS)
    names = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")
    return {name: url for name in names}


def allows(declared: Sequence[str], host: str, port: int) -> bool:
    """Whether a sandbox that declared ``declared`` may reach ``host`` on ``port``."""
    host = host.lower().rstrip(".")
    for rule in declared:
        name, ports = host_rule(rule)
        ports = ports or WEB_PORTS
        if port not in ports:
            continue
        if name.startswith("*."):
            if host.endswith(name[1:]) and len(host) > len(name) - 1:
                return True
        elif host == name:
            return True
    return False


@dataclass
class Egress:
    """The proxy of one sandboxed command: what it lets through, and what it refused."""

    hosts: tuple[str, ...]
    refused: list[str] = field(default_factory=list)
    """``host:port`` of each request refused, in order, each once."""
    _open: set[asyncio.Task[None]] = field(default_factory=set)

    @contextlib.asynccontextmanager
    async def serving(self, sandbox_pid: int) -> AsyncIterator[None]:
        """Serve the proxy inside the network namespace of process ``sandbox_pid`` (the
        sandbox's init) until the block ends; then close every connection it holds."""
        listener = await listen_in(sandbox_pid)
        server = await asyncio.start_server(self._serve, sock=listener)
        try:
            yield
        finally:
            server.close()
            for task in list(self._open):
                task.cancel()
            await asyncio.gather(*self._open, return_exceptions=True)
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._open.add(task)
        try:
            await self._proxy(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._open.discard(task)
            writer.close()

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")  # over the stream's 64 KiB: dropped
        line, _, headers = head.decode("latin-1").partition("\r\n")
        method, _, rest = line.partition(" ")
        target, _, version = rest.partition(" ")
        request = _target(method, target)
        if request is None:
            return await _answer(
                writer, 400, f"a sandbox's proxy takes CONNECT or an absolute URL, not {line!r}"
            )
        host, port, path = request
        if not allows(self.hosts, host, port):
            where = f"{host}:{port}"
            if where not in self.refused:
                self.refused.append(where)
            log.info("sandbox egress refused", extra={"event": "egress_refused", "host": where})
            return await _answer(writer, 403, f"{where} is not among the hosts this tool declares")
        try:
            async with asyncio.timeout(CONNECT_SECONDS):
                up_reader, up_writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as exc:
            return await _answer(writer, 502, f"cannot reach {host}:{port}: {exc}")
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(_forwarded(method, path, version, headers))
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()


async def listen_in(sandbox_pid: int) -> socket.socket:
    """A socket listening on ``PROXY_ADDRESS`` in the network namespace of ``sandbox_pid``,
    made there by the helper process."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        helper = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", "-c", _LISTEN,
            str(sandbox_pid), str(PROXY_ADDRESS[1]), str(theirs.fileno()),
            pass_fds=(theirs.fileno(),),
            stdin=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, said = await helper.communicate()
        if helper.returncode != 0:
            raise OSError(f"cannot open the sandbox's proxy: {said.decode(errors='replace')}")
        _, fds, _, _ = socket.recv_fds(ours, 64, 1)  # sent before the helper exited
    listener = socket.socket(fileno=fds[0])
    listener.setblocking(False)
    return listener


def _target(method: str, target: str) -> tuple[str, int, str] | None:
    """The host, port and path a request asks for; None when it is not a proxy's request."""
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        return (host.strip("[]"), int(port), "") if host and port.isdigit() else None
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        return None
    authority, slash, path = rest.partition("/")
    host, colon, port = authority.rpartition(":")
    if not colon or not port.isdigit():
        host, port = authority, "80"
    return (host, int(port), slash + path) if host else None


def _forwarded(method: str, path: str, version: str, headers: str) -> bytes:
    """A plain HTTP request as its server takes it: the path alone, no proxy headers, and
    one request a connection (the next one may name another host)."""
    kept = [
        h
        for h in headers.split("\r\n")
        if h and h.split(":", 1)[0].strip().lower() not in _HOP_HEADERS
    ]
    lines = [f"{method} {path or '/'} {version}", *kept, "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


_HOP_HEADERS = {"connection", "proxy-connection", "keep-alive", "proxy-authorization"}


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(64 * 1024):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


async def _answer(writer: asyncio.StreamWriter, status: int, why: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}
    body = json.dumps({"error": why}).encode() + b"\n"
    writer.write(
        f"HTTP/1.1 {status} {reason[status]}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
