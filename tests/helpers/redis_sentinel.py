"""A Redis primary, its replica and three Sentinels on loopback, made for one test from the
machine's ``redis-server`` and removed after it.

The Sentinels watch the primary under ``MASTER``; when it dies they promote the replica,
which may lack the primary's last writes (replication is asynchronous). Where
``redis-server`` is missing, the test is skipped saying so (under ``CI=true`` it fails).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis

from tests.helpers.pg_pair import free_port
from tests.helpers.services import unavailable

MASTER = "brainhands"
SENTINELS = 3
DOWN_AFTER_MS = 1000


@dataclass
class SentinelGroup:
    root: Path
    primary_port: int = field(default_factory=free_port)
    replica_port: int = field(default_factory=free_port)
    sentinel_ports: list[int] = field(
        default_factory=lambda: [free_port() for _ in range(SENTINELS)]
    )
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def sentinels(self) -> str:
        """The Sentinels' addresses as the settings take them (``host:port,...``)."""
        return ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)

    def _server(self, name: str, port: int, *extra: str) -> None:
        self.procs[name] = subprocess.Popen(
            [
                "redis-server",
                *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
                *("--dir", str(self.root), "--logfile", str(self.root / f"{name}.log")),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
        )
        wait_for_ping(port)

    def start(self) -> None:
        self._server("primary", self.primary_port)
        self._server(
            "replica", self.replica_port, "--replicaof", "127.0.0.1", str(self.primary_port)
        )
        _wait_for_link(self.replica_port)
        for n, port in enumerate(self.sentinel_ports):
            conf = self.root / f"sentinel-{n}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER} 5000\n"
                f"sentinel parallel-syncs {MASTER} 1\n"
            )
            self.procs[f"sentinel-{n}"] = subprocess.Popen(
                [
                    "redis-server",
                    str(conf),
                    "--sentinel",
                    "--logfile",
                    str(self.root / f"s{n}.log"),
                ],
                stdout=subprocess.DEVNULL,
            )
            wait_for_ping(port)
        self.wait_for_primary(self.primary_port)

    def primary(self) -> int | None:
        """The port the Sentinels name as the primary's now."""
        for port in self.sentinel_ports:
            with contextlib.suppress(Exception):
                answer = Redis(port=port, socket_timeout=1).execute_command(
                    "SENTINEL", "get-master-addr-by-name", MASTER
                )
                if answer:
                    return int(answer[1])
        return None

    def wait_for_primary(self, port: int, within: float = 30.0) -> None:
        deadline = time.monotonic() + within
        while self.primary() != port:
            if time.monotonic() > deadline:
                raise AssertionError(f"the Sentinels did not name port {port} within {within}s")
            time.sleep(0.1)

    def kill_primary(self) -> None:
        """The primary dies at once; the Sentinels notice and promote the replica."""
        proc = self.procs["primary"]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def wait_for_ping(port: int, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while True:
        with contextlib.suppress(Exception):
            if Redis(port=port, socket_timeout=0.5).ping():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"redis-server on port {port} did not answer within {within}s")
        time.sleep(0.05)


def _wait_for_link(port: int, within: float = 10.0) -> None:
    """Until the replica on ``port`` has synchronized with its primary."""
    deadline = time.monotonic() + within
    while Redis(port=port).info("replication").get("master_link_status") != "up":
        if time.monotonic() > deadline:
            raise AssertionError(f"the replica on port {port} did not sync within {within}s")
        time.sleep(0.05)


@contextlib.contextmanager
def sentinel_group() -> Iterator[SentinelGroup]:
    """A started primary, replica and Sentinels, stopped and deleted on the way out."""
    if shutil.which("redis-server") is None:
        unavailable("Redis with Sentinel cannot be started here: no redis-server on the PATH")
    root = Path(tempfile.mkdtemp(prefix="brainhands-sentinel-"))
    group = SentinelGroup(root)
    try:
        group.start()
        yield group
    finally:
        group.stop()
        shutil.rmtree(root, ignore_errors=True)
