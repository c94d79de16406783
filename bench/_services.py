"""Service and process helpers the benchmarks share.

* the service URL options (``--database-url``, ``--rabbitmq-url``, ``--redis-url``, with
  ``$BRAINHANDS_BENCH_*_URL`` defaults) and the parser they go on;
* the clean-up of what a run leaves behind: a namespace's queues and exchanges, its Redis
  keys and the PostgreSQL schemas, each part even when another fails;
* the ``python -m brainhands`` worker processes a run starts (``Workers``), their logs,
  their CPU time and their environment; ``stop_on_sigterm`` for the parent;
* another commit's tree (``extracted``) for workers to run its code (``code_env``), and
  where that code really comes from (``module_origins``), to compare builds in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika
import asyncpg

from brainhands.shared.config import normalize_database_url
from brainhands.shared.lease import connect_redis
from brainhands.shared.store import Store
from brainhands.shared.topology import Topology

ROOT = Path(__file__).resolve().parents[1]
"""The project's root: the working directory of every process a benchmark starts."""

SERVICES = {
    "postgres": ("--database-url", "PostgreSQL", "postgresql://postgres@127.0.0.1:5432/test"),
    "rabbitmq": ("--rabbitmq-url", "RabbitMQ", "amqp://guest:guest@127.0.0.1:5672/"),
    "redis": ("--redis-url", "Redis", "redis://127.0.0.1:6379/0"),
}
"""Service -> its option, its name in the help, its URL when ``$BRAINHANDS_BENCH_*`` is unset."""


# Options ------------------------------------------------------------------------------------


def new_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser described by the first paragraph of a benchmark's docstring."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)


def add_service_urls(parser: argparse.ArgumentParser, *services: str) -> None:
    """Add the URL option of each of ``services`` (keys of ``SERVICES``), defaulting to
    ``$BRAINHANDS_BENCH_<SERVICE>_URL``."""
    for service in services:
        option, name, default = SERVICES[service]
        env = f"BRAINHANDS_BENCH_{service.upper()}_URL"
        parser.add_argument(
            option,
            default=os.environ.get(env, default),
            help=f"{name} to use (default: ${env} or %(default)s)",
        )


def run_names(bench: str) -> tuple[str, str, str]:
    """A fresh tag for a run of ``bench``, and the namespace (``bench<bench>_<tag>``) and
    PostgreSQL schema (``bench_<bench>_<tag>``) named after it."""
    tag = uuid.uuid4().hex[:10]
    return tag, f"bench{bench}_{tag}", f"bench_{bench}_{tag}"


def asyncpg_dsn(database_url: str) -> str:
    """A PostgreSQL URL in the plain ``postgresql://`` form asyncpg takes."""
    return "postgresql://" + normalize_database_url(database_url).split("://", 1)[1]


async def open_store(database_url: str, db_schema: str) -> Store:
    """The store in ``db_schema`` (created if need be, and migrated) at ``database_url``."""
    return await Store.open(normalize_database_url(database_url), upgrade=True, db_schema=db_schema)


# Clean-up -----------------------------------------------------------------------------------


async def delete_amqp(rabbitmq_url: str, queues: Iterable[str], exchanges: Iterable[str]) -> None:
    connection = await aio_pika.connect(rabbitmq_url)
    async with connection:
        channel = await connection.channel()
        for queue in queues:
            await channel.queue_delete(queue)
        for exchange in exchanges:
            await channel.exchange_delete(exchange)


async def delete_redis_keys(redis_url: str, prefix: str) -> None:
    """Delete every key that starts with ``prefix``."""
    client = connect_redis(redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
        for start in range(0, len(keys), 1000):
            await client.delete(*keys[start : start + 1000])
    finally:
        await client.aclose()


async def drop_schemas(database_url: str, *schemas: str) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        for schema in schemas:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


async def clean_up(*steps: tuple[str, Callable[[], Awaitable[None]]]) -> None:
    """Run every ``(what, step)``, even when an earlier one fails; say on stderr which did."""
    for what, step in steps:
        try:
            await step()
        except Exception as exc:
            print(f"cleanup of {what} failed: {exc!r}", file=sys.stderr)


async def clean_namespace(
    args: argparse.Namespace, namespace: str, queues: Iterable[str], schemas: Sequence[str]
) -> None:
    """Delete what a run left: ``queues`` and the namespace's parking queue and exchanges
    (``args.rabbitmq_url``), its Redis keys (``args.redis_url``, where the benchmark has
    one) and ``schemas`` (``args.database_url``); each part even when another fails."""
    topology = Topology(namespace)
    queues = [*queues, topology.parking_queue]
    exchanges = [topology.exchange, topology.dead_letter_exchange]
    steps = [("RabbitMQ", functools.partial(delete_amqp, args.rabbitmq_url, queues, exchanges))]
    redis_url = getattr(args, "redis_url", None)
    if redis_url is not None:
        steps.append(("Redis", functools.partial(delete_redis_keys, redis_url, f"{namespace}:")))
    steps.append(("PostgreSQL", functools.partial(drop_schemas, args.database_url, *schemas)))
    await clean_up(*steps)


def stop_on_sigterm() -> None:
    """Make SIGTERM cancel the run like Ctrl-C does, so the clean-up still runs."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)


# Processes ----------------------------------------------------------------------------------


def spawn(
    argv: Sequence[str],
    env: dict[str, str],
    log: Path,
    *,
    new_session: bool = False,
    cwd: Path = ROOT,
) -> subprocess.Popen[bytes]:
    """``python -m <argv>`` in ``cwd`` (the project's root by default: the code it runs),
    its output going to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *argv],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=new_session,
        )


def terminate(procs: Iterable[subprocess.Popen[bytes]], grace: float = 15) -> None:
    """SIGTERM every process (they drain), and kill the ones still there after ``grace`` s."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used so far; None off Linux."""
    times = process_times(pid)
    return None if times is None else sum(times)


def process_times(pid: int) -> tuple[float, float] | None:
    """CPU seconds process ``pid`` has used so far in user mode and in the kernel (system
    calls: on loopback, a send also runs the receiver's TCP processing); None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


SERVICE_PROCESSES = {"PostgreSQL": "postgres", "RabbitMQ": "beam.smp", "Redis": "redis-server"}
"""The services, by the name their processes run under."""


def service_times() -> dict[str, float]:
    """CPU seconds (user + system) the processes of each service on this machine have used
    so far: all of its processes alive now (a PostgreSQL backend that has exited is not
    counted); a service running elsewhere is left out."""
    used: dict[str, float] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue
        service = next((s for s, comm in SERVICE_PROCESSES.items() if name == comm), None)
        times = process_times(int(entry.name)) if service else None
        if service and times:
            used[service] = used.get(service, 0.0) + sum(times)
    return used


def log_events(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a process's log, one a line (other lines skipped)."""
    events = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict):
                events.append(event)
    return events


def log_tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def worker_env(
    args: argparse.Namespace, namespace: str, db_schema: str, concurrency: int = 0, **extra: str
) -> dict[str, str]:
    """The environment of a Brain or Hands process: the services of ``args``, the run's
    schema and namespace, a short shutdown grace, ``concurrency`` if not 0, then ``extra``."""
    env = {
        **os.environ,
        "BRAINHANDS_DATABASE_URL": normalize_database_url(args.database_url),
        "BRAINHANDS_DATABASE_SCHEMA": db_schema,
        "BRAINHANDS_RABBITMQ_URL": args.rabbitmq_url,
        "BRAINHANDS_REDIS_URL": args.redis_url,
        "BRAINHANDS_NAMESPACE": namespace,
        "BRAINHANDS_SHUTDOWN_GRACE": "5",
        **extra,
    }
    if concurrency:
        env["BRAINHANDS_CONCURRENCY"] = str(concurrency)
    return env


@dataclass
class Worker:
    role: str
    """``brain`` or ``hands``: the ``brainhands`` command it runs."""
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class Workers:
    """The ``python -m brainhands`` processes of a run, each logging to a file of its own
    in ``logs``; all stopped on leaving a ``with`` block."""

    env: dict[str, str]
    logs: Path
    procs: list[Worker] = field(default_factory=list)
    code: Path = ROOT
    """The tree whose code the processes run (another checkout, to compare builds)."""
    module: str = "brainhands"
    """What ``python -m`` runs: brainhands' command, or a module that wraps it (the same
    arguments), such as ``bench.roundtrip_counted``."""

    def __post_init__(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *argv: str, log: str | None = None, code: Path | None = None) -> Worker:
        """Start ``brainhands <argv>`` (``argv[0]``: its role) from the tree ``code`` (default:
        the run's); it logs to ``log`` in the logs directory (default: ``<role>-<n>.log``)."""
        role = argv[0]
        n = len(self.paths(role))
        path = self.logs / (log or f"{role}-{n}.log")
        tree = code or self.code
        env = code_env(self.env, tree)
        worker = Worker(role, spawn([self.module, *argv], env, path, cwd=tree), path)
        self.procs.append(worker)
        return worker

    async def wait_consuming(self, within: float = 60) -> None:
        """Wait until every process logged that it consumes."""
        deadline = time.monotonic() + within
        for w in self.procs:
            while not any(e.get("event") == "consuming" for e in log_events(w.log)):
                if w.proc.poll() is not None or time.monotonic() > deadline:
                    tail = log_tail(w.log)
                    raise RuntimeError(f"{w.role} {w.proc.pid} did not start consuming:\n{tail}")
                await asyncio.sleep(0.05)

    def check_alive(self) -> None:
        for w in self.procs:
            if w.proc.poll() is not None:
                tail = log_tail(w.log)
                raise RuntimeError(f"{w.role} {w.proc.pid} exited ({w.proc.returncode}):\n{tail}")

    def paths(self, role: str) -> list[Path]:
        return [w.log for w in self.procs if w.role == role]

    def cpu(self) -> dict[str, float]:
        """CPU seconds (user + system) each role's processes have used so far (Linux), and
        under ``"<role> kernel"`` the system part of it; and the services' (``service_times``)."""
        used: dict[str, float] = service_times()
        for w in self.procs:
            user, system = process_times(w.proc.pid) or (0.0, 0.0)
            used[w.role] = used.get(w.role, 0.0) + user + system
            kernel = f"{w.role} kernel"
            used[kernel] = used.get(kernel, 0.0) + system
        return used

    def stop(self) -> None:
        terminate(w.proc for w in self.procs)


@contextlib.contextmanager
def extracted(ref: str) -> Iterator[Path]:
    """The tree of commit ``ref``, in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="brainhands-bench-code-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp)


PACKAGE_FOLDERS = ("shared", "brain", "hands", "src", "examples")
"""The workspace's distributions: each folder holds a portion of the ``brainhands`` package."""


def code_env(env: dict[str, str], tree: Path) -> dict[str, str]:
    """``env`` for a process started in ``tree`` to import that tree's ``brainhands``.

    Its working directory puts its ``bench`` (and, in a tree from before the distributions,
    its ``brainhands/``) first on the path; but the distributions' folders of this checkout
    are on the path of every process (the editable install), so another tree's go in front
    on ``PYTHONPATH``. Its ``brainhands/__init__`` then extends the package with those folders
    first, this checkout's after them."""
    if tree == ROOT:
        return env
    folders = [str(tree / f) for f in PACKAGE_FOLDERS if (tree / f / "brainhands").is_dir()]
    inherited = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    return {**env, "PYTHONPATH": os.pathsep.join([*folders, *inherited])} if folders else env


FIND_ORIGINS = (
    "import importlib.util, json, sys; "
    "print(json.dumps({m: importlib.util.find_spec(m).origin for m in sys.argv[1:]}))"
)


def module_origins(env: dict[str, str], tree: Path, modules: Sequence[str]) -> dict[str, str]:
    """The file each of ``modules`` comes from in a process ``Workers`` starts from ``tree``
    with ``env`` (the same interpreter, directory and path; parents imported, not the modules),
    to check which code a comparison really runs."""
    found = subprocess.run(
        [sys.executable, "-c", FIND_ORIGINS, *modules],
        cwd=tree,
        env=code_env(env, tree),
        capture_output=True,
        text=True,
    )
    if found.returncode:
        raise RuntimeError(f"cannot find {', '.join(modules)} from {tree}:\n{found.stderr}")
    origins: dict[str, str] = json.loads(found.stdout)
    return origins
