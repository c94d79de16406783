"""The store and Redis of a ``bench.roundtrip`` run, servers of its own: nobody else's work in
their counters.

On a shared machine other clients use the system PostgreSQL and Redis at the same time, so a
delta of their server-wide counters (transaction ids consumed, statements, commands, CPU) is
not ours. The run therefore starts, from the machine's binaries and on free ports:

* a PostgreSQL server (``initdb`` run as the ``postgres`` user, as ``tests/helpers/pg_pair.py``
  does) with ``pg_stat_statements`` preloaded, its settings copied from the system server
  where they shape a commit's cost (``fsync``, ``synchronous_commit``, ``shared_buffers``,
  WAL settings, ``autovacuum``; its data directory on the same disk), one database
  ``bench`` for the stores, and a role ``bench_observer`` for the harness's own polling, whose
  statements the count leaves out;
* a ``redis-server`` without persistence (no snapshots, no append-only file), as the
  system one runs here.

Both are stopped and deleted at the end, whatever happens. The system servers are never
touched (read-only: their settings are read once).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from bench._services import asyncpg_dsn
from tests.helpers.pg_pair import BIN, free_port

DATABASE = "bench"
OBSERVER = "bench_observer"
"""The role of the harness's polls (is it answered yet?): not counted as the store's work."""
COPIED = (
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "shared_buffers",
    "wal_buffers",
    "wal_level",
    "wal_sync_method",
    "max_wal_size",
    "checkpoint_timeout",
    "commit_delay",
    "work_mem",
    "autovacuum",
)
"""Settings of the system PostgreSQL the bench's own server takes over."""
PARENT = Path("/var/tmp")
"""Where the data directory goes: not a tmpfs, so an fsync costs what it costs the system's."""


@dataclass
class OwnServers:
    """The run's PostgreSQL and Redis: their URLs and the processes to account CPU to."""

    pg_port: int
    redis_port: int
    postmaster_pid: int
    redis_pid: int

    @property
    def database_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/{DATABASE}"

    @property
    def observer_url(self) -> str:
        return f"postgresql://{OBSERVER}@127.0.0.1:{self.pg_port}/{DATABASE}"

    @property
    def admin_dsn(self) -> str:
        """The ``postgres`` database, where the counters are read (not the stores' database,
        whose statement counts the readings would otherwise join)."""
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/postgres"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"


def _as_postgres(*argv: str) -> None:
    subprocess.run(
        ["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True, timeout=120
    )


async def system_settings(database_url: str) -> dict[str, str]:
    """The system server's values of ``COPIED`` (none where it cannot be reached)."""
    try:
        conn = await asyncpg.connect(asyncpg_dsn(database_url), timeout=5)
    except (OSError, asyncpg.PostgresError):
        return {}
    try:
        rows = await conn.fetch(
            "SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1::text[])",
            list(COPIED),
        )
    finally:
        await conn.close()
    # Memory settings come in units of 8kB pages (or kB, MB): name the unit so they mean it.
    units = {"8kB": "kB", "kB": "kB", "MB": "MB", "s": "s", "min": "min", "ms": "ms"}
    out = {}
    for row in rows:
        value, unit = row["setting"], row["unit"]
        if unit == "8kB":
            value = str(int(value) * 8)
        out[row["name"]] = f"'{value}{units.get(unit or '', '')}'"
    return out


def postmaster_pid(data: Path) -> int:
    return int((data / "postmaster.pid").read_text().split()[0])


@contextlib.contextmanager
def own_servers(settings: dict[str, str]) -> Iterator[OwnServers]:
    """Start the run's PostgreSQL (with ``settings`` on top of the bench's own) and Redis;
    stop and delete both on the way out."""
    if not (BIN / "initdb").exists() or shutil.which("runuser") is None:
        raise RuntimeError(f"no {BIN / 'initdb'} or no runuser: run with --no-counts")
    if shutil.which("redis-server") is None:
        raise RuntimeError("no redis-server: run with --no-counts")
    root = Path(tempfile.mkdtemp(prefix="brainhands-bench-pg-", dir=PARENT))
    data = root / "data"
    redis: subprocess.Popen[bytes] | None = None
    started = False
    try:
        shutil.chown(root, "postgres")
        pg_port, redis_port = free_port(), free_port()
        _as_postgres(str(BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
        lines = {
            "port": str(pg_port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{root}'",
            "max_connections": "200",
            "shared_preload_libraries": "'pg_stat_statements'",
            "pg_stat_statements.max": "10000",
            "pg_stat_statements.track": "top",
            **settings,
        }
        with (data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{k} = {v}\n" for k, v in lines.items())
        log = str(root / "postgres.log")
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-l", log, "-w", "start")
        started = True
        psql = [str(BIN / "psql"), "-h", "127.0.0.1", "-p", str(pg_port), "-U", "postgres"]
        _as_postgres(*psql, "-c", f"CREATE DATABASE {DATABASE}")
        _as_postgres(*psql, "-c", f"CREATE ROLE {OBSERVER} LOGIN SUPERUSER")
        _as_postgres(*psql, "-d", "postgres", "-c", "CREATE EXTENSION pg_stat_statements")
        argv = ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--logfile", str(root / "redis.log")]
        redis = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for_port(redis_port, redis)
        yield OwnServers(pg_port, redis_port, postmaster_pid(data), redis.pid)
    finally:
        if redis is not None:
            redis.terminate()
            try:
                redis.wait(10)
            except subprocess.TimeoutExpired:
                redis.kill()
                redis.wait()
        if started:
            with contextlib.suppress(subprocess.SubprocessError):
                _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], within: float = 20) -> None:
    deadline = time.monotonic() + within
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"redis-server on port {port} did not start")
        time.sleep(0.05)
