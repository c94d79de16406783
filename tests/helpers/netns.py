"""Network partitions for tests and benchmarks: a worker in a network namespace of its own,
joined to the host by a veth pair, reaching the loopback services through relays the test
controls.

    async with partitioned([5432, 6379, 5672, email_port]) as link:
        spawn(..., prefix=link.prefix, env={"BRAINHANDS_REDIS_URL": link.url(redis_url)})
        link.cut()                       # the whole link down: every connection hangs
        link.heal()
        link.relays[6379].cut()          # only Redis: its relay holds every byte both ways
        link.relays[5432].arm(CommitCut(...))   # the store, at one statement (``pgwire``)
        link.shape(delay=0.1, jitter=0.05, loss=0.03)

The services listen on 127.0.0.1 only, which a namespace cannot reach, so each port gets a
relay on the host's end of the veth (``10.213.x.1:port``) that forwards to
``127.0.0.1:port``. A cut never closes a socket: a peer that is cut off sees its bytes go
unanswered, as behind a real partition, not a reset. What the link does:

- ``cut()`` / ``heal()``: the host's end of the veth down / up. The kernel drops every
  packet; TCP retransmits into the void, and after a heal resumes at its next retransmission
  (after a long cut, that can be as long again). A new connection gets no answer, then "no
  route to host" once the namespace's neighbour entry for the host has failed.
- ``Relay.cut()`` / ``heal()``: one service only. The relay stops moving bytes of that port
  and keeps its sockets open; connections made meanwhile are accepted and held.
- ``shape(delay, jitter, loss)``: what ``tc qdisc ... netem delay D J loss L`` on the host's
  end would do to traffic toward the worker. This kernel has no ``sch_netem``
  (``CONFIG_NET_SCH_NETEM`` is unset on the machines this runs on), so the relays delay each
  chunk toward the worker by D +/- J (in order, as one TCP stream must arrive) and
  nftables' ``numgen random`` drops a fraction L of the packets the namespace receives: real
  losses, repaired by TCP's real retransmissions. The rule lives in the namespace's own
  ruleset; the host's is never touched.

Everything made is removed on the way out, a failed test included: the relays, the veth
pair and the namespace; leftovers of a process that died without cleaning up are removed by
the next run (``remove_orphans``). Names carry the creating process's pid (``bh-<pid>-<n>``)
and addresses come from 10.213.0.0/16, skipping any subnet the host already routes.

No pytest here: ``bench/`` drives the same partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import os
import random
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tests.helpers.pgwire import PgWatch, Trap

SUBNETS = ipaddress.IPv4Network("10.213.0.0/16")
LOOPBACK = "127.0.0.1"
CHUNK = 65536
_made = itertools.count()


def run_ip(*args: str, namespace: str | None = None, stdin: str | None = None) -> str:
    """Run ``ip args`` (or ``args`` as a command inside ``namespace``); its output, or
    ``RuntimeError`` with its message."""
    command = ["ip", *args] if namespace is None else ["ip", "netns", "exec", namespace, *args]
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def namespaces_unavailable() -> str | None:
    """Why this machine cannot make network namespaces with veth pairs, or None if it can
    (it tries: root alone is not enough in some sandboxes)."""
    if shutil.which("ip") is None:
        return "network namespaces need iproute2's `ip` (apt install iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    remove_orphans()
    probe = f"bh-{os.getpid()}-probe"
    try:
        run_ip("netns", "add", probe)
        run_ip(
            "link", "add", f"bh{os.getpid()}hp", "type", "veth", "peer", "name", "p", "netns", probe
        )
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return f"this sandbox cannot make network namespaces with veth pairs: {exc}"
    finally:
        _remove(probe, f"bh{os.getpid()}hp")
    return None


def nftables_missing() -> str | None:
    """Why packet loss cannot be made here, or None (``shape(loss=...)`` needs ``nft``)."""
    if shutil.which("nft") is None:
        return "packet loss needs nftables' `nft` (apt install nftables)"
    return None


def _remove(namespace: str, host_if: str) -> None:
    # Deleting the namespace destroys the veth end inside it, and the pair with it.
    for args in (("netns", "del", namespace), ("link", "del", host_if)):
        subprocess.run(["ip", *args], capture_output=True, timeout=30, check=False)


def remove_orphans() -> None:
    """Remove the namespaces and veths of processes that died without removing them."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    for line in listed.stdout.splitlines():
        found = re.fullmatch(r"bh-(\d+)-(\w+)", line.split(" ", 1)[0])
        if found and not _alive(int(found[1])):
            _remove(found[0], f"bh{found[1]}h{found[2]}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_subnet(seed: int) -> ipaddress.IPv4Network:
    """A /30 of ``SUBNETS`` that overlaps no address or route the host has."""
    shown = run_ip("-4", "-o", "addr", "show") + run_ip("-4", "route", "show", "table", "all")
    taken = [
        ipaddress.IPv4Network(word, strict=False)
        for word in shown.split()
        if re.fullmatch(r"\d+\.\d+\.\d+\.\d+(/\d+)?", word)
    ]
    subnets = list(SUBNETS.subnets(new_prefix=30))
    for offset in range(len(subnets)):
        subnet = subnets[(seed + offset) % len(subnets)]
        if not any(subnet.overlaps(t) for t in taken):
            return subnet
    raise RuntimeError(f"no free /30 left in {SUBNETS}")


class Relay:
    """Forwards one port of the host's end of the link to the same port on loopback.

    ``cut()`` holds every byte in both directions and every new connection until
    ``heal()``; sockets stay open. ``shape()`` delays what goes toward the worker.
    ``postgres=True`` reads the PostgreSQL protocol as it passes, so ``arm`` can cut the
    link at one statement (``pgwire.CommitCut``).
    """

    def __init__(self, host: str, port: int, *, postgres: bool = False) -> None:
        self.host, self.port, self.postgres = host, port, postgres
        self._open = asyncio.Event()
        self._open.set()
        self.delay = self.jitter = 0.0
        self.armed: Trap | None = None
        self.statements: list[str] = []
        """Every distinct SQL text the clients sent (``postgres=True``)."""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    @property
    def is_cut(self) -> bool:
        return not self._open.is_set()

    def shape(self, delay: float, jitter: float) -> None:
        self.delay, self.jitter = delay, jitter

    def arm(self, trap: Trap) -> None:
        """Spring ``trap`` at the next statement it matches (``postgres=True`` only)."""
        assert self.postgres, "only a relay made with postgres=True reads statements"
        self.armed = trap

    def saw(self, sql: str) -> None:
        if sql not in self.statements:
            self.statements.append(sql)

    def run(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` beside the connections; ``close()`` cancels it."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self._writers.add(client_w)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._open.wait()  # a connection made during a cut waits, accepted
            server_r, server_w = await asyncio.open_connection(LOOPBACK, self.port)
        except (OSError, asyncio.CancelledError):
            client_w.transport.abort()
            self._writers.discard(client_w)
            return
        self._writers.add(server_w)
        watch = PgWatch(self, client_w, server_w) if self.postgres else None
        upward = self._pump(client_r, server_w, watch, toward_worker=False)
        downward = self._pump(server_r, client_w, watch, toward_worker=True)
        try:
            await asyncio.gather(upward, downward)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for writer in (client_w, server_w):
                writer.transport.abort()
                self._writers.discard(writer)
            self._tasks.discard(task)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        watch: PgWatch | None,
        *,
        toward_worker: bool,
    ) -> None:
        """Move bytes one way: read, hold during a cut, delay, write; in order."""
        through = (
            None if watch is None else watch.from_server if toward_worker else watch.from_client
        )
        due: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                when, data = await due.get()
                await asyncio.sleep(max(0.0, when - time.monotonic()))
                if watch is None or not watch.cutting:
                    await self._open.wait()
                if not data:
                    writer.close()
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        last = 0.0
        try:
            while True:
                if watch is None or not watch.cutting:  # a fired watch reads on, to the end
                    await self._open.wait()
                data = await reader.read(CHUNK)
                if data and through is not None:
                    data = through(data)
                    if not data:
                        continue
                delay = 0.0
                if toward_worker and self.delay:
                    delay = max(0.0, self.delay + random.uniform(-self.jitter, self.jitter))
                last = max(last, time.monotonic() + delay)
                due.put_nowait((last, data))
                if not data:
                    await sender
                    return
        finally:
            sender.cancel()


@dataclass
class Link:
    """A namespace joined to the host by a veth pair, with a relay per service port."""

    namespace: str
    host_if: str
    host_ip: str
    worker_ip: str
    relays: dict[int, Relay] = field(default_factory=dict)
    lossy: bool = False

    @property
    def prefix(self) -> list[str]:
        """The command prefix that runs a process inside the namespace."""
        return ["ip", "netns", "exec", self.namespace]

    def url(self, url: str) -> str:
        """``url`` (a service on loopback) as the worker in the namespace reaches it."""
        parts = urlsplit(url)
        assert parts.hostname in (LOOPBACK, "localhost"), f"{url} is not on loopback"
        assert parts.port in self.relays, f"no relay for port {parts.port}"
        netloc = parts.netloc.rsplit("@", 1)
        host = f"{self.host_ip}:{parts.port}"
        netloc[-1] = host
        return urlunsplit(parts._replace(netloc="@".join(netloc)))

    def cut(self) -> None:
        """The whole link down: nothing passes either way until ``heal()``."""
        run_ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        run_ip("link", "set", self.host_if, "up")

    def cut_services(self) -> None:
        """Every relay holds its bytes: nothing reaches any service, nothing comes back,
        and ``heal_services()`` lets it all through at once (no wait for TCP's backoff)."""
        for relay in self.relays.values():
            relay.cut()

    def heal_services(self) -> None:
        for relay in self.relays.values():
            relay.heal()

    def shape(self, *, delay: float = 0.0, jitter: float = 0.0, loss: float = 0.0) -> None:
        """Traffic toward the worker delayed by ``delay`` +/- ``jitter`` seconds and a
        fraction ``loss`` of its packets dropped (see the module's docstring)."""
        for relay in self.relays.values():
            relay.shape(delay, jitter)
        if not loss and not self.lossy:
            return
        # Made empty first, so that deleting it never fails, then made again if asked.
        rules = "table inet bhlink {}\ndelete table inet bhlink\n"
        if loss:
            rules += (
                "table inet bhlink {\n chain inbound {\n"
                "  type filter hook input priority 0; policy accept;\n"
                f"  numgen random mod 1000 < {round(loss * 1000)} counter drop\n }}\n}}\n"
            )
        run_ip("nft", "-f", "-", namespace=self.namespace, stdin=rules)
        self.lossy = bool(loss)

    def dropped(self) -> int:
        """Packets toward the worker that ``shape(loss=...)`` dropped so far."""
        shown = run_ip("nft", "list", "table", "inet", "bhlink", namespace=self.namespace)
        found = re.search(r"counter packets (\d+)", shown)
        return int(found[1]) if found else 0


async def _make_link(ports: Iterable[int], postgres_port: int | None) -> Link:
    n = next(_made)
    pid = os.getpid()
    namespace, host_if, peer_if = f"bh-{pid}-{n}", f"bh{pid}h{n}", f"bh{pid}n{n}"
    subnet = _free_subnet(pid * 7 + n)
    host_ip, worker_ip = (str(a) for a in subnet.hosts())
    link = Link(namespace, host_if, host_ip, worker_ip)
    try:
        run_ip("netns", "add", namespace)
        run_ip("link", "add", host_if, "type", "veth", "peer", "name", peer_if, "netns", namespace)
        run_ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        run_ip("link", "set", host_if, "up")
        for args in (
            ("addr", "add", f"{worker_ip}/30", "dev", peer_if),
            ("link", "set", peer_if, "up"),
            ("link", "set", "lo", "up"),
        ):
            run_ip("-n", namespace, *args)
        for port in ports:
            relay = Relay(host_ip, port, postgres=port == postgres_port)
            await relay.start()
            link.relays[port] = relay
    except BaseException:
        await _unmake_link(link)
        raise
    return link


async def _unmake_link(link: Link) -> None:
    for relay in link.relays.values():
        await relay.close()
    _remove(link.namespace, link.host_if)


@contextlib.asynccontextmanager
async def partitioned(
    ports: Iterable[int], *, postgres_port: int | None = None
) -> AsyncIterator[Link]:
    """A namespace with a relay for each of ``ports`` (``postgres_port``'s reads the
    PostgreSQL protocol); all of it removed on the way out, whatever happened."""
    link = await _make_link(ports, postgres_port)
    try:
        yield link
    finally:
        await _unmake_link(link)
