"""Brain worker processes for tests, and the client side of a session."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brainhands.client.direct import Client
from brainhands.shared.config import normalize_database_url
from brainhands.shared.store import Store, SubmissionRecord
from brainhands.shared.store.submissions import SubmitReceipt
from brainhands.shared.tools import load_tool_modules
from tests.helpers.processes import spawn_module
from tests.helpers.rabbit import BrokerEnv, broker_env
from tests.helpers.stores import StoreTarget, drop_schema
from tests.helpers.submitting import submit_input, wait_for_answer


@dataclass
class BrainHarness:
    store: Store
    target: StoreTarget
    env: BrokerEnv
    redis_url: str
    tmp_path: Path
    lease_ttl_ms: int = 1500
    sweeper_period: float = 0.5
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def settings(self, **extra: str) -> dict[str, str]:
        return {
            **self.target.env(),
            "BRAINHANDS_RABBITMQ_URL": self.env.url,
            "BRAINHANDS_REDIS_URL": self.redis_url,
            "BRAINHANDS_NAMESPACE": self.env.topology.namespace,
            "BRAINHANDS_LEASE_TTL_MS": str(self.lease_ttl_ms),
            "BRAINHANDS_SWEEPER_PERIOD": str(self.sweeper_period),
            "BRAINHANDS_REDISPATCH_AFTER": "5",
            "BRAINHANDS_SWEEPER_BACKLOG_GRACE": "3",
            "BRAINHANDS_MAX_RESTARTS": "3",
            **extra,
        }

    def start_brain(
        self,
        *,
        tasks: str | None = "tests.helpers.kinds",
        compats: tuple[str, ...] = ("v1",),
        agents: str | None = None,
        die_at_commit: int | None = None,
        die: str = "after",
        die_rule: str | None = None,
        without_hands: bool = False,
        **extra: str,
    ) -> subprocess.Popen[bytes]:
        """A real Brain process; with ``die_at_commit`` (or a ``brain_victim`` rule) it
        exits hard at that commit; ``without_hands``: ``brainhands.hands`` cannot be
        imported in it."""
        args = ["brain", *(a for c in compats for a in ("--compat", c))]
        if tasks:
            args += ["--tasks", tasks]
        if agents:
            args += ["--agents", agents]
        if die_at_commit is not None:
            die_rule = f"{die}:{die_at_commit}"
        if without_hands:
            module, argv = "tests.helpers.brain_without_hands", args
        elif die_rule is None:
            module, argv = "brainhands", args
        else:
            module, argv = "tests.helpers.brain_victim", [die_rule, *args]
        proc = spawn_module(
            module,
            *argv,
            env=self.settings(**extra),
            log=self.tmp_path / f"brain{len(self.processes)}.log",
        )
        self.processes.append(proc)
        return proc

    async def declare_tools(self, module: str = "tests.helpers.tools") -> None:
        """Leave in the store what Hands serving ``module`` declare when they start (as if
        they had run once), for Brains that run with no Hands."""
        specs = load_tool_modules([module])
        await self.store.declarations.declare_tools([spec.declaration() for spec in specs])

    def log(self, n: int) -> str:
        return (self.tmp_path / f"brain{n}.log").read_text()

    async def submit(
        self,
        kind: str,
        input: Any,
        *,
        request_id: str = "r1",
        session_id: str = "s1",
        compat: str = "v1",
    ) -> SubmitReceipt:
        return await submit_input(
            self.store,
            self.env.topology,
            session_id=session_id,
            request_id=request_id,
            input={"kind": kind, "input": input},
            compat=compat,
        )

    async def answer(
        self, *, request_id: str = "r1", session_id: str = "s1", within: float = 30
    ) -> SubmissionRecord:
        return await wait_for_answer(self.store, session_id, request_id, within=within)

    @contextlib.asynccontextmanager
    async def client(self, **options: Any) -> AsyncIterator[Client]:
        """A ``brainhands.Client`` of this deployment (``options``: ``Client.connect``'s)."""
        client = await Client.connect(
            database_url=self.target.url,
            database_schema=self.target.schema,
            rabbitmq_url=self.env.url,
            namespace=self.env.topology.namespace,
            **options,
        )
        try:
            yield client
        finally:
            await client.close()

    def kill_all(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@contextlib.asynccontextmanager
async def brain_deployment(
    postgres_url: str,
    rabbitmq_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
    target: StoreTarget | None = None,
) -> AsyncIterator[BrainHarness]:
    """A deployment of its own, for Brain processes the test starts: a PostgreSQL schema
    (or the store ``target``) and a broker topology named ``namespace``, its logs in
    ``tmp_path``; all removed after."""
    own_schema = target is None
    if target is None:
        target = StoreTarget(normalize_database_url(postgres_url), namespace)
    store = await Store.open(target.url, upgrade=True, db_schema=target.schema)
    async with broker_env(rabbitmq_url, namespace) as env:
        harness = BrainHarness(store, target, env, redis_url, tmp_path)
        await harness.env.brain_queue("v1")
        try:
            yield harness
        finally:
            harness.kill_all()
            await store.close()
            if own_schema:
                await drop_schema(target.url, namespace)
