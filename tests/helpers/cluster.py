"""The notify example as a real deployment for the chaos suite: PostgreSQL, RabbitMQ, Redis,
the email service, and Brain, Hands and sweeper processes that tests kill and freeze.

``check_invariants`` judges a run by the email service's own ledger and the store.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import func, select

from brainhands.examples.notify.email_client import EmailClient
from brainhands.shared.store import FINAL_OPERATION_STATUSES, Store, schema
from brainhands.shared.topology import QueueType
from tests.helpers.harness import start_email_service
from tests.helpers.netns import Link, partitioned
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module
from tests.helpers.rabbit import BrokerEnv, broker_env
from tests.helpers.stores import StoreTarget
from tests.helpers.submitting import submit_input

RECIPIENTS = ["ana", "bo", "chen", "dana", "eli"]
BRAIN = [
    "brain",
    "--compat",
    "v1",
    "--tasks",
    "brainhands.examples.notify.tasks",
]
HANDS = [
    "hands",
    "--pool",
    "email",
    "--tools",
    "brainhands.examples.notify.tools",
    "--tools",
    "tests.helpers.tools",
]
CHAOS_REPORT: list[dict[str, Any]] = []
"""One row per chaos test: what it broke and which invariants it checked."""


@dataclass
class Cluster:
    store: Store
    target: StoreTarget
    env: BrokerEnv
    redis_url: str
    email_url: str
    tmp_path: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    kills: Counter[str] = field(default_factory=Counter)
    sessions: list[str] = field(default_factory=list)

    @property
    def email(self) -> EmailClient:
        return EmailClient(self.email_url)

    def settings(self, **extra: str) -> dict[str, str]:
        return {
            **self.target.env(),
            "BRAINHANDS_RABBITMQ_URL": self.env.url,
            "BRAINHANDS_REDIS_URL": self.redis_url,
            "BRAINHANDS_NAMESPACE": self.env.topology.namespace,
            "BRAINHANDS_QUEUE_TYPE": self.env.topology.queue_type,
            "BRAINHANDS_LEASE_TTL_MS": "1500",
            "BRAINHANDS_SWEEPER_PERIOD": "0.5",
            "BRAINHANDS_REDISPATCH_AFTER": "4",
            "BRAINHANDS_SWEEPER_BACKLOG_GRACE": "3",
            "BRAINHANDS_SHUTDOWN_GRACE": "2",
            "NOTIFY_EMAIL_URL": self.email_url,
            "TEST_EMAIL_URL": self.email_url,
            **extra,
        }

    @contextlib.asynccontextmanager
    async def link(self) -> AsyncIterator[Link]:
        """A network namespace whose relays reach this deployment's store, RabbitMQ, Redis
        and email service (``tests/helpers/netns.py``); a worker started in it with
        ``prefix=link.prefix, **cluster.behind(link)`` is behind a link that can be cut."""
        urls = (self.target.url, self.env.url, self.redis_url, self.email_url)
        ports = [urlsplit(url).port or 0 for url in urls]
        async with partitioned(ports, postgres_port=ports[0]) as made:
            try:
                yield made
            finally:
                self.stop_all()  # before the namespace goes: nothing is left running in it

    def behind(self, link: Link) -> dict[str, str]:
        """The settings of a worker in ``link``'s namespace: every service through the link."""
        email = link.url(self.email_url)
        return {
            "BRAINHANDS_DATABASE_URL": link.url(self.target.url),
            "BRAINHANDS_RABBITMQ_URL": link.url(self.env.url),
            "BRAINHANDS_REDIS_URL": link.url(self.redis_url),
            "NOTIFY_EMAIL_URL": email,
            "TEST_EMAIL_URL": email,
        }

    def start(
        self, name: str, *, victim: str | None = None, prefix: Sequence[str] = (), **extra: str
    ) -> subprocess.Popen[bytes]:
        """Start (or restart) worker ``name``: brain-*, hands-*, or sweeper; ``prefix``: a
        command that runs it (``netns.Link.prefix``: behind a link the test can cut)."""
        role = name.split("-")[0]
        argv = {"brain": BRAIN, "hands": HANDS, "sweeper": ["sweeper"]}[role]
        if victim and role == "hands":
            module, args = "tests.helpers.hands_victim", [victim, *argv]
        elif victim:
            module, args = "tests.helpers.brain_victim", [victim, *argv]
        else:
            module, args = "brainhands", argv
        proc = spawn_module(
            module,
            *args,
            env=self.settings(**extra),
            log=self.tmp_path / f"{name}.log",
            prefix=prefix,
        )
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        proc = self.procs[name]
        proc.send_signal(sig)
        if sig == signal.SIGKILL:
            proc.wait()
        self.kills[f"{sig.name} {name.split('-')[0]}"] += 1

    def log(self, name: str) -> str:
        return (self.tmp_path / f"{name}.log").read_text(errors="replace")

    async def submit_batches(
        self, count: int, *, tool: str = "send_email", recipients: list[str] = RECIPIENTS
    ) -> None:
        for n in range(count):
            session = f"batch-{len(self.sessions)}"
            self.sessions.append(session)
            await submit_input(
                self.store,
                self.env.topology,
                session_id=session,
                request_id="r1",
                input={
                    "kind": "notice-batch",
                    "input": {
                        "recipients": [f"{r}{n}@example.com" for r in recipients],
                        "subject": "notice",
                        "body": "approved text",
                        "tool": tool,
                    },
                },
                compat="v1",
            )

    async def all_done(self) -> bool:
        sub = schema.submission
        async with self.store.backend.engine.connect() as conn:
            open_count = await conn.execute(
                select(func.count()).select_from(sub).where(sub.c.status.in_(("queued", "running")))
            )
            return open_count.scalar_one() == 0

    async def wait_done(self, within: float = 90) -> None:
        await eventually(self.all_done, within=within, what="every session to finish")

    async def outbox_drained(self) -> bool:
        async with self.store.backend.engine.connect() as conn:
            unsent = await conn.execute(
                select(func.count())
                .select_from(schema.outbox)
                .where(schema.outbox.c.sent_at.is_(None))
            )
            return unsent.scalar_one() == 0

    async def operations_started(self, count: int) -> bool:
        """At least ``count`` calls claimed and not ended (a safe or query call has no
        ``started`` mark: it goes out right after its claim)."""
        o = schema.operation
        async with self.store.backend.engine.connect() as conn:
            started = await conn.execute(
                select(func.count())
                .select_from(o)
                .where(o.c.status.not_in(FINAL_OPERATION_STATUSES))
            )
            return started.scalar_one() >= count

    async def check_invariants(
        self, test: str, *, unsafe: bool = False, expect_failed: int = 0
    ) -> dict[str, Any]:
        """Every session terminal; every email once (unsafe: at most once, else uncertain);
        no tool result applied twice; no outbox row lost. Returns what was checked."""
        ledger = await self.email.ledger()
        sends = Counter(s["key"] for s in ledger["sends"])
        unsafe_sends = Counter(s["key"] for s in ledger["unsafe_sends"])
        receipts = {s["key"]: s["receipt"] for s in ledger["sends"]}
        failed = applied_twice = 0
        emails = 0
        for session in self.sessions:
            tasks, operations = await self.store.queries.history(session)
            assert all(t.status == "terminal" for t in tasks), f"{session} has open tasks"
            ops_by_task = Counter(o.task_id for o in operations)
            applied_twice += sum(n > 1 for n in ops_by_task.values())
            for notice in (t for t in tasks if t.kind == "send-notice"):
                emails += 1
                key = notice.input["key"]
                if notice.outcome != "succeeded":
                    failed += 1
                    if unsafe:
                        assert unsafe_sends[key] <= 1, key
                    continue
                if unsafe:
                    assert unsafe_sends[key] == 1, key
                else:
                    assert sends[key] == 1 and receipts[key] == notice.result["receipt"], key
        if unsafe:
            uncertain = [
                o
                for s in self.sessions
                for o in (await self.store.queries.history(s))[1]
                if o.status != "succeeded"
            ]
            assert all(o.status in ("uncertain", "failed") for o in uncertain)
        assert failed == expect_failed, f"{failed} emails failed, expected {expect_failed}"
        assert applied_twice == 0
        # Lost means never published: a relay backing off after an outage may take a while.
        await eventually(self.outbox_drained, within=60, what="every outbox row published")
        row = {
            "test": test,
            "sessions": len(self.sessions),
            "emails": emails,
            "kills": dict(self.kills),
            "failed": failed,
            "invariants": "terminal, once-in-ledger, no double apply, no lost outbox",
        }
        CHAOS_REPORT.append(row)
        return row

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait()


@contextlib.asynccontextmanager
async def deployment(
    target: StoreTarget,
    rabbitmq_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
    queue_type: QueueType = "quorum",
) -> AsyncIterator[Cluster]:
    """The whole deployment on ``target``'s store, its queues declared (of ``queue_type``),
    its email service started; every process it started is stopped on the way out."""
    store = await Store.open(target.url, upgrade=True, db_schema=target.schema)
    service, email_url = await start_email_service(tmp_path)
    async with broker_env(rabbitmq_url, namespace, queue_type=queue_type) as env:
        await env.brain_queue("v1")
        await env.hands_queue("email")
        cluster = Cluster(store, target, env, redis_url, email_url, tmp_path)
        try:
            yield cluster
        finally:
            cluster.stop_all()
            service.kill()
            service.wait()
            await store.close()
