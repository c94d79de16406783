"""A PostgreSQL primary and its synchronous streaming standby on loopback, made for one test
(or bench run) from the machine's PostgreSQL binaries, and removed after it.

The primary commits only once the standby has the commit's WAL (``synchronous_commit = on``,
``synchronous_standby_names``), so a commit acknowledged to a client survives the primary's
death once the standby is promoted. With ``synchronous=False`` the standby is asynchronous:
the primary does not wait for it, so a standby stopped for a while (``stop_standby``) and
promoted after the primary died lacks commits the primary acknowledged -- the store goes
back in time. ``url`` names both servers in libpq's multi-host form
with ``target_session_attrs=read-write``: a client connects to whichever one takes writes.

Where the binaries are missing, or this process cannot run them as the ``postgres`` user,
the test is skipped saying so (under ``CI=true`` it fails instead).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.services import unavailable

BIN = Path(os.environ.get("BRAINHANDS_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
STANDBY_NAME = "standby"
CANNOT = "a PostgreSQL primary and standby cannot be made here: "


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresPair:
    root: Path
    primary_port: int
    standby_port: int
    synchronous: bool = True

    @property
    def url(self) -> str:
        """Both servers, the writable one chosen at every connect."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}"
            "/test?target_session_attrs=read-write"
        )

    def _as_postgres(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["runuser", "-u", "postgres", "--", *argv],
            check=check,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def _pg_ctl(self, node: str, *args: str, check: bool = True) -> None:
        self._as_postgres(
            str(BIN / "pg_ctl"),
            "-D",
            str(self.root / node),
            "-l",
            str(self.root / f"{node}.log"),
            "-w",
            *args,
            check=check,
        )

    def start(self) -> None:
        self._as_postgres(str(BIN / "initdb"), "-D", str(self.root / "primary"), "-A", "trust")
        self._configure("primary", self.primary_port)
        with (self.root / "primary" / "pg_hba.conf").open("a") as hba:
            hba.write("host replication postgres 127.0.0.1/32 trust\n")
        self._pg_ctl("primary", "start")
        self._as_postgres(
            str(BIN / "pg_basebackup"),
            *("-h", "127.0.0.1", "-p", str(self.primary_port), "-U", "postgres"),
            *("-D", str(self.root / "standby"), "-R", "-X", "stream"),
        )
        self._configure("standby", self.standby_port)
        with (self.root / "standby" / "postgresql.auto.conf").open("a") as auto:
            auto.write(
                f"primary_conninfo = 'host=127.0.0.1 port={self.primary_port} user=postgres "
                f"application_name={STANDBY_NAME}'\n"
            )
        self._pg_ctl("standby", "start")
        self._as_postgres(
            str(BIN / "psql"),
            *("-h", "127.0.0.1", "-p", str(self.primary_port), "-U", "postgres"),
            *("-c", "CREATE DATABASE test"),
        )

    def _configure(self, node: str, port: int) -> None:
        # Only the primary waits for a synchronous standby: the standby (whose copy of the
        # primary's settings says otherwise), once promoted, has none of its own -- as a
        # failover manager would leave it -- and must not wait for one.
        waits = STANDBY_NAME if node == "primary" and self.synchronous else ""
        with (self.root / node / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {port}\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\n"
                "wal_level = replica\n"
                "max_wal_senders = 5\n"
                "max_connections = 200\n"
                f"synchronous_standby_names = '{waits}'\n"
                "synchronous_commit = on\n"
                "fsync = off\n"  # a test's data: durability comes from the standby here
            )

    def kill_primary(self) -> None:
        """The primary dies at once, as a machine would: no checkpoint, no goodbye."""
        self._pg_ctl("primary", "stop", "-m", "immediate")

    def promote_standby(self) -> None:
        """The standby takes writes from now on (what a failover manager would do)."""
        self._pg_ctl("standby", "promote")

    def _query(self, port: int, sql: str) -> str:
        done = self._as_postgres(
            str(BIN / "psql"),
            *("-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", "test"),
            *("-At", "-c", sql),
        )
        return done.stdout.strip()

    def standby_caught_up(self) -> bool:
        """Whether the standby has replayed everything the primary has written so far."""
        lsn = self._query(self.primary_port, "SELECT pg_current_wal_lsn()")
        replayed = f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"
        return self._query(self.standby_port, replayed) == "t"

    def stop_standby(self) -> None:
        """The standby stops receiving: from now on it lacks what the primary commits."""
        self._pg_ctl("standby", "stop", "-m", "immediate")

    def start_standby(self) -> None:
        """The standby runs again, with what it had (the primary it follows may be gone)."""
        self._pg_ctl("standby", "start")

    def stop(self) -> None:
        for node in ("primary", "standby"):
            if (self.root / node / "postmaster.pid").exists():
                self._pg_ctl(node, "stop", "-m", "immediate", check=False)


@contextlib.contextmanager
def postgres_pair(*, synchronous: bool = True) -> Iterator[PostgresPair]:
    """A started primary and its standby (synchronous unless told), stopped and deleted on
    the way out."""
    if not (BIN / "initdb").exists() or shutil.which("runuser") is None:
        unavailable(f"{CANNOT}no {BIN / 'initdb'} or no runuser (set BRAINHANDS_TEST_PG_BIN)")
    root = Path(tempfile.mkdtemp(prefix="brainhands-pg-pair-"))
    try:
        shutil.chown(root, "postgres")
    except (LookupError, PermissionError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        unavailable(f"{CANNOT}the postgres user cannot own {root}: {exc}")
    pair = PostgresPair(root, free_port(), free_port(), synchronous)
    try:
        pair.start()
        yield pair
    finally:
        pair.stop()
        shutil.rmtree(root, ignore_errors=True)
