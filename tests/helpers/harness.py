"""A whole Hands deployment for tests: real store, broker, Redis, email service, and worker
processes started and killed as the test says."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brainhands.examples.notify.email_client import EmailClient
from brainhands.shared.config import normalize_database_url
from brainhands.shared.delivery import Delivery
from brainhands.shared.messages import Message, ToolJob, ToolResult
from brainhands.shared.store import (
    FINAL_OPERATION_STATUSES,
    OperationLedger,
    OperationRecord,
    Store,
    object_store_at,
)
from brainhands.shared.topology import QueueType
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module
from tests.helpers.rabbit import BrokerEnv, broker_env
from tests.helpers.stores import StoreTarget, drop_schema


async def start_email_service(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start the example email service on a free port; return the process and its URL."""
    port_file = tmp_path / "email.port"
    proc = spawn_module(
        "brainhands.examples.notify.email_service",
        "--port",
        "0",
        "--db",
        str(tmp_path / "email.db"),
        "--port-file",
        str(port_file),
        *flags,
        log=tmp_path / "email.log",
    )
    await eventually(port_file.exists, within=15, what="the email service to listen")
    return proc, f"http://127.0.0.1:{port_file.read_text().strip()}"


@dataclass
class HandsHarness:
    """Publishes jobs like a Brain would, and watches results, the ledger and the service."""

    store: Store
    target: StoreTarget
    env: BrokerEnv
    email_url: str
    redis_url: str
    tmp_path: Path
    lease_ttl_ms: int = 1500
    pool: str = "email"
    """The pool the workers serve and the jobs go to."""
    tool_args: tuple[str, ...] = ("--tools", "tests.helpers.tools")
    """What tells the workers their tools (``brainhands hands`` options)."""
    workspace_objects: str | None = None
    """The object store of workspace objects' bytes, the workers' and the harness's store's."""
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)

    @property
    def email(self) -> EmailClient:
        return EmailClient(self.email_url)

    @property
    def ledger(self) -> OperationLedger:
        return self.store.ledger

    async def start(self) -> None:
        await self.env.hands_queue(self.pool)
        results = await self.env.results_queue("v1")
        await self.env.broker.consume(results, self._collect)

    async def _collect(self, message: Message, delivery: Delivery) -> None:
        assert isinstance(message, ToolResult)
        self.results.append(message)
        await delivery.ack()

    def worker_env(self, **extra: str) -> dict[str, str]:
        objects = self.workspace_objects
        return {
            **self.target.env(),
            "BRAINHANDS_RABBITMQ_URL": self.env.url,
            "BRAINHANDS_REDIS_URL": self.redis_url,
            "BRAINHANDS_NAMESPACE": self.env.topology.namespace,
            "BRAINHANDS_LEASE_TTL_MS": str(self.lease_ttl_ms),
            "BRAINHANDS_DELIVERY_LIMIT": str(self.env.topology.delivery_limit),
            "BRAINHANDS_QUEUE_TYPE": self.env.topology.queue_type,
            "BRAINHANDS_SHUTDOWN_GRACE": "5",
            "TEST_EMAIL_URL": self.email_url,
            **({"BRAINHANDS_WORKSPACE_OBJECTS": objects} if objects else {}),
            **extra,
        }

    def start_worker(self, *, concurrency: int = 8, **extra: str) -> subprocess.Popen[bytes]:
        """A real ``brainhands hands`` process for the harness's pool."""
        n = len(self.workers)
        proc = spawn_module(
            "brainhands",
            "hands",
            "--pool",
            self.pool,
            *self.tool_args,
            "--concurrency",
            str(concurrency),
            env=self.worker_env(**extra),
            log=self.tmp_path / f"worker{n}.log",
        )
        self.workers.append(proc)
        return proc

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        return (self.tmp_path / f"worker{self.workers.index(proc)}.log").read_text()

    def job(self, tool: str, arguments: dict[str, Any], operation_id: str | None = None) -> ToolJob:
        op = operation_id or f"op-{uuid.uuid4().hex[:10]}"
        return ToolJob(
            operation_id=op,
            tool=tool,
            arguments=arguments,
            session_id="s1",
            task_id=f"task-{op}",
            compat="v1",
            pool=self.pool,
        )

    async def publish(self, job: ToolJob) -> None:
        await self.env.broker.publish(job, self.env.topology.hands_queue(self.pool))

    async def outcome(self, operation_id: str, *, within: float = 30) -> OperationRecord:
        """Wait until the operation has an outcome and its result event arrived."""

        async def done() -> bool:
            try:
                op = await self.ledger.get(operation_id)
            except Exception:
                return False
            return op.status in FINAL_OPERATION_STATUSES and any(
                r.operation_id == operation_id for r in self.results
            )

        await eventually(done, within=within, what=f"an outcome for {operation_id}")
        return await self.ledger.get(operation_id)

    async def service_has(self, key: str) -> bool:
        ledger = await self.email.ledger()
        return any(s["key"] == key for s in ledger["sends"] + ledger["unsafe_sends"])

    def kill_all(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait()


@contextlib.asynccontextmanager
async def hands_deployment(
    target: StoreTarget,
    rabbitmq_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
    *,
    delivery_limit: int = 5,
    queue_type: QueueType = "quorum",
    pool: str = "email",
    tool_args: tuple[str, ...] = ("--tools", "tests.helpers.tools"),
    workspace_objects: str | None = None,
) -> AsyncIterator[HandsHarness]:
    """A harness on ``target``'s store; every worker it started is killed on the way out.
    The store's schema or file is the caller's to drop."""
    store = await Store.open(
        target.url,
        upgrade=True,
        db_schema=target.schema,
        workspace_objects=object_store_at(workspace_objects, "workspace_objects"),
    )
    service, email_url = await start_email_service(tmp_path)
    async with broker_env(
        rabbitmq_url, namespace, delivery_limit=delivery_limit, queue_type=queue_type
    ) as env:
        harness = HandsHarness(
            store,
            target,
            env,
            email_url,
            redis_url,
            tmp_path,
            pool=pool,
            tool_args=tool_args,
            workspace_objects=workspace_objects,
        )
        await harness.start()
        try:
            yield harness
        finally:
            harness.kill_all()
            service.kill()
            service.wait()
            await store.close()


@contextlib.asynccontextmanager
async def pool_on_postgres(
    postgres_url: str,
    rabbitmq_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
    *,
    pool: str,
    tools: str,
    workspace_objects: str | None = None,
) -> AsyncIterator[HandsHarness]:
    """A harness for ``pool``, its workers serving the tools of the module ``tools``, on a
    PostgreSQL schema of its own, dropped on the way out."""
    target = StoreTarget(normalize_database_url(postgres_url), namespace)
    try:
        async with hands_deployment(
            target,
            rabbitmq_url,
            redis_url,
            namespace,
            tmp_path,
            pool=pool,
            tool_args=("--tools", tools),
            workspace_objects=workspace_objects,
        ) as harness:
            yield harness
    finally:
        await drop_schema(target.url, namespace)
