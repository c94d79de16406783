"""Part 5 of ``bench.roundtrip``: DBOS Transact's no-op workflows, where installed.

A DBOS workflow runs one no-op step per tool call, on the same PostgreSQL as brainhands: a
database of the run's own (``brainhands_bench_dbos_<tag>``) holds DBOS's system tables; it
is created here and dropped at the end, even when the run fails. Measured: serial one-step
workflows (p50), one-step workflows started at once directly and through a DBOS ``Queue``
(workflows/s), and workflows of ``FANOUT`` steps started at once both ways (step calls/s).

DBOS runs in a process of its own (``python -m bench.roundtrip_dbos_app``), which writes its
numbers as JSON to a file. DBOS is a process-wide singleton: launching it in the bench
process would install DBOS's thread pool as the event loop's default executor (it does so on
every ``*_async`` call), leave its registry of decorated functions and its background threads
(queue workers, notification listener) in the process, and reconfigure logging; a child
process also keeps DBOS off the CPU while the other parts run, and ``kill`` ends it whole.
It is one process doing both sides, as a DBOS application is (the library in the app's
process): the brainhands throughput rows have four processes, Celery's three.

When the bench runs on servers of its own (``args.servers``), the app counts its serial,
burst and fan-out parts on them as brainhands' are counted (``bench/roundtrip_counts.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bench._services import asyncpg_dsn, clean_up, log_tail, spawn, terminate
from bench.roundtrip_agents import FANOUT

PARTS = 5
"""The parts the app runs (serial, two bursts, two fan-out bursts): each may take a timeout."""


@dataclass
class DbosResult:
    version: str
    samples: list[float]
    """Seconds each serial one-step workflow took (start to result, on the client)."""
    burst: int
    direct_seconds: float
    queue_seconds: float
    queue_polling_sec: float
    """How often the queue's worker thread looks for workflows to dequeue."""
    fanout: int
    """Workflows of ``fanout_calls`` steps started at once (0: not measured)."""
    fanout_calls: int
    fanout_direct_seconds: float = 0.0
    fanout_queue_seconds: float = 0.0
    counts: dict[str, dict[str, float]] | None = None
    """Per counted part (``serial``, ``burst``, ``fanout``): what it asked of the store
    (``Counts``' fields), ``app_cpu`` (the app's CPU seconds) and ``n`` (its tool calls)."""

    @property
    def direct_rate(self) -> float:
        """One-step workflows (tool calls) per second, started directly."""
        return self.burst / self.direct_seconds

    @property
    def queue_rate(self) -> float:
        return self.burst / self.queue_seconds

    @property
    def best_rate(self) -> float:
        return max(self.direct_rate, self.queue_rate)

    @property
    def fanout_direct_rate(self) -> float:
        """Step calls per second of the fan-out workflows, started directly (0: not run)."""
        return self.fanout * self.fanout_calls / self.fanout_direct_seconds if self.fanout else 0.0

    @property
    def fanout_queue_rate(self) -> float:
        return self.fanout * self.fanout_calls / self.fanout_queue_seconds if self.fanout else 0.0

    @property
    def fanout_best_rate(self) -> float:
        return max(self.fanout_direct_rate, self.fanout_queue_rate)


def dbos_version() -> str | None:
    """The installed DBOS Transact's version, or None where it is not installed."""
    try:
        return metadata.version("dbos")
    except metadata.PackageNotFoundError:
        return None


def database_url(database_url: str, database: str) -> str:
    """``database_url`` (any form brainhands takes) pointing at ``database`` instead."""
    return urlunsplit(urlsplit(asyncpg_dsn(database_url))._replace(path=f"/{database}"))


async def create_database(database_url: str, database: str) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        await conn.execute(f'CREATE DATABASE "{database}"')
    finally:
        await conn.close()


async def drop_database(database_url: str, database: str) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        # FORCE: a child killed mid-run may leave connections the server has not yet reaped.
        await conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    finally:
        await conn.close()


def start_dbos_app(
    args: argparse.Namespace, system_database_url: str, result: Path, log: Path
) -> subprocess.Popen[bytes]:
    argv = ["bench.roundtrip_dbos_app", "--system-database-url", system_database_url]
    argv += ["--result", str(result), "--serial", str(args.dbos_serial)]
    argv += ["--burst", str(args.dbos_burst), "--fanout", str(args.fanout_burst)]
    argv += ["--fanout-calls", str(FANOUT), "--warmup", str(args.warmup)]
    argv += ["--timeout", str(args.timeout)]
    servers = args.servers
    if servers is not None:
        database = urlsplit(system_database_url).path.lstrip("/")
        argv += ["--meter-dsn", servers.admin_dsn, "--database", database]
        argv += ["--postmaster-pid", str(servers.postmaster_pid)]
        argv += ["--observer-url", database_url(servers.observer_url, database)]
    return spawn(argv, dict(os.environ), log)


async def bench_dbos(args: argparse.Namespace, tag: str, logs: Path) -> DbosResult | None:
    version = dbos_version()
    if version is None:
        print(
            "5. DBOS is not installed, so its rows are skipped: .venv/bin/pip install 'dbos>=3,<4'",
            flush=True,
        )
        return None
    database = f"brainhands_bench_dbos_{tag}"
    fanout = f", then {args.fanout_burst} of {FANOUT} steps each" if args.fanout_burst else ""
    print(
        f"5. DBOS {version}: one process, system database {database}; {args.dbos_serial} serial "
        f"one-step workflows, then {args.dbos_burst} at once directly and on a queue{fanout}",
        flush=True,
    )
    log = logs / f"{database}.log"
    result = logs / f"{database}.json"
    await create_database(args.database_url, database)
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = start_dbos_app(args, database_url(args.database_url, database), result, log)
        limit = PARTS * args.timeout + 60
        code = await asyncio.wait_for(asyncio.to_thread(proc.wait), timeout=limit)
        if code != 0:
            raise RuntimeError(f"the DBOS app exited ({code}); its log is above")
        return DbosResult(version=version, **json.loads(result.read_text()))
    except BaseException:
        print(f"DBOS app log:\n{log_tail(log)}", file=sys.stderr)
        raise
    finally:
        if proc is not None:
            terminate([proc])
        drop = functools.partial(drop_database, args.database_url, database)
        await clean_up(("the DBOS system database", drop))
