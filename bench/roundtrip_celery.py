"""Part 4 of ``bench.roundtrip``: Celery's no-op round trip and throughput, where installed.

A worker process (``celery -A bench.roundtrip_celery_app worker --pool prefork``) on the same
RabbitMQ (default vhost, a queue of the run's own) and Redis (result keys under a prefix of
the run's own); ``delay().get()`` serially, then a burst sent at once and all awaited. The
queue, its exchange and the result keys are deleted at the end. It runs twice: as Celery
comes (the target's yardstick), then durable like brainhands' messages (a quorum queue and
publisher confirms).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench._services import clean_up, delete_amqp, delete_redis_keys, log_tail, spawn, terminate


@dataclass
class CeleryResult:
    samples: list[float]
    burst: int
    burst_seconds: float
    durable: CeleryResult | None = None
    """The same with a quorum queue and publisher confirms."""


def celery_available() -> bool:
    try:
        import celery  # noqa: F401
    except ImportError:
        return False
    return True


def celery_broker_url(url: str) -> str:
    """Kombu reads the vhost from the path: ``/`` (the default vhost) is written ``//``."""
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        return urlunsplit(parts._replace(path="//"))
    return url


def celery_env(args: argparse.Namespace, queue: str, durable: bool) -> dict[str, str]:
    return {
        "BENCH_CELERY_QUEUE": queue,
        "BENCH_CELERY_BROKER": celery_broker_url(args.rabbitmq_url),
        "BENCH_CELERY_BACKEND": args.redis_url,
        "BENCH_CELERY_PREFIX": f"{queue}:",
        "BENCH_CELERY_DURABLE": "1" if durable else "0",
    }


def start_celery_worker(
    args: argparse.Namespace, queue: str, durable: bool, log: Path
) -> subprocess.Popen[bytes]:
    argv = ["celery", "-A", "bench.roundtrip_celery_app", "worker", "--pool", "prefork"]
    argv += ["--concurrency", str(args.celery_concurrency), "-Q", queue, "-n", f"{queue}@%h"]
    argv += ["--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    env = {**os.environ, **celery_env(args, queue, durable)}
    # In a process group of its own: the pool's children go with it.
    return spawn(argv, env, log, new_session=True)


def stop_celery_worker(proc: subprocess.Popen[bytes]) -> None:
    terminate([proc])  # warm shutdown: finish what runs, then exit
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # any pool child left behind (group we created)


def measure_celery(args: argparse.Namespace, queue: str, durable: bool) -> CeleryResult:
    """Blocking Celery client calls (run in a thread): warm-up, serial, burst."""
    from bench.roundtrip_celery_app import NOOP, create_app

    env = celery_env(args, queue, durable)
    app = create_app(
        queue,
        env["BENCH_CELERY_BROKER"],
        env["BENCH_CELERY_BACKEND"],
        env["BENCH_CELERY_PREFIX"],
        durable,
    )
    noop = app.tasks[NOOP]
    try:
        noop.delay().get(timeout=60)  # the first one waits for the worker to come up
        for _ in range(args.warmup * 4):
            noop.delay().get(timeout=30)
        perf = time.perf_counter
        samples = []
        for _ in range(args.celery_serial):
            t0 = perf()
            noop.delay().get(timeout=30)
            samples.append(perf() - t0)
        t0 = perf()
        pending = [noop.delay() for _ in range(args.celery_burst)]
        for result in pending:
            result.get(timeout=args.timeout)
        return CeleryResult(samples, args.celery_burst, perf() - t0)
    finally:
        app.close()


async def bench_celery(args: argparse.Namespace, tag: str, logs: Path) -> CeleryResult | None:
    if not celery_available():
        print(
            "4. Celery is not installed, so its rows are skipped: "
            ".venv/bin/pip install 'celery>=5.3,<6'",
            flush=True,
        )
        return None
    result = await bench_celery_variant(args, f"benchroundtrip_celery_{tag}", False, logs)
    result.durable = await bench_celery_variant(
        args, f"benchroundtrip_celerydurable_{tag}", True, logs
    )
    return result


async def bench_celery_variant(
    args: argparse.Namespace, queue: str, durable: bool, logs: Path
) -> CeleryResult:
    kind = "quorum queue, publisher confirms" if durable else "as it comes"
    print(
        f"4. Celery ({kind}): prefork worker x{args.celery_concurrency}, queue {queue}; "
        f"{args.celery_serial} serial delay().get(), then {args.celery_burst} at once",
        flush=True,
    )
    log = logs / f"{queue}.log"
    proc = start_celery_worker(args, queue, durable, log)
    try:
        result = await asyncio.wait_for(
            asyncio.to_thread(measure_celery, args, queue, durable), timeout=args.timeout + 60
        )
        if proc.poll() is not None:
            raise RuntimeError(f"the Celery worker exited:\n{log_tail(log)}")
        return result
    except BaseException:
        print(f"Celery worker log:\n{log_tail(log)}", file=sys.stderr)
        raise
    finally:
        stop_celery_worker(proc)
        await cleanup_celery(args, queue)


async def cleanup_celery(args: argparse.Namespace, queue: str) -> None:
    await clean_up(
        ("the Celery queue", functools.partial(delete_amqp, args.rabbitmq_url, [queue], [queue])),
        ("the Celery results", functools.partial(delete_redis_keys, args.redis_url, f"{queue}:")),
    )
