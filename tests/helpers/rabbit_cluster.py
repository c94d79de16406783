"""A three-node RabbitMQ cluster on loopback, made for one test module (or bench run) from the
machine's RabbitMQ, beside the system node, and removed after it.

Each node has its own name (``bh1@localhost`` ...), AMQP and distribution ports, config,
data and log directories under one temporary root, and no plugins; the three share an Erlang
cookie there and are joined into one cluster. They run as this process's user with ``HOME``
at the root (for the cookie), and in process groups of their own, so a kill reaches exactly
them. The system node, its config and its data are never touched.

``url`` names the three nodes in the multi-node form of ``BRAINHANDS_RABBITMQ_URL``. Quorum
queues declared while all three are up have a member on each.

Where RabbitMQ is not installed the test is skipped saying so (under ``CI=true`` it fails).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.pg_pair import free_port
from tests.helpers.services import unavailable

SBIN = Path(os.environ.get("BRAINHANDS_TEST_RABBITMQ_BIN", "/usr/lib/rabbitmq/bin"))
NODES = ("bh1", "bh2", "bh3")
BOOT_TIMEOUT = 120


@dataclass
class RabbitNode:
    """One node: its name, ports, and the process group of its server while it runs."""

    name: str
    port: int
    dist_port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def node(self) -> str:
        return f"{self.name}@localhost"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"


@dataclass
class RabbitCluster:
    root: Path
    nodes: list[RabbitNode] = field(default_factory=list)

    @property
    def url(self) -> str:
        """Every node, as ``BRAINHANDS_RABBITMQ_URL`` names a cluster."""
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
        return f"amqp://guest:guest@{hosts}/"

    def node(self, name: str) -> RabbitNode:
        return next(n for n in self.nodes if n.name == name or n.node == name)

    def _env(self, node: RabbitNode | None = None) -> dict[str, str]:
        env = {
            **os.environ,
            "HOME": str(self.root),  # the shared .erlang.cookie
            # Not the system's rabbitmq-env.conf, which names the system node.
            "RABBITMQ_CONF_ENV_FILE": str(self.root / "rabbitmq-env.conf"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        if node is not None:
            env |= {
                "RABBITMQ_NODENAME": node.node,
                "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
                "RABBITMQ_NODE_PORT": str(node.port),
                "RABBITMQ_DIST_PORT": str(node.dist_port),
                "RABBITMQ_CONFIG_FILE": str(self.root / f"{node.name}.conf"),
                "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.root / "advanced.config"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.root / "enabled_plugins"),
                "RABBITMQ_MNESIA_BASE": str(self.root / "mnesia"),
                "RABBITMQ_LOG_BASE": str(self.root / "log"),
                "RABBITMQ_PID_FILE": str(self._pid_file(node)),
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface "
                "{127,0,0,1}",
            }
        return env

    def _pid_file(self, node: RabbitNode) -> Path:
        return self.root / f"{node.name}.pid"

    def ctl(self, node: str, *args: str, tool: str = "rabbitmqctl", check: bool = True) -> str:
        """Run a RabbitMQ CLI command against ``node``; its output."""
        done = subprocess.run(
            [str(SBIN / tool), "-n", self.node(node).node, *args],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=BOOT_TIMEOUT,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} on {node}: {done.stderr}{done.stdout}")
        return done.stdout

    def launch(self, name: str) -> None:
        """Start a node's server (not waiting for it: see ``wait``)."""
        node = self.node(name)
        self._pid_file(node).unlink(missing_ok=True)
        with (self.root / "log" / f"{node.name}.out").open("ab") as out:
            node.proc = subprocess.Popen(
                [str(SBIN / "rabbitmq-server")],
                env=self._env(node),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait(self, name: str) -> None:
        """Wait until the node's broker runs (and has rejoined its cluster, if it had one)."""
        node = self.node(name)
        self.ctl(name, "wait", str(self._pid_file(node)), "--timeout", str(BOOT_TIMEOUT))

    def start(self, name: str) -> None:
        self.launch(name)
        self.wait(name)

    def kill(self, name: str) -> None:
        """SIGKILL the node's Erlang VM, as a machine's death would: no goodbye to its peers."""
        node = self.node(name)
        assert node.proc is not None and node.proc.poll() is None, f"{name} is not running"
        os.kill(int(self._pid_file(node).read_text().strip()), signal.SIGKILL)
        node.proc.wait(timeout=30)
        self._stop_group(node)

    def revive(self) -> None:
        """Start every node that is not running (a killed one rejoins its cluster)."""
        down = [n.name for n in self.nodes if n.proc is None or n.proc.poll() is not None]
        for name in down:
            self._stop_group(self.node(name))
            self.launch(name)
        for name in down:
            self.wait(name)

    def _stop_group(self, node: RabbitNode) -> None:
        if node.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.proc.pid, signal.SIGKILL)
        node.proc.wait(timeout=30)
        node.proc = None

    def queue_column(self, via: str, column: str) -> dict[str, str]:
        """``list_queues name <column>`` as asked of node ``via``: queue name to value."""
        listing = self.ctl(via, "-q", "--no-table-headers", "list_queues", "name", column)
        rows = (line.split("\t", 1) for line in listing.splitlines() if "\t" in line)
        return {name.strip(): value.strip() for name, value in rows}

    def join(self) -> None:
        """Join every node to the first, one by one (``join_cluster``)."""
        first = self.nodes[0].name
        for node in self.nodes[1:]:
            self.ctl(node.name, "stop_app")
            self.ctl(node.name, "join_cluster", self.node(first).node)
            self.ctl(node.name, "start_app")
        self.ctl(first, "await_startup")

    def stop(self) -> None:
        for node in self.nodes:
            self._stop_group(node)


def _prepare(root: Path) -> RabbitCluster:
    cluster = RabbitCluster(root)
    (root / "log").mkdir()
    (root / "mnesia").mkdir()
    cookie = root / ".erlang.cookie"
    cookie.write_text(secrets.token_hex(16))
    cookie.chmod(0o400)
    (root / "rabbitmq-env.conf").write_text("")
    (root / "enabled_plugins").write_text("[].\n")
    for name in NODES:
        node = RabbitNode(name, free_port(), free_port())
        (root / f"{name}.conf").write_text(
            f"listeners.tcp.local = 127.0.0.1:{node.port}\n"
            "log.file.level = info\n"
            "log.console = false\n"
        )
        cluster.nodes.append(node)
    return cluster


@contextlib.contextmanager
def rabbit_cluster() -> Iterator[RabbitCluster]:
    """Three started nodes joined into one cluster; killed and deleted on the way out.

    Prints how long the cluster took to form.
    """
    if not (SBIN / "rabbitmq-server").exists():
        unavailable(
            f"a RabbitMQ cluster cannot be made here: no {SBIN / 'rabbitmq-server'} "
            "(install rabbitmq-server, or set BRAINHANDS_TEST_RABBITMQ_BIN)"
        )
    root = Path(tempfile.mkdtemp(prefix="brainhands-rabbit-cluster-"))
    cluster = _prepare(root)
    try:
        began = time.monotonic()
        for node in cluster.nodes:
            cluster.launch(node.name)
        for node in cluster.nodes:
            cluster.wait(node.name)
        cluster.join()
        print(f"rabbit cluster: three nodes joined in {time.monotonic() - began:.1f}s")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
