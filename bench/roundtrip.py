"""A tool call's round trip through Brain and Hands, next to its physical floor, Celery and DBOS.

Everything runs on PostgreSQL (a fresh schema, dropped at the end; on a server of the run's
own unless ``--no-counts``, see 6), RabbitMQ and Redis under a unique namespace; every process
started is stopped and every queue deleted at the end.

1. **Round trip.** One Brain (``python -m brainhands brain --compat v1 --agents
   bench.roundtrip_agents``) and one Hands process (``hands --pool bench --tools
   bench.roundtrip_tools``), which declares the tool the Brain routes. S sessions
   (``--sessions``), one after another, each submit ``{"agent": "pinger", ...}``: a scripted
   model that calls the no-op ``ping`` tool once, then answers. Per session the latency is
   read from the store: ``model committed -> result applied`` is the ``created_at`` of the
   ``tool_result`` entry minus that of the ``model`` entry, i.e. from the commit of the
   generation task's ``tools`` phase (the raw response, the tool task and its job in the
   outbox) to the commit that applies the result. The steps in between come from the outbox
   rows' ``sent_at`` (the relays' confirmed publishes), the operation rows' ``created_at``
   (the Hands' fence claim) and the processes' JSON logs (Hands ``started``, ``outcome``;
   the ``received_at`` of the Brain's line that ends the result's delivery).
2. **Throughput.** A second Brain and a second Hands process join; S2 sessions
   (``--burst``) are submitted at once, and the clock runs until the last submission is
   answered (its ``updated_at``). One tool call per session: tool calls/s = sessions/s.
   Then (2b) S3 sessions (``--fanout-burst``) of the ``fanout`` agent, whose first model turn
   asks for 10 calls at once: tool calls/s = 10 x sessions/s, the per-session Brain work
   spread over ten calls (agents often ask for several tools in one turn).
3. **Physical floor**, measured in the same run right before and after part 1, without any
   of our code: the bare commits, confirmed publishes and lease round trips the design
   requires for one round trip, serially in this process with asyncpg (prepared statements),
   aio-pika and redis-py -- commit the intents (one transaction: guarded session ``UPDATE``,
   ``INSERT`` entry, ``INSERT`` task, ``INSERT`` outbox); publish the job (persistent,
   confirmed, to a quorum queue); consume it; Redis ``SET NX PX`` and the operation's fence
   claim (one upsert); mark the call started (``UPDATE``); commit the outcome (``UPDATE``
   operation, ``INSERT`` outbox); publish the result (confirmed, quorum); consume it; Redis
   ``SET NX PX`` and the session's fence claim (``UPDATE``); commit the apply (guarded
   session ``UPDATE``, ``INSERT`` entry, ``UPDATE`` task). The strict floor, from the same
   samples, leaves out the started mark and the session lease; both ratios are printed.
   (3b) The floor's throughput: L lanes (``--floor-lanes``) at once, each a serial floor on
   connections and queues of its own, spread over two processes, ``--floor-burst`` round
   trips in all. No design that does these commits one call at a time can pass it; the
   throughput rows are also given as a ratio to it.
4. **Celery** (when installed; it is not a dependency): a worker process (``celery -A
   bench.roundtrip_celery_app worker --pool prefork --concurrency 2``) on the same RabbitMQ (default
   vhost, a unique queue), ``task_acks_late``, Redis result backend (unique key prefix). A
   no-op task's ``delay().get()`` serially, and N (``--celery-burst``) tasks sent at once and
   all awaited. Then the same again, durable like brainhands' messages: a quorum queue and
   publisher confirms (for comparison; the target is against Celery as it comes).
5. **DBOS Transact** (when installed; it is not a dependency either): one process
   (``python -m bench.roundtrip_dbos_app``) with its system tables in a database of the run's
   own on the same PostgreSQL server, created and dropped by the bench; a tool call is one
   no-op step of an ``async`` workflow. ``--dbos-serial`` one-step workflows one after
   another (``start_workflow_async`` then ``get_result``), ``--dbos-burst`` started at once
   directly and then enqueued at once on a DBOS ``Queue``, and S3 (``--fanout-burst``)
   workflows of 10 steps at once both ways, to compare with part 2b. DBOS checkpoints every
   workflow and step in PostgreSQL, the durable peer closest to ours, without a broker.

6. **Steps per call, counted** (unless ``--no-counts``): the whole run uses a PostgreSQL and a
   Redis server of its own (``bench/roundtrip_servers.py``: the machine's binaries on free
   ports, ``pg_stat_statements`` preloaded, the system server's commit settings), because
   other clients share the system ones and move their counters. Around parts 1, 2 and 2b,
   and around DBOS's serial, direct-burst and fan-out parts, a meter
   (``bench/roundtrip_counts.py``) reads the store's write transactions (transaction ids
   consumed), its statements (``pg_stat_statements``), its CPU (the own server's processes),
   the Redis commands (``INFO commandstats``) and the AMQP messages published and confirmed
   (counted in the publishing processes: the workers run as ``bench.roundtrip_counted``).
   The table per one-call session, per fan-out call, per DBOS one-step workflow and per
   DBOS fan-out step, and the store capacity (tool calls/s per PostgreSQL core) that the
   store CPU per call gives, come last (``bench/roundtrip_costs.py``).

``--before REF`` measures parts 1 to 3 twice in the same run: first with the Brain and Hands
processes running commit REF's code (its tree ``git archive``d to a temporary directory, its
package folders first on their path, its ``bench`` agents and tools too; checked before they
start), then with this tree's, each pass in a namespace and schema of its own. The report
(parts 4 and 5 once, after both) is this tree's, then a table of both side by side with
after / before: round trip p50, throughputs, and the CPU per session of the Brains, the Hands
and the services (``bench/roundtrip_before.py``); the floor's own drift between the passes
is the measure of the run's noise. ``--rounds N`` repeats both passes N times, alternating
their order (before, after, after, before, ...) so that a machine whose speed drifts during
the run weighs on both alike, and compares the medians.

``--queue-type classic`` runs the Brains, the Hands and the floor on classic queues (the
default: quorum); ``--versus-classic`` measures this tree on quorum queues, then on classic
ones, the same way (``--rounds N``; the floor, on the pass's queues, moves with them).

Targets: round trip p50 <= 2x the floor's; throughput not less than 0.5x Celery's (no-op, as it
comes) and 2x DBOS's best (direct or queue; the fan-out row against DBOS's fan-out). Ours does
far more per call (durable commits on both sides, leases, fences, outbox relays), so the
numbers are reported as they are. Parts 1 and 2 are measured by ``bench/roundtrip_sessions.py``,
part 3 by ``bench/roundtrip_floor.py``, part 4 by ``bench/roundtrip_celery.py``, part 5 by
``bench/roundtrip_dbos.py``.

    .venv/bin/python -m bench.roundtrip [--sessions S] [--burst S2] [--fanout-burst S3]
        [--floor F] [--celery-burst N] [--dbos-burst N] [--no-celery] [--no-dbos]
        [--no-counts] [--queue-type T] [--before REF | --versus-classic [--rounds N]]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

import asyncpg

from bench._services import (
    ROOT,
    SERVICE_PROCESSES,
    Workers,
    add_service_urls,
    asyncpg_dsn,
    clean_namespace,
    extracted,
    new_parser,
    open_store,
    run_names,
    stop_on_sigterm,
    worker_env,
)
from bench._stats import machine, percentile, print_table
from bench.roundtrip_agents import COMPAT, FANOUT, FANOUT_AGENT
from bench.roundtrip_before import check_code, compare
from bench.roundtrip_celery import CeleryResult, bench_celery
from bench.roundtrip_costs import new_meter, print_costs
from bench.roundtrip_counts import (
    TAIL,
    Counts,
    amqp_counting,
    part_end,
    statements_per,
    take,
)
from bench.roundtrip_dbos import DbosResult, bench_dbos
from bench.roundtrip_floor import (
    FLOOR_PROCESSES,
    FLOOR_STEPS,
    Floor,
    floor_queues,
    floor_schema,
    floor_throughput,
)
from bench.roundtrip_servers import own_servers, system_settings
from bench.roundtrip_sessions import (
    STEPS,
    Passes,
    Timeline,
    analyze,
    brain_passes,
    burst_sessions,
    cpu_per_session,
    serial_sessions,
    session_ids,
    step_samples,
    timelines,
)
from bench.roundtrip_tools import POOL
from brainhands.shared.broker import Broker
from brainhands.shared.relay import OutboxRelay
from brainhands.shared.topology import QueueType, Topology

TARGET_FLOOR_RATIO = 2.0
TARGET_BURST_P99 = 0.5
"""Seconds: under the burst, model committed -> result applied at p99 (for 300 at once)."""
TARGET_CELERY_RATIO = 0.5
"""Throughput at least this times Celery's no-op throughput."""
TARGET_DBOS_RATIO = 2.0
"""Throughput at least this times DBOS's best (direct or queue)."""
ms = 1000.0


# The run ---------------------------------------------------------------------------------------


@dataclass
class Results:
    serial: list[Timeline] = field(default_factory=list)
    burst: list[Timeline] = field(default_factory=list)
    burst_seconds: float = 0.0
    fanout_sessions: int = 0
    fanout_seconds: float = 0.0
    serial_passes: Passes = field(default_factory=Passes)
    burst_passes: Passes = field(default_factory=Passes)
    fanout_passes: Passes = field(default_factory=Passes)
    serial_cpu: dict[str, float] = field(default_factory=dict)
    burst_cpu: dict[str, float] = field(default_factory=dict)
    fanout_cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds per session of the Brain and Hands processes (all of a role together)."""
    floor: Floor | None = None
    floor_rate: float = 0.0
    """Round trips/s of the floor's lanes at once."""
    floor_cpu: float = 0.0
    """CPU seconds per round trip of the floor's lanes (both sides of a call)."""
    celery: CeleryResult | None = None
    dbos: DbosResult | None = None
    serial_counts: Counts | None = None
    burst_counts: Counts | None = None
    fanout_counts: Counts | None = None
    """What each part asked of the store, the broker and Redis (None: not counted)."""
    serial_statements: list[tuple[float, str]] = field(default_factory=list)
    """With ``--statements``: each statement's calls per serial session, most first."""

    @property
    def serial_p50(self) -> float:
        """Seconds, model committed -> result applied, of the serial sessions (median)."""
        return percentile([t.latency for t in self.serial], 50)

    @property
    def burst_rate(self) -> float:
        """Sessions (and tool calls) per second of the burst."""
        return len(self.burst) / self.burst_seconds

    @property
    def fanout_rate(self) -> float:
        """Tool calls per second of the fan-out burst (0 without one)."""
        return self.fanout_sessions * FANOUT / self.fanout_seconds if self.fanout_seconds else 0.0

    @property
    def floor_p50(self) -> float:
        assert self.floor is not None
        return percentile(self.floor.samples, 50)


def start_brain_and_hands(workers: Workers) -> None:
    """One Brain and one Hands process more."""
    workers.start("brain", "--compat", COMPAT, "--agents", "bench.roundtrip_agents")
    workers.start("hands", "--pool", POOL, "--tools", "bench.roundtrip_tools")


async def bench_ours(
    args: argparse.Namespace,
    namespace: str,
    schema: str,
    logs: Path,
    results: Results,
    code: Path = ROOT,
    queue_type: QueueType = "quorum",
) -> None:
    """Parts 1 to 3, the Brains and Hands running the code of the tree ``code`` on
    ``queue_type`` queues."""
    dsn = asyncpg_dsn(args.database_url)
    topology = Topology(namespace, queue_type=queue_type)
    async with contextlib.AsyncExitStack() as stack:
        store = await open_store(args.database_url, schema)
        stack.push_async_callback(store.close)
        # The floor's rows live in a schema of their own (same migrations), out of sight of the
        # workers' relays and sweepers, which would otherwise publish or wake them.
        floor_store = await open_store(args.database_url, floor_schema(schema))
        await floor_store.close()
        counted = args.servers is not None and code == ROOT
        env = worker_env(
            args, namespace, schema, args.concurrency, BRAINHANDS_QUEUE_TYPE=queue_type
        )
        module = "bench.roundtrip_counted" if counted else "brainhands"
        workers = stack.enter_context(Workers(env, logs, code=code, module=module))
        check_code(workers.env, code)
        broker = await Broker.connect(args.rabbitmq_url, topology, connection_name=namespace)
        stack.push_async_callback(broker.close)
        # The harness's own polls (answered yet?) run as the observer, not counted.
        observer = asyncpg_dsn(args.servers.observer_url) if args.servers else dsn
        db = await asyncpg.connect(observer, server_settings={"search_path": schema})
        stack.push_async_callback(db.close)
        meter = await stack.enter_async_context(new_meter(args)) if counted else None
        if meter is not None:
            meter.excluded.add(await db.fetchval("SELECT pg_backend_pid()"))
        # Submissions' wake-ups are published by a relay here, woken by each commit.
        relay = OutboxRelay(store, broker)
        store.add_commit_listener(relay.wake)
        relay_stop = asyncio.Event()
        relay_task = asyncio.create_task(relay.run(relay_stop))
        try:
            start_brain_and_hands(workers)
            await workers.wait_consuming()
            floor = Floor(args, topology, dsn, floor_schema(schema))
            results.floor = floor
            async with floor:
                half = args.floor // 2
                print(f"3. floor: {half} serial round trips", flush=True)
                await floor.run(half, warmup=args.warmup * 4)
                print(
                    f"1. round trip: {args.sessions} sessions one after another, 1 Brain + 1 Hands",
                    flush=True,
                )
                warm = session_ids("warm", args.warmup)
                await serial_sessions(store, db, topology, workers, warm, args.timeout)
                ids = session_ids("rt", args.sessions)
                texts = await meter.by_statement() if meter and args.statements else {}
                cpu, counts = workers.cpu(), await take(meter, workers)
                await serial_sessions(store, db, topology, workers, ids, args.timeout)
                await asyncio.sleep(TAIL)
                results.serial_cpu = cpu_per_session(cpu, workers.cpu(), len(ids))
                results.serial_counts = await part_end(meter, workers, counts)
                if texts and meter is not None:
                    after = await meter.by_statement()
                    results.serial_statements = statements_per(texts, after, len(ids))
                print(f"3. floor: {args.floor - half} more serial round trips", flush=True)
                await floor.run(args.floor - half)
            print(
                f"3b. floor throughput: {args.floor_burst} round trips, {args.floor_lanes} lanes "
                f"at once in {FLOOR_PROCESSES} processes",
                flush=True,
            )
            lanes = await floor_throughput(
                args, namespace, dsn, floor_schema(schema), queue_type=queue_type
            )
            results.floor_rate, results.floor_cpu = lanes.rate, lanes.cpu
            start_brain_and_hands(workers)
            await workers.wait_consuming()
            await analyze(db)
            print(f"2. throughput: {args.burst} sessions at once, 2 Brains + 2 Hands", flush=True)
            burst = session_ids("tp", args.burst)
            cpu, counts = workers.cpu(), await take(meter, workers)
            results.burst_seconds = await burst_sessions(
                store, db, topology, workers, burst, args.timeout
            )
            await asyncio.sleep(TAIL)
            results.burst_cpu = cpu_per_session(cpu, workers.cpu(), len(burst))
            results.burst_counts = await part_end(meter, workers, counts)
            if args.fanout_burst:
                print(
                    f"2b. throughput: {args.fanout_burst} sessions of {FANOUT} parallel calls "
                    "at once, 2 Brains + 2 Hands",
                    flush=True,
                )
                fanned = session_ids("fan", args.fanout_burst)
                results.fanout_sessions = len(fanned)
                cpu, counts = workers.cpu(), await take(meter, workers)
                results.fanout_seconds = await burst_sessions(
                    store, db, topology, workers, fanned, args.timeout, FANOUT_AGENT
                )
                await asyncio.sleep(TAIL)
                results.fanout_cpu = cpu_per_session(cpu, workers.cpu(), len(fanned))
                results.fanout_counts = await part_end(meter, workers, counts)
        finally:
            relay_stop.set()
            await relay_task
            workers.stop()
        results.serial = await timelines(db, ids, workers, topology)
        results.burst = await timelines(db, burst, workers, topology)
        results.serial_passes = brain_passes(workers, ids)
        results.burst_passes = brain_passes(workers, burst)
        if args.fanout_burst:
            results.fanout_passes = brain_passes(workers, fanned)


# Report ----------------------------------------------------------------------------------------


def fmt_ms(samples: Sequence[float], p: float) -> str:
    return f"{percentile(samples, p) * ms:.1f}" if samples else "-"


def report(args: argparse.Namespace, r: Results) -> None:
    assert r.floor is not None
    floor = r.floor.samples
    floor_p50 = r.floor_p50
    strict = r.floor.strict
    strict_p50 = percentile(strict, 50)
    ours = [t.latency for t in r.serial]
    ours_p50 = r.serial_p50
    ours_rate = r.burst_rate
    fanout_rate = r.fanout_rate
    c = r.celery
    celery_rate = c.burst / c.burst_seconds if c else None
    d = r.dbos

    def vs_celery(rate: float) -> str:
        return f"{rate / celery_rate:.2f}x" if celery_rate else "-"

    def vs_dbos(rate: float) -> str:
        """``rate`` of one-call work over DBOS's best one-step workflows/s."""
        return f"{rate / d.best_rate:.2f}x" if d else "-"

    def vs_dbos_fanout(rate: float) -> str:
        return f"{rate / d.fanout_best_rate:.2f}x" if d and d.fanout else "-"

    def vs_floor_rate(rate: float) -> str:
        return f"{rate / r.floor_rate:.2f}x"

    rows: list[list[object]] = [
        [
            f"brainhands round trip, 1 Brain + 1 Hands ({len(ours)} serial)",
            fmt_ms(ours, 50),
            fmt_ms(ours, 99),
            "-",
            f"{ours_p50 / floor_p50:.2f}x ({ours_p50 / strict_p50:.2f}x strict)",
            "-",
            "-",
        ],
        [
            f"brainhands throughput, 2 Brains + 2 Hands ({len(r.burst)} at once)",
            fmt_ms([t.latency for t in r.burst], 50),
            fmt_ms([t.latency for t in r.burst], 99),
            f"{ours_rate:,.1f}",
            vs_floor_rate(ours_rate),
            vs_celery(ours_rate),
            vs_dbos(ours_rate),
        ],
    ]
    if fanout_rate:
        rows.append(
            [
                f"brainhands throughput, {FANOUT} parallel calls per model turn "
                f"({r.fanout_sessions} sessions at once)",
                "-",
                "-",
                f"{fanout_rate:,.1f}",
                vs_floor_rate(fanout_rate),
                vs_celery(fanout_rate),
                vs_dbos_fanout(fanout_rate),
            ]
        )
    rows += [
        [
            f"physical floor, raw asyncpg/aio-pika/redis ({len(floor)} serial)",
            fmt_ms(floor, 50),
            fmt_ms(floor, 99),
            f"{len(floor) / sum(floor):,.1f}",
            "1.00x",
            "-",
            "-",
        ],
        [
            "strict floor: the same without the started mark and the session lease",
            fmt_ms(strict, 50),
            fmt_ms(strict, 99),
            f"{len(strict) / sum(strict):,.1f}",
            f"{strict_p50 / floor_p50:.2f}x",
            "-",
            "-",
        ],
        [
            f"physical floor throughput, {args.floor_lanes} lanes at once in {FLOOR_PROCESSES} "
            f"processes ({args.floor_burst})",
            "-",
            "-",
            f"{r.floor_rate:,.1f}",
            "1.00x",
            vs_celery(r.floor_rate),
            vs_dbos(r.floor_rate),
        ],
    ]
    if c is not None:
        for label, variant in (("celery no-op", c), ("celery durable no-op", c.durable)):
            if variant is None:
                continue
            rate = variant.burst / variant.burst_seconds
            rows += [
                [
                    f"{label} delay().get() ({len(variant.samples)} serial)",
                    fmt_ms(variant.samples, 50),
                    fmt_ms(variant.samples, 99),
                    f"{len(variant.samples) / sum(variant.samples):,.1f}",
                    f"{percentile(variant.samples, 50) / floor_p50:.2f}x",
                    "-",
                    "-",
                ],
                [
                    f"{label} throughput ({variant.burst} at once, prefork "
                    f"x{args.celery_concurrency})",
                    "-",
                    "-",
                    f"{rate:,.1f}",
                    "-",
                    vs_celery(rate),
                    vs_dbos(rate),
                ],
            ]
    else:
        rows.append(["celery (not installed: skipped)", "-", "-", "-", "-", "-", "-"])
    if d is not None:
        rows += dbos_rows(d, floor_p50, vs_celery, vs_dbos, vs_dbos_fanout)
    else:
        rows.append(["dbos (not installed or --no-dbos: skipped)", "-", "-", "-", "-", "-", "-"])
    print()
    print_table(
        [
            "variant",
            "p50 ms",
            "p99 ms",
            "calls/s",
            "ratio vs floor (p50; calls/s)",
            "ratio vs celery (throughput)",
            "ratio vs dbos best (throughput)",
        ],
        rows,
        align="<>>>>>>",
    )
    print()
    print(
        "p50/p99 of brainhands: model response committed -> result applied (store timestamps); "
        "under load for the throughput row. calls/s of the serial rows: 1 / mean; the "
        "throughput rows' ratio vs floor: their calls/s over the floor's lanes' round trips/s."
    )
    print(
        "The floor has the commits, confirmed publishes and lease round trips the design "
        "requires, and no reads (the Brain's session and outcome reads), no outbox marks after "
        "the publishes, no decisions or phases; Celery keeps no durable state: a classic "
        "queue, no publisher confirms (its default), results in Redis; 'celery durable' "
        "publishes with confirms to a quorum queue, as brainhands does (results still in Redis)."
    )
    print(
        "DBOS checkpoints each workflow and step in PostgreSQL and has no broker: a tool call "
        "is a no-op step, run by the one process that starts or dequeues its workflow; its "
        "calls/s are step calls/s, its bursts timed to the last workflow's updated_at. The "
        "ratio vs dbos best: one-call rows over DBOS's best one-step rate (direct or queue), "
        "the fan-out rows over its best fan-out rate."
    )
    ratio = ours_p50 / floor_p50
    met = "MET" if ratio <= TARGET_FLOOR_RATIO else "NOT MET"
    print(
        f"target round trip p50 <= {TARGET_FLOOR_RATIO:.0f}x the floor: {ours_p50 * ms:.1f} ms "
        f"vs {floor_p50 * ms:.1f} ms = {ratio:.2f}x: {met} (vs the strict floor's "
        f"{strict_p50 * ms:.1f} ms: {ours_p50 / strict_p50:.2f}x)"
    )
    burst_p99 = percentile([t.latency for t in r.burst], 99)
    met = "MET" if burst_p99 <= TARGET_BURST_P99 else "NOT MET"
    print(
        f"target under the burst ({len(r.burst)} at once; the target is set for 300), model "
        f"committed -> result applied p99 <= {TARGET_BURST_P99 * ms:.0f} ms: "
        f"{burst_p99 * ms:.1f} ms: {met}"
    )
    print_throughput_targets(args, r, ours_rate, fanout_rate)
    report_where(r, ours)


def dbos_rows(
    d: DbosResult,
    floor_p50: float,
    vs_celery: Callable[[float], str],
    vs_dbos: Callable[[float], str],
    vs_dbos_fanout: Callable[[float], str],
) -> list[list[object]]:
    label = f"dbos {d.version}"
    rows: list[list[object]] = [
        [
            f"{label} one-step workflow, start + get_result ({len(d.samples)} serial)",
            fmt_ms(d.samples, 50),
            fmt_ms(d.samples, 99),
            f"{len(d.samples) / sum(d.samples):,.1f}",
            f"{percentile(d.samples, 50) / floor_p50:.2f}x",
            "-",
            "-",
        ],
        [
            f"{label} throughput, started directly ({d.burst} at once, 1 process)",
            "-",
            "-",
            f"{d.direct_rate:,.1f}",
            "-",
            vs_celery(d.direct_rate),
            vs_dbos(d.direct_rate),
        ],
        [
            f"{label} throughput, on a Queue ({d.burst} at once, polled every "
            f"{d.queue_polling_sec * ms:.0f} ms)",
            "-",
            "-",
            f"{d.queue_rate:,.1f}",
            "-",
            vs_celery(d.queue_rate),
            vs_dbos(d.queue_rate),
        ],
    ]
    fanned = (("started directly", d.fanout_direct_rate), ("on a Queue", d.fanout_queue_rate))
    if d.fanout:
        for how, rate in fanned:
            rows.append(
                [
                    f"{label} throughput, {d.fanout_calls} parallel steps per workflow, {how} "
                    f"({d.fanout} at once)",
                    "-",
                    "-",
                    f"{rate:,.1f}",
                    "-",
                    vs_celery(rate),
                    vs_dbos_fanout(rate),
                ]
            )
    return rows


def print_throughput_targets(
    args: argparse.Namespace, r: Results, ours_rate: float, fanout_rate: float
) -> None:
    c, d = r.celery, r.dbos
    wording = (
        f"target throughput not less than {TARGET_CELERY_RATIO}x Celery and "
        f"{TARGET_DBOS_RATIO:.0f}x DBOS's best throughput"
    )
    if c is not None:
        celery_rate = c.burst / c.burst_seconds
        ratio = ours_rate / celery_rate
        met = "MET" if ratio >= TARGET_CELERY_RATIO else "NOT MET"
        print(
            f"{wording}, vs Celery no-op: {ours_rate:,.1f} vs {celery_rate:,.1f} tool calls/s "
            f"= {ratio:.2f}x (>= {TARGET_CELERY_RATIO}x): {met}"
        )
        print(
            f"the floor's own throughput, its round trips back to back in {args.floor_lanes} "
            f"lanes at once: {r.floor_rate:,.1f}/s = {r.floor_rate / celery_rate:.2f}x Celery's; "
            f"brainhands reaches {ours_rate / r.floor_rate:.2f}x of it"
        )
        print_cpu_budget(r.burst_cpu, TARGET_CELERY_RATIO * celery_rate)
    else:
        print(f"{wording}, vs Celery: not measured (Celery is not installed)")
    if d is not None:
        ratio = ours_rate / d.best_rate
        met = "MET" if ratio >= TARGET_DBOS_RATIO else "NOT MET"
        best = "direct" if d.direct_rate >= d.queue_rate else "queue"
        print(
            f"{wording}, vs DBOS's best ({best}): {ours_rate:,.1f} vs {d.best_rate:,.1f} tool "
            f"calls/s = {ratio:.2f}x (>= {TARGET_DBOS_RATIO:.0f}x): {met}"
        )
        print_cpu_budget(r.burst_cpu, TARGET_DBOS_RATIO * d.best_rate)
        if fanout_rate and d.fanout:
            ratio = fanout_rate / d.fanout_best_rate
            met = "MET" if ratio >= TARGET_DBOS_RATIO else "NOT MET"
            print(
                f"fan-out, {FANOUT} calls per model turn vs {d.fanout_calls} steps per workflow: "
                f"{fanout_rate:,.1f} vs {d.fanout_best_rate:,.1f} tool calls/s = {ratio:.2f}x: "
                f"{met}"
            )
    else:
        print(f"{wording}, vs DBOS: not measured (DBOS is not installed, or --no-dbos)")
    if c is not None and c.durable is not None:
        durable_rate = c.durable.burst / c.durable.burst_seconds
        print(
            f"for comparison, vs Celery durable: {ours_rate:,.1f} vs {durable_rate:,.1f} tool "
            f"calls/s = {ours_rate / durable_rate:.2f}x (fan-out row: "
            f"{fanout_rate / durable_rate:.2f}x)"
        )


def print_cpu_budget(used: dict[str, float], rate: float) -> None:
    """How much CPU a one-call session may take, all processes together, for this machine's
    cores to carry ``rate`` sessions a second, beside what the burst's used (``used``)."""
    cores = os.cpu_count() or 1
    workers = used.get("brain", 0.0) + used.get("hands", 0.0)
    services = sum(used.get(s, 0.0) for s in SERVICE_PROCESSES)
    print(
        f"its CPU budget: {rate:,.1f} sessions/s on {cores} cores allow {cores / rate * ms:.1f} "
        f"ms of CPU per session, all processes together; the burst's sessions took "
        f"{(workers + services) * ms:.1f} ms: {workers * ms:.1f} in the Brains and Hands, "
        f"{services * ms:.1f} in the services (the harness's own not counted)"
    )


def report_where(r: Results, ours: Sequence[float]) -> None:
    """Where a brainhands round trip and the floor's go, the CPU and the Brain passes."""
    assert r.floor is not None
    print()
    print("where a brainhands round trip goes (store timestamps and worker JSON logs):")
    step_rows: list[list[object]] = []
    for label, start, end in STEPS:
        a, b = step_samples(r.serial, start, end), step_samples(r.burst, start, end)
        step_rows.append([label, fmt_ms(a, 50), fmt_ms(a, 99), fmt_ms(b, 50), fmt_ms(b, 99)])
    step_rows.append(
        [
            "total: model committed -> result applied",
            fmt_ms(ours, 50),
            fmt_ms(ours, 99),
            fmt_ms([t.latency for t in r.burst], 50),
            fmt_ms([t.latency for t in r.burst], 99),
        ]
    )
    print_table(
        ["step", "1B+1H p50 ms", "p99 ms", "2B+2H p50 ms", "p99 ms"], step_rows, align="<>>>>"
    )
    one_call = "2 model turns, 1 tool call"
    cpu_rows = [("1B+1H serial", r.serial_cpu, one_call), ("2B+2H burst", r.burst_cpu, one_call)]
    pass_rows = [
        ("1B+1H serial", len(r.serial), r.serial_passes),
        ("2B+2H burst", len(r.burst), r.burst_passes),
    ]
    if r.fanout_sessions:
        fanned = f"2 model turns, {FANOUT} parallel tool calls"
        cpu_rows.append(("2B+2H fan-out", r.fanout_cpu, fanned))
        pass_rows.append(("2B+2H fan-out", r.fanout_sessions, r.fanout_passes))
    for label, used, session in cpu_rows:
        services = ", ".join(f"{s} {used[s] * ms:.1f} ms" for s in SERVICE_PROCESSES if s in used)
        print(
            f"CPU per session ({label}): Brain {used.get('brain', 0) * ms:.1f} ms (kernel "
            f"{used.get('brain kernel', 0) * ms:.1f}), Hands {used.get('hands', 0) * ms:.1f} ms "
            f"(kernel {used.get('hands kernel', 0) * ms:.1f}) (a session: {session}); the "
            f"services on this machine: {services or 'none'}"
        )
    print(
        f"CPU per round trip of the floor ({r.floor_rate:,.0f}/s in lanes at once; both sides "
        f"of a call, bare drivers, no logic): {r.floor_cpu * ms:.1f} ms"
    )
    for label, n, p in pass_rows:
        woken = ", ".join(f"{count} by {by}" for by, count in sorted(p.woken.items()))
        print(
            f"Brain passes ({label}): {sum(p.woken.values())} deliveries for {n} sessions "
            f"({woken}); {p.applied} results found already applied (no pass), {p.idle} passes "
            f"ran no phase, {p.busy} found the session busy; the sweeper sent {p.swept} wake-ups "
            "meanwhile"
        )
    late = [t for t in r.serial if t.woken and t.dispatch_done and t.woken < t.dispatch_done]
    print(
        f"{len(late)} of {len(r.serial)} serial results woke the Brain before the pass that "
        "dispatched the call had let go of the session (they wait for its lease)."
    )
    print()
    print("where the floor goes:")
    print_table(
        ["step", "p50 ms", "p99 ms"],
        [
            [label, fmt_ms(s, 50), fmt_ms(s, 99)]
            for label, s in zip(FLOOR_STEPS, r.floor.steps, strict=True)
        ],
        align="<>>",
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument("--sessions", type=int, default=100, help="serial sessions (part 1)")
    parser.add_argument("--burst", type=int, default=300, help="sessions at once (part 2)")
    parser.add_argument(
        "--fanout-burst",
        type=int,
        default=60,
        help=f"sessions of {FANOUT} parallel tool calls at once (part 2b; 0 skips it)",
    )
    parser.add_argument("--floor", type=int, default=200, help="floor round trips (part 3)")
    parser.add_argument(
        "--floor-burst", type=int, default=1200, help="floor round trips at once (part 3b)"
    )
    parser.add_argument(
        "--floor-lanes", type=int, default=8, help="floor round trips in flight (part 3b)"
    )
    parser.add_argument("--celery-serial", type=int, default=100, help="serial tasks (part 4)")
    parser.add_argument("--celery-burst", type=int, default=300, help="tasks at once (part 4)")
    parser.add_argument(
        "--celery-concurrency", type=int, default=2, help="Celery prefork processes (part 4)"
    )
    parser.add_argument("--dbos-serial", type=int, default=100, help="serial workflows (part 5)")
    parser.add_argument(
        "--dbos-burst", type=int, default=300, help="one-step workflows at once (part 5)"
    )
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured sessions first")
    parser.add_argument(
        "--concurrency", type=int, default=0, help="Brain/Hands concurrency (default: their own)"
    )
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds a part may take")
    parser.add_argument("--logs", help="keep the worker processes' logs in this directory")
    parser.add_argument("--no-celery", action="store_true", help="skip part 4")
    parser.add_argument("--no-dbos", action="store_true", help="skip part 5")
    parser.add_argument(
        "--no-counts",
        action="store_true",
        help="run on --database-url and --redis-url as given, without the steps-per-call "
        "counts (which need servers of the run's own)",
    )
    parser.add_argument(
        "--before",
        metavar="REF",
        help="first measure parts 1 to 3 with the Brains and Hands of this commit, then this "
        "tree's, and compare",
    )
    parser.add_argument(
        "--statements",
        action="store_true",
        help="with the counts: list the store's statements per serial session, most first",
    )
    parser.add_argument(
        "--queue-type",
        choices=get_args(QueueType),
        default="quorum",
        help="the RabbitMQ queues of the Brains and Hands (the floor's are quorum queues)",
    )
    parser.add_argument(
        "--versus-classic",
        action="store_true",
        help="measure parts 1 to 3 on quorum queues, then on classic ones, and compare",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --before or --versus-classic: measure both sides this many times, "
        "alternating (before, after, after, before, ...), and compare the medians",
    )
    add_service_urls(parser, "postgres", "rabbitmq", "redis")
    args = parser.parse_args(argv)
    counts = [args.sessions, args.burst, args.celery_serial, args.celery_burst, args.floor_lanes]
    counts += [args.dbos_serial, args.dbos_burst]
    if args.floor_burst < args.floor_lanes:
        parser.error("--floor-burst must be at least --floor-lanes (a round trip per lane)")
    if args.before and args.versus_classic:
        parser.error("--before and --versus-classic compare different things: pick one")
    if min(*counts, args.celery_concurrency, args.rounds) < 1 or args.floor < 2 or args.warmup < 0:
        parser.error("counts must be positive (--floor at least 2), --warmup not negative")
    return args


async def measure(
    args: argparse.Namespace, logs: Path, code: Path, queue_type: QueueType
) -> Results:
    """Parts 1 to 3 with the Brains and Hands of the tree ``code`` on ``queue_type`` queues,
    in a namespace and schema of their own, removed after."""
    _, namespace, schema = run_names("roundtrip")
    print(f"namespace {namespace}, PostgreSQL schema {schema}, {queue_type} queues", flush=True)
    results = Results()
    try:
        await bench_ours(args, namespace, schema, logs, results, code, queue_type)
    finally:
        topology = Topology(namespace)
        queues = [topology.hands_queue(POOL), *topology.brain_queues(COMPAT)]
        queues += floor_queues(topology, args.floor_lanes)
        await clean_namespace(args, namespace, queues, [schema, floor_schema(schema)])
    return results


async def main(args: argparse.Namespace) -> None:
    stop_on_sigterm()
    tag, _, _ = run_names("roundtrip")
    print(f"roundtrip bench on {machine()}", flush=True)
    befores: list[Results] = []
    afters: list[Results] = []
    args.servers = None
    with tempfile.TemporaryDirectory(prefix="brainhands-bench-roundtrip-") as tmp:
        logs = Path(args.logs or tmp)
        with contextlib.ExitStack() as stack:
            if not args.no_counts:
                settings = await system_settings(args.database_url)
                servers = stack.enter_context(own_servers(settings))
                args.servers = servers
                args.database_url, args.redis_url = servers.database_url, servers.redis_url
                amqp_counting()
                print(
                    f"own servers for the counts: PostgreSQL :{servers.pg_port} (pg_stat_"
                    f"statements; {len(settings)} settings copied from the system server), "
                    f"Redis :{servers.redis_port}",
                    flush=True,
                )
            old = stack.enter_context(extracted(args.before)) if args.before else None
            passes: list[tuple[list[Results], Path, str, QueueType]]
            if old is not None:
                passes = [(befores, old, args.before, args.queue_type)]
                passes.append((afters, ROOT, "this tree", args.queue_type))
            elif args.versus_classic:
                passes = [(befores, ROOT, "quorum queues", "quorum")]
                passes.append((afters, ROOT, "classic queues", "classic"))
            else:
                passes = [(afters, ROOT, "this tree", args.queue_type)]
            for n in range(args.rounds if len(passes) > 1 else 1):
                if len(passes) > 1:
                    print(f"\n== round {n + 1} of {args.rounds}", flush=True)
                for done, code, name, queue_type in passes[:: -1 if n % 2 else 1]:
                    print(f"\n== the Brains and Hands of {name}", flush=True)
                    side = "before" if done is befores else "after"
                    done.append(await measure(args, logs / f"{side}-{n + 1}", code, queue_type))
            results = afters[-1]
            if not args.no_celery:
                results.celery = await bench_celery(args, tag, logs)
            if not args.no_dbos:
                results.dbos = await bench_dbos(args, tag, logs)
    report(args, results)
    print_costs(results)
    if results.serial_statements:
        print("\nstore statements per serial session (pg_stat_statements), most first:")
        for calls, query in results.serial_statements:
            print(f"{calls:6.2f}  {query[:150]}")
    if befores:
        compare(args.before or "quorum queues", befores, afters)
    print(f"({machine()})")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(main(parse_args()))
