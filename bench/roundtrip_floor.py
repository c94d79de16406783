"""Part 3 of ``bench.roundtrip``: the physical floor of one tool call's round trip.

The bare commits, confirmed publishes and lease round trips one round trip requires by the
design (DESIGN.md section 3), serially in this process with asyncpg (prepared statements),
aio-pika and redis-py, none of our code: commit the intents, publish the job, consume it,
take the operation's lease and fence, mark the call started, commit the outcome, publish the
result, consume it, take the session's lease and fence, commit the apply. ``STRICT_STEPS``
are the same without the started mark and the session lease: the stricter yardstick this
bench first used. Both are reported.

Its rows live in a schema of their own (``floor_schema``), out of sight of the workers'
relays and sweepers; its two quorum queues are named by ``FLOOR_JOBS`` and ``FLOOR_RESULTS``
in the run's namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any, Self, get_args

import aio_pika
import asyncpg
from aio_pika.abc import AbstractIncomingMessage
from redis.asyncio import Redis

from bench._services import ROOT, add_service_urls, new_parser
from bench.commit import PG_ENTRY, PG_GUARD, PG_OUTBOX
from bench.roundtrip_tools import POOL
from brainhands.shared.topology import QueueType, Topology

FLOOR_JOBS = "floorjobs"
FLOOR_PROCESSES = 2
"""Processes the floor's throughput runs in, its lanes spread over them."""
LANE_WARMUP = 3
"""Unmeasured round trips per lane before the floor's throughput is measured."""
FLOOR_RESULTS = "floorresults"


def floor_schema(schema: str) -> str:
    return f"{schema}_floor"


def lane_queues(lane: int) -> tuple[str, str]:
    """The pool and compat naming a floor lane's job and result queues (lane 0: the serial
    floor's)."""
    suffix = str(lane) if lane else ""
    return f"{FLOOR_JOBS}{suffix}", f"{FLOOR_RESULTS}{suffix}"


def floor_queues(topology: Topology, lanes: int) -> list[str]:
    """The queues of the serial floor (lane 0) and of lanes 1 to ``lanes``."""
    names = [lane_queues(lane) for lane in range(lanes + 1)]
    return [
        q
        for jobs, results in names
        for q in (topology.hands_queue(jobs), topology.brain_queue(results))
    ]


PG_TASK_INSERT = (
    "INSERT INTO task (id, session_id, parent_id, kind, kind_version, input, status, "
    "operation_id, created_at, updated_at) VALUES ($1, $2, $3, $4, 1, $5, 'waiting', $6, $7, $7)"
)
PG_FENCE = (
    "INSERT INTO operation (operation_id, session_id, task_id, tool, pool, arguments, status, "
    "fence, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, 'intended', $7, $8, $8) "
    "ON CONFLICT (operation_id) DO UPDATE SET fence = EXCLUDED.fence, "
    "updated_at = EXCLUDED.updated_at WHERE operation.fence < EXCLUDED.fence"
)
PG_STARTED = (
    "UPDATE operation SET status = 'started', attempts = attempts + 1, started_at = $1, "
    "updated_at = $1 WHERE operation_id = $2 AND fence = $3"
)
PG_SESSION_FENCE = "UPDATE session SET fence = $1 WHERE id = $2 AND fence < $1"
PG_OUTCOME = (
    "UPDATE operation SET status = 'succeeded', result = $1, finished_at = $2, updated_at = $2 "
    "WHERE operation_id = $3 AND fence = $4"
)
PG_SETTLE = (
    "UPDATE task SET status = 'terminal', outcome = 'succeeded', result = $1, updated_at = $2 "
    "WHERE id = $3 AND session_id = $4 AND status = 'waiting'"
)
FLOOR_STEPS = [
    "commit intents + outbox",
    "publish job (confirm)",
    "consume job",
    "Redis SET NX PX + fence claim",
    "mark started",
    "commit outcome + outbox",
    "publish result (confirm)",
    "consume result",
    "session lease: Redis SET NX PX + fence claim",
    "commit apply",
]
STRICT_STEPS = [n for n in range(len(FLOOR_STEPS)) if n not in (4, 8)]
"""The steps of the stricter floor: no started mark, no session lease."""
MODEL_BODY = json.dumps(
    {
        "model": "scripted",
        "raw": {
            "id": "scripted-0",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_0_0",
                                "type": "function",
                                "function": {"name": "ping", "arguments": "{}"},
                            }
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        },
    }
)


class Lane:
    """A floor lane's connections: one asyncpg connection (its ``sessions`` inserted, its
    statements prepared by ``prepare``), one AMQP connection (a confirm channel to publish,
    another consuming the lane's job and result queues) and one Redis client."""

    def __init__(
        self,
        args: argparse.Namespace,
        topology: Topology,
        dsn: str,
        schema: str,
        lane: int,
        sessions: int,
    ):
        self.args = args
        self.lane = lane
        self.topology = topology
        self.dsn = dsn
        self.schema = schema
        self.session_ids = [f"floor-{uuid.uuid4().hex[:8]}" for _ in range(sessions)]
        self.version = 0
        self.fence = 1
        self.n = 0
        self.jobs: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
        self.results: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()

    async def __aenter__(self) -> Self:
        self.db = await asyncpg.connect(self.dsn, server_settings={"search_path": self.schema})
        await self.db.executemany(
            "INSERT INTO session (id, uid, compat, version, fence, status, entry_count, "
            "created_at, updated_at) VALUES ($1, $2, 'floor', 0, $3, 'active', 0, $4, $4)",
            [(sid, uuid.uuid4().hex, self.fence, time.time()) for sid in self.session_ids],
        )
        await self.prepare()
        self.redis = Redis.from_url(self.args.redis_url)
        self.amqp = await aio_pika.connect(self.args.rabbitmq_url)
        self.pub = await self.amqp.channel(publisher_confirms=True)
        # Declaring is set-up, not part of the floor: the same quorum queues as ours.
        jobs, results = lane_queues(self.lane)
        self.jobs_queue = await self.topology.declare_hands_pool(self.pub, jobs)
        self.results_queue = await self.topology.declare_brain(self.pub, results)
        self.exchange = await self.pub.get_exchange(self.topology.exchange, ensure=False)
        self.sub = await self.amqp.channel()
        await self.sub.set_qos(prefetch_count=max(8, 2 * len(self.session_ids)))
        for name, inbox in ((self.jobs_queue, self.jobs), (self.results_queue, self.results)):
            queue = await self.sub.declare_queue(name, passive=True)
            await queue.consume(inbox.put)
        return self

    async def prepare(self) -> None:
        """Prepare the lane's statements on ``self.db``."""
        raise NotImplementedError

    async def __aexit__(self, *exc: object) -> None:
        await self.amqp.close()
        await self.redis.aclose()
        await self.db.close()


class Floor(Lane):
    """The bare operations of one round trip, one after another."""

    def __init__(
        self, args: argparse.Namespace, topology: Topology, dsn: str, schema: str, lane: int = 0
    ):
        super().__init__(args, topology, dsn, schema, lane, sessions=1)
        self.session_id = self.session_ids[0]
        self.samples: list[float] = []
        self.strict: list[float] = []
        self.steps: list[list[float]] = [[] for _ in FLOOR_STEPS]

    async def prepare(self) -> None:
        self.guard = await self.db.prepare(PG_GUARD)
        self.entry = await self.db.prepare(PG_ENTRY)
        self.task = await self.db.prepare(PG_TASK_INSERT)
        self.outbox = await self.db.prepare(PG_OUTBOX)
        self.claim = await self.db.prepare(PG_FENCE)
        self.started = await self.db.prepare(PG_STARTED)
        self.session_fence = await self.db.prepare(PG_SESSION_FENCE)
        self.outcome = await self.db.prepare(PG_OUTCOME)
        self.settle = await self.db.prepare(PG_SETTLE)

    async def publish(self, body: bytes, routing_key: str) -> None:
        message = aio_pika.Message(
            body, content_type="application/json", delivery_mode=aio_pika.DeliveryMode.PERSISTENT
        )
        await self.exchange.publish(message, routing_key, mandatory=True)

    async def transaction(self, *statements: tuple[Any, tuple[Any, ...]]) -> Any:
        """Run prepared statements in one transaction; return the first one's value."""
        await self.db.execute("BEGIN")
        try:
            first = None
            for n, (stmt, params) in enumerate(statements):
                rows = await stmt.fetch(*params)
                status = stmt.get_statusmsg() or ""
                if n == 0:
                    if not rows:
                        raise RuntimeError("guard failed")
                    first = rows[0][0]
                elif status.startswith("UPDATE") and status != "UPDATE 1":
                    raise RuntimeError(f"{stmt.get_query()[:40]} matched no row")
        except BaseException:
            await self.db.execute("ROLLBACK")
            raise
        await self.db.execute("COMMIT")
        return first

    async def once(self, record: bool) -> None:
        self.n += 1
        sid, n = self.session_id, self.n
        task_id, op = f"floor-task-{self.session_id}-{n}", f"floor-op-{uuid.uuid4().hex}"
        parent = "floor-generate"
        perf = time.perf_counter
        stamps = [perf()]
        # 1. The intents and the job, durable together.
        now = time.time()
        job = json.dumps({"type": "tool_job", "operation_id": op, "tool": "ping", "pool": POOL})
        headers = json.dumps({"session_id": sid})
        await self.transaction(
            (self.guard, (1, 1, now, sid, self.version, self.fence)),
            (self.entry, (sid, n * 2 - 1, "model", MODEL_BODY, now)),
            (self.task, (task_id, sid, parent, "tool", "{}", op, now)),
            (self.outbox, (sid, self.jobs_queue, job.encode(), headers, now)),
        )
        self.version += 1
        stamps.append(perf())
        # 2. Publish the job; 3. take it off the queue.
        await self.publish(job.encode(), self.jobs_queue)
        stamps.append(perf())
        job_message = await self.jobs.get()
        stamps.append(perf())
        # 4. The operation's lease and its fence.
        token = n
        key = f"{self.topology.namespace}:floor:{op}"
        leased = await self.redis.set(key, "w", nx=True, px=10_000)
        if not leased:
            raise RuntimeError("floor lease taken")
        await self.claim.fetch(op, sid, task_id, "ping", POOL, "{}", token, time.time())
        if self.claim.get_statusmsg() != "INSERT 0 1":
            raise RuntimeError("fence claim refused")
        stamps.append(perf())
        await self.started.fetch(time.time(), op, token)
        if self.started.get_statusmsg() != "UPDATE 1":
            raise RuntimeError("started mark matched no row")
        stamps.append(perf())
        # 5. The outcome and its result event, durable together; then the job is acked.
        now = time.time()
        result = json.dumps({"type": "tool_result", "operation_id": op, "status": "succeeded"})
        await self.db.execute("BEGIN")
        try:
            await self.outcome.fetch("{}", now, op, token)
            if self.outcome.get_statusmsg() != "UPDATE 1":
                raise RuntimeError("outcome update matched no row")
            await self.outbox.fetch(sid, self.results_queue, result.encode(), headers, now)
        except BaseException:
            await self.db.execute("ROLLBACK")
            raise
        await self.db.execute("COMMIT")
        await job_message.ack()
        stamps.append(perf())
        # 6. Publish the result; 7. take it off the queue.
        await self.publish(result.encode(), self.results_queue)
        stamps.append(perf())
        result_message = await self.results.get()
        stamps.append(perf())
        # The session's lease and fence, as a Brain takes them for every pass.
        session_key = f"{self.topology.namespace}:floor:session:{sid}"
        if not await self.redis.set(session_key, "b", nx=True, px=10_000):
            raise RuntimeError("floor session lease taken")
        self.fence += 1
        await self.session_fence.fetch(self.fence, sid)
        if self.session_fence.get_statusmsg() != "UPDATE 1":
            raise RuntimeError("session fence claim refused")
        stamps.append(perf())
        # 8. Apply it: the result entry, the task settled.
        now = time.time()
        await self.transaction(
            (self.guard, (1, 1, now, sid, self.version, self.fence)),
            (self.entry, (sid, n * 2, "tool_result", '{"status": "succeeded"}', now)),
            (self.settle, ('{"result": {}}', now, task_id, sid)),
        )
        self.version += 1
        await result_message.ack()
        stamps.append(perf())
        await self.redis.delete(session_key)
        if record:
            steps = [stamps[i + 1] - stamps[i] for i in range(len(FLOOR_STEPS))]
            self.samples.append(sum(steps))
            self.strict.append(sum(steps[i] for i in STRICT_STEPS))
            for i, step in enumerate(steps):
                self.steps[i].append(step)

    async def run(self, count: int, warmup: int = 0) -> None:
        for _ in range(warmup):
            await self.once(record=False)
        for _ in range(count):
            await self.once(record=True)


# Group commit: what the floor would be if calls shared transactions -------------------------

PG_GUARDS = (
    "UPDATE session s SET version = s.version + 1, entry_count = s.entry_count + 1, "
    "updated_at = $4 FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS v(id, version, fence) "
    "WHERE s.id = v.id AND s.version = v.version AND s.fence = v.fence RETURNING s.id"
)
PG_ENTRIES = (
    "INSERT INTO entry (session_id, seq, kind, body, created_at) SELECT sid, seq, $3, "
    "body::json, $5 FROM unnest($1::text[], $2::bigint[], $4::text[]) AS v(sid, seq, body)"
)
PG_TASKS = (
    "INSERT INTO task (id, session_id, parent_id, kind, kind_version, input, status, "
    "operation_id, created_at, updated_at) SELECT tid, sid, 'floor-generate', 'tool', 1, '{}', "
    "'waiting', op, $4, $4 FROM unnest($1::text[], $2::text[], $3::text[]) AS v(tid, sid, op)"
)
PG_OUTBOXES = (
    "INSERT INTO outbox (session_id, routing_key, body, headers, created_at) "
    "SELECT sid, $2, body, '{}', $4 FROM unnest($1::text[], $3::bytea[]) AS v(sid, body)"
)
PG_FENCES = (
    "INSERT INTO operation (operation_id, session_id, task_id, tool, pool, arguments, status, "
    "fence, created_at, updated_at) SELECT op, sid, tid, 'ping', $4, '{}', 'intended', $5, $6, "
    "$6 FROM unnest($1::text[], $2::text[], $3::text[]) AS v(op, sid, tid) "
    "ON CONFLICT (operation_id) DO UPDATE SET fence = EXCLUDED.fence "
    "WHERE operation.fence < EXCLUDED.fence"
)
PG_STARTEDS = (
    "UPDATE operation o SET status = 'started', attempts = attempts + 1, started_at = $2, "
    "updated_at = $2 FROM unnest($1::text[]) AS v(op) WHERE o.operation_id = v.op AND o.fence = $3"
)
PG_OUTCOMES = (
    "UPDATE operation o SET status = 'succeeded', result = '{}', finished_at = $2, "
    "updated_at = $2 FROM unnest($1::text[]) AS v(op) WHERE o.operation_id = v.op AND o.fence = $3"
)
PG_SESSION_FENCES = (
    "UPDATE session s SET fence = v.fence FROM unnest($1::text[], $2::bigint[]) AS v(id, fence) "
    "WHERE s.id = v.id AND s.fence < v.fence"
)
PG_SETTLES = (
    "UPDATE task t SET status = 'terminal', outcome = 'succeeded', result = '{\"result\": {}}', "
    "updated_at = $2 FROM unnest($1::text[]) AS v(id) WHERE t.id = v.id AND t.status = 'waiting'"
)


class BatchedFloor(Lane):
    """The floor's steps for ``batch`` calls of as many sessions at once: each step one
    statement (``unnest`` arrays), one Redis pipeline or one wave of confirmed publishes for
    all of them. Not what the design does (it commits per session): it measures what calls
    sharing transactions and publish waves would buy."""

    def __init__(
        self,
        args: argparse.Namespace,
        topology: Topology,
        dsn: str,
        schema: str,
        lane: int,
        batch: int,
    ):
        super().__init__(args, topology, dsn, schema, lane, sessions=batch)
        self.batch = batch
        self.token = 0

    async def prepare(self) -> None:
        self.guards = await self.db.prepare(PG_GUARDS)
        self.entries = await self.db.prepare(PG_ENTRIES)
        self.tasks = await self.db.prepare(PG_TASKS)
        self.outboxes = await self.db.prepare(PG_OUTBOXES)
        self.fences = await self.db.prepare(PG_FENCES)
        self.starteds = await self.db.prepare(PG_STARTEDS)
        self.outcomes = await self.db.prepare(PG_OUTCOMES)
        self.session_fences = await self.db.prepare(PG_SESSION_FENCES)
        self.settles = await self.db.prepare(PG_SETTLES)

    async def publish_wave(self, bodies: list[bytes], routing_key: str) -> None:
        """Publish ``bodies`` at once; return when the broker confirmed them all."""
        await asyncio.gather(
            *(
                self.exchange.publish(
                    aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key,
                    mandatory=True,
                )
                for body in bodies
            )
        )

    async def take(self, inbox: asyncio.Queue[AbstractIncomingMessage]) -> list[Any]:
        return [await inbox.get() for _ in range(self.batch)]

    async def lease_all(self, keys: list[str]) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.set(key, "w", nx=True, px=10_000)
            if not all(await pipe.execute()):
                raise RuntimeError("floor lease taken")

    async def guard_all(self, now: float) -> None:
        versions, fences = [self.version] * self.batch, [self.fence] * self.batch
        if len(await self.guards.fetch(self.session_ids, versions, fences, now)) != self.batch:
            raise RuntimeError("guard failed")
        self.version += 1

    async def once(self) -> None:
        self.n += 1
        b, sids, n = self.batch, self.session_ids, self.n
        ops = [f"floor-op-{uuid.uuid4().hex}" for _ in range(b)]
        task_ids = [f"floor-task-{op}" for op in ops]
        jobs = [json.dumps({"type": "tool_job", "operation_id": op}).encode() for op in ops]
        now = time.time()
        async with self.db.transaction():
            await self.guard_all(now)
            await self.entries.fetch(sids, [n * 2 - 1] * b, "model", [MODEL_BODY] * b, now)
            await self.tasks.fetch(task_ids, sids, ops, now)
            await self.outboxes.fetch(sids, self.jobs_queue, jobs, now)
        await self.publish_wave(jobs, self.jobs_queue)
        job_messages = await self.take(self.jobs)
        self.token += 1
        await self.lease_all([f"{self.topology.namespace}:floor:{op}" for op in ops])
        await self.fences.fetch(ops, sids, task_ids, POOL, self.token, time.time())
        await self.starteds.fetch(ops, time.time(), self.token)
        results = [json.dumps({"type": "tool_result", "operation_id": op}).encode() for op in ops]
        async with self.db.transaction():
            await self.outcomes.fetch(ops, time.time(), self.token)
            await self.outboxes.fetch(sids, self.results_queue, results, time.time())
        for message in job_messages:
            await message.ack()
        await self.publish_wave(results, self.results_queue)
        result_messages = await self.take(self.results)
        session_keys = [f"{self.topology.namespace}:floor:session:{sid}" for sid in sids]
        await self.lease_all(session_keys)
        self.fence += 1
        await self.session_fences.fetch(sids, [self.fence] * b)
        now = time.time()
        async with self.db.transaction():
            await self.guard_all(now)
            body = '{"status": "succeeded"}'
            await self.entries.fetch(sids, [n * 2] * b, "tool_result", [body] * b, now)
            await self.settles.fetch(task_ids, now)
        for message in result_messages:
            await message.ack()
        await self.redis.delete(*session_keys)

    async def run(self, count: int, warmup: int = 0) -> None:
        """``count`` batches of round trips (after ``warmup`` unmeasured ones)."""
        for _ in range(count + warmup):
            await self.once()


# Throughput: many lanes at once ------------------------------------------------------------


@dataclass
class FloorRate:
    """What the floor's lanes did at once."""

    rate: float
    """Round trips per second (the slowest process's clock)."""
    cpu: float
    """CPU seconds the lane processes spent per round trip: both sides of a call, on the
    bare drivers, with no logic of ours -- the yardstick for our processes' CPU per call."""


async def floor_throughput(
    args: argparse.Namespace,
    namespace: str,
    dsn: str,
    schema: str,
    batch: int = 1,
    queue_type: QueueType = "quorum",
) -> FloorRate:
    """Round trips per second of ``args.floor_lanes`` floors running back to back at once,
    spread over ``FLOOR_PROCESSES`` processes (``python -m bench.roundtrip_floor``), each lane
    on connections of its own and queues of its own; ``args.floor_burst`` round trips in all
    (``batch`` > 1: lanes of ``BatchedFloor``). The clock of each process starts when all
    are set up and warm; the slowest one's counts."""
    per_lane = max(1, args.floor_burst // (args.floor_lanes * batch))
    lanes = list(range(1, args.floor_lanes + 1))
    groups = [lanes[i::FLOOR_PROCESSES] for i in range(FLOOR_PROCESSES) if lanes[i:]]
    procs: list[asyncio.subprocess.Process] = []
    try:
        for group in groups:
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "bench.roundtrip_floor",
                    *("--namespace", namespace, "--schema", schema, "--dsn", dsn),
                    *("--lanes", ",".join(map(str, group)), "--count", str(per_lane)),
                    *("--batch", str(batch), "--queue-type", queue_type),
                    *("--rabbitmq-url", args.rabbitmq_url, "--redis-url", args.redis_url),
                    cwd=ROOT,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
            )
        for proc in procs:
            await _expect(proc, args.timeout, "ready")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        done = [json.loads(await _expect(proc, args.timeout)) for proc in procs]
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
    count = sum(d["count"] for d in done)
    return FloorRate(
        rate=count / max(d["seconds"] for d in done), cpu=sum(d["cpu"] for d in done) / count
    )


async def _expect(proc: asyncio.subprocess.Process, within: float, line: str = "") -> str:
    """The next line a lane process prints; it must be ``line`` if one is given."""
    assert proc.stdout is not None
    got = (await asyncio.wait_for(proc.stdout.readline(), within)).decode().strip()
    if not got or (line and got != line):
        raise RuntimeError(f"floor lane process printed {got!r}, not {line or 'its result'!r}")
    return got


async def run_lanes(args: argparse.Namespace) -> None:
    """One lane process: set up and warm its lanes, say ``ready``, wait for ``go`` on stdin,
    run ``--count`` round trips (of ``--batch`` calls) in each lane at once, print the count
    of calls, the seconds and the process's CPU seconds."""
    topology = Topology(args.namespace, queue_type=args.queue_type)
    floors: list[Floor | BatchedFloor] = [
        Floor(args, topology, args.dsn, args.schema, lane)
        if args.batch == 1
        else BatchedFloor(args, topology, args.dsn, args.schema, lane, args.batch)
        for lane in args.lanes
    ]
    async with contextlib.AsyncExitStack() as stack:
        for floor in floors:
            await stack.enter_async_context(floor)
        await asyncio.gather(*(floor.run(0, warmup=LANE_WARMUP) for floor in floors))
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(floor.run(args.count) for floor in floors))
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        count = args.count * len(floors) * args.batch
        print(json.dumps({"count": count, "seconds": seconds, "cpu": cpu}), flush=True)


if __name__ == "__main__":
    parser = new_parser(__doc__)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--lanes", type=lambda v: [int(n) for n in v.split(",")], required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--queue-type", choices=get_args(QueueType), default="quorum")
    add_service_urls(parser, "rabbitmq", "redis")
    asyncio.run(run_lanes(parser.parse_args()))
