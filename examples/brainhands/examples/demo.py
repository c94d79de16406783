"""``brainhands demo``: five emails, Brain and Hands worker processes, and a chaos monkey.

It starts the example email service, 2 Brain workers, 3 Hands workers and a sweeper as
separate processes, asks the notify agent to send an approved notice to five customers,
and -- with chaos on -- SIGKILLs a random worker every few hundred milliseconds and starts
it again. At the end it checks the email service's own ledger: every email sent exactly
once, and a summary produced.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import aio_pika

import brainhands.examples.notify
from brainhands.client.direct import Client
from brainhands.examples.notify.email_client import EmailClient
from brainhands.shared.config import CommonSettings, load_settings, normalize_database_url
from brainhands.shared.store import FINAL_SUBMISSION_STATUSES, Store, TaskRecord
from brainhands.shared.topology import Topology

SESSION = "demo"
REQUEST = "notice-1"
PROMPT = "Send the approved notice to these {n} customers and summarize the results."
EMAIL_STATES = {
    ("pending", "send"): "queued",
    ("running", "send"): "sending",
    ("waiting", "confirm"): "sending",
    ("sleeping", "verify"): "receipt lost: will ask",
    ("running", "verify"): "asking the service",
    ("waiting", "decide"): "asking the service",
    ("running", "confirm"): "reading outcome",
    ("running", "decide"): "reading answer",
    ("running", "done"): "recording",
}


@dataclass
class Worker:
    """One worker process the demo runs (and, with chaos, kills and restarts)."""

    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    log_offset: int = 0
    started_at: float = 0.0
    kills: int = 0
    restart_at: float | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def role(self) -> str:
        return self.name.split("-")[0]

    def ready(self) -> bool:
        """Up and serving: this incarnation's log says it consumes (the sweeper: it runs)."""
        if not self.alive or self.log is None:
            return False
        if self.role == "sweeper":
            return time.monotonic() - self.started_at > 1.5
        marker = b'"event": "api_listening"' if self.role == "api" else b'"event": "consuming"'
        with self.log.open("rb") as log:
            log.seek(self.log_offset)
            return marker in log.read()


@dataclass
class Demo:
    recipients: int = 5
    brains: int = 2
    hands: int = 3
    chaos: bool = True
    approve: bool = False
    """The batch waits for approval; the demo gives it through the client, mid-chaos."""
    kill_interval: tuple[float, float] = (0.2, 0.6)
    store_url: str | None = None
    rabbitmq_url: str = "amqp://guest:guest@127.0.0.1:5672/"
    redis_url: str = "redis://127.0.0.1:6379/0"
    timeout: float = 110.0
    seed: int | None = None
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bh-demo-")))
    workers: list[Worker] = field(default_factory=list)
    email_proc: subprocess.Popen[bytes] | None = None
    namespace: str = field(default_factory=lambda: f"demo{uuid.uuid4().hex[:8]}")

    def say(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    async def run(self) -> int:
        with contextlib.ExitStack() as containers:
            problem = services_problem(self.rabbitmq_url, self.redis_url)
            if problem and docker_available():
                self.say("RabbitMQ or Redis not reachable: starting them with testcontainers")
                self.rabbitmq_url, self.redis_url = start_containers(containers)
                problem = None
            if problem:
                print(problem, file=sys.stderr)
                return 2
            return await self._run()

    async def _run(self) -> int:
        rng = random.Random(self.seed)
        store_url = normalize_database_url(
            self.store_url or f"sqlite:///{self.workdir / 'store.db'}"
        )
        store = await Store.open(store_url, upgrade=True)
        try:
            email_url = await self._start_email_service()
            env = self._env(store_url, email_url)
            self._plan_workers()
            for worker in self.workers:
                self._start(worker, env)
            console = f"http://127.0.0.1:{env['BRAINHANDS_API_PORT']}/console/sessions/{SESSION}"
            self.say(f"console (no login, local only): {console}")
            async with await Client.connect(
                database_url=store_url, rabbitmq_url=self.rabbitmq_url, namespace=self.namespace
            ) as client:
                prompt = PROMPT.format(n=self.recipients)
                await client.submit(SESSION, prompt, agent="notifier", request_id=REQUEST)
                self.say(f"submitted: {prompt!r}")
                answered = await self._watch(store, client, env, rng)
                code = await self._report(store, email_url, answered)
        finally:
            self._stop_all()
            await store.close()
            await delete_namespace(self.rabbitmq_url, self.namespace)
        if code == 0:
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            print(f"logs, store and email ledger kept in {self.workdir}")
        return code

    # Processes -------------------------------------------------------------------------

    async def _start_email_service(self) -> str:
        port_file = self.workdir / "email.port"
        self.email_proc = subprocess.Popen(  # noqa: ASYNC220 - started once, not awaited
            [
                sys.executable,
                "-m",
                "brainhands.examples.notify.email_service",
                "--port",
                "0",
                "--db",
                str(self.workdir / "email.db"),
                "--port-file",
                str(port_file),
                "--delay",
                "0.15",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(200):
            if port_file.exists():
                break
            await asyncio.sleep(0.05)
        url = f"http://127.0.0.1:{port_file.read_text().strip()}"
        # The seed article's fourth email: accepted, then the answer is lost in flight.
        # And one transient failure before anything is stored.
        await EmailClient(url).set_faults(drop_next=1, fail_next=1)
        self.say(f"email service up at {url} (slow, one dropped receipt, one 503)")
        return url

    def _script(self) -> Path:
        """The scripted model's turns, for this run's number of recipients."""
        script = Path(brainhands.examples.notify.__file__).parent / "script.json"
        template = json.loads(script.read_text())
        names = ["ana", "bo", "chen", "dana", "eli", "fay", "gus", "hana", "ivo", "jun"]
        call = template["turns"][0]["tool_calls"][0]["arguments"]
        call["recipients"] = [
            f"{names[n % len(names)]}{'' if n < len(names) else n}@customer-{n + 1}.example"
            for n in range(self.recipients)
        ]
        template["turns"][1]["text"] = (
            f"Done: the approved notice went to all {self.recipients} customers, each exactly "
            "once. The batch summary and every receipt are recorded in the session."
        )
        path = self.workdir / "script.json"
        path.write_text(json.dumps(template))
        return path

    def _env(self, store_url: str, email_url: str) -> dict[str, str]:
        return {
            **os.environ,
            "BRAINHANDS_DATABASE_URL": store_url,
            "BRAINHANDS_RABBITMQ_URL": self.rabbitmq_url,
            "BRAINHANDS_REDIS_URL": self.redis_url,
            "BRAINHANDS_NAMESPACE": self.namespace,
            "BRAINHANDS_LEASE_TTL_MS": "2000",
            "BRAINHANDS_SWEEPER_PERIOD": "0.5",
            "BRAINHANDS_REDISPATCH_AFTER": "4",
            "BRAINHANDS_SHUTDOWN_GRACE": "2",
            "NOTIFY_EMAIL_URL": email_url,
            "NOTIFY_SCRIPT": str(self._script()),
            # The console, for this run only: on loopback, with no keys.
            "BRAINHANDS_API_AUTH": "none",
            "BRAINHANDS_API_PORT": str(free_port()),
            **({"NOTIFY_APPROVE": "1"} if self.approve else {}),
        }

    def _plan_workers(self) -> None:
        brain = [
            "brain",
            "--compat",
            "v1",
            "--agents",
            "brainhands.examples.notify.agent",
            "--tasks",
            "brainhands.examples.notify.tasks",
        ]
        hands = ["hands", "--pool", "email", "--tools", "brainhands.examples.notify.tools"]
        self.workers = [Worker(f"brain-{n + 1}", brain) for n in range(self.brains)]
        self.workers += [Worker(f"hands-{n + 1}", hands) for n in range(self.hands)]
        self.workers.append(Worker("sweeper", ["sweeper"]))
        self.workers.append(Worker("api", ["api"]))  # never a chaos victim: the only one

    def _start(self, worker: Worker, env: dict[str, str]) -> None:
        worker.log = self.workdir / f"{worker.name}.log"
        log = worker.log.open("ab")
        worker.log_offset = log.tell()
        worker.started_at = time.monotonic()
        worker.proc = subprocess.Popen(
            [sys.executable, "-m", "brainhands", *worker.argv],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()  # the child has its own descriptor
        worker.restart_at = None

    def _stop_all(self) -> None:
        procs = [w.proc for w in self.workers if w.proc] + [self.email_proc]
        for proc in procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in procs:
            if proc is None:
                continue
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # Watching and chaos ----------------------------------------------------------------

    async def _watch(
        self, store: Store, client: Client, env: dict[str, str], rng: random.Random
    ) -> bool:
        started = time.monotonic()
        next_kill = started + 1.5 + rng.uniform(*self.kill_interval)
        last_line = ""
        while time.monotonic() - started < self.timeout:
            now = time.monotonic()
            for worker in self.workers:
                if worker.restart_at is not None and now >= worker.restart_at:
                    self._start(worker, env)
                    self.say(f"restarted {worker.name}")
                elif not worker.alive and worker.restart_at is None:
                    worker.restart_at = now + 0.5
            if self.chaos and now >= next_kill:
                self._kill_one(rng, now)
                next_kill = now + rng.uniform(*self.kill_interval)
            if self.approve:
                await self._approve_pending(client)
            line = await self._progress(store)
            if line != last_line:
                self.say(line)
                last_line = line
            record = await store.submissions.get(SESSION, REQUEST)
            if record.status in FINAL_SUBMISSION_STATUSES:
                self.say(f"submission {record.status} after {time.monotonic() - started:.1f}s")
                return record.status == "answered"
            await asyncio.sleep(0.1)
        self.say(f"gave up after {self.timeout:.0f}s")
        return False

    def _kill_one(self, rng: random.Random, now: float) -> None:
        """SIGKILL a random serving worker -- never the last serving one of its role, so
        the run shows recovery rather than a full outage."""
        ready = [w for w in self.workers if w.ready()]
        victims = [
            w for w in ready if w.role == "sweeper" or sum(o.role == w.role for o in ready) > 1
        ]
        if not victims:
            return
        victim = rng.choice(victims)
        assert victim.proc is not None
        victim.proc.send_signal(signal.SIGKILL)
        victim.kills += 1
        victim.restart_at = now + rng.uniform(0.2, 0.6)
        self.say(f"chaos: SIGKILL {victim.name}")

    async def _approve_pending(self, client: Client) -> None:
        """What an operator does: look at the calls waiting for a decision, approve them."""
        for call in await client.pending_approvals(SESSION):
            recipients = call.arguments.get("recipients", [])
            self.say(
                f"approval needed: {call.tool} to {len(recipients)} recipients "
                f"(asked by {call.agent}); approving it as demo-operator"
            )
            [decision] = await client.approve(
                SESSION, call.approval_id, by="demo-operator", reason="the notice is approved"
            )
            self.say(f"approved {call.approval_id} (new decision: {decision.new})")

    async def _progress(self, store: Store) -> str:
        tasks, _ = await store.queries.history(SESSION)
        emails = [t for t in tasks if t.kind == "send-notice"]
        if not emails:
            return "emails: (the agent is planning)"
        parts = [f"{t.input['to'].split('@')[0]}: {email_state(t)}" for t in emails]
        workers = " ".join(f"{w.name}{'' if w.alive else '(down)'}" for w in self.workers)
        return f"emails: {' | '.join(parts)}   workers: {workers}"

    # The verdict -----------------------------------------------------------------------

    async def _report(self, store: Store, email_url: str, answered: bool) -> int:
        tasks, operations = await store.queries.history(SESSION)
        ledger = await EmailClient(email_url).ledger()
        sends = {s["key"]: s for s in ledger["sends"]}
        results = {t.input["key"]: t for t in tasks if t.kind == "send-notice"}
        batch = next((t for t in tasks if t.kind == "notice-batch"), None)
        rows, exactly_once = [], True
        for key, task in sorted(results.items(), key=lambda kv: kv[1].input["to"]):
            sent = sends.get(key)
            ok = sent is not None and task.outcome == "succeeded"
            exactly_once &= ok
            rows.append(
                [
                    task.input["to"],
                    key,
                    str(sent["attempts"]) if sent else "0",
                    (task.result or {}).get("receipt") or "-",
                    (task.result or {}).get("how") or "-",
                ]
            )
        exactly_once &= len(results) == self.recipients and not ledger["unsafe_sends"]
        exactly_once &= len(ledger["sends"]) == self.recipients
        summary = (batch.result or {}).get("summary") if batch else None
        print()
        print_table(["recipient", "email key", "sends accepted", "receipt", "how"], rows)
        kills = sum(w.kills for w in self.workers)
        print(
            f"\nworkers killed: {kills} "
            f"({', '.join(f'{w.name} x{w.kills}' for w in self.workers if w.kills) or 'none'})"
        )
        print(
            f"operations recorded: {len(operations)}; emails in the service's ledger: "
            f"{len(ledger['sends'])} (calls: {ledger['calls']})"
        )
        print(f"summary: {summary}")
        verdict = answered and exactly_once and summary is not None
        if self.approve:
            decisions = [r for r in await store.inbox.of_session(SESSION) if r.kind == "signal"]
            approved_once = len(decisions) == 1 and decisions[0].applied_at is not None
            print(f"approval: {len(decisions)} decision(s) recorded, applied once: {approved_once}")
            verdict &= approved_once
        print(
            f"\nVERDICT: {'PASS' if verdict else 'FAIL'} — every email sent exactly once: "
            f"{exactly_once}; summary produced: {summary is not None}"
        )
        return 0 if verdict else 1


def email_state(task: TaskRecord) -> str:
    if task.status == "terminal":
        return "sent ✓" if task.outcome == "succeeded" else f"{task.outcome} ✗"
    return EMAIL_STATES.get((task.status, task.phase or ""), f"{task.status}@{task.phase}")


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=False)]
    for line in [headers, [str("-" * w) for w in widths], *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def docker_available() -> bool:
    """Whether a Docker engine answers (the client alone is not enough)."""
    if shutil.which("docker") is None:
        return False
    try:
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def start_containers(stack: contextlib.ExitStack) -> tuple[str, str]:
    """RabbitMQ and Redis in containers that ``stack`` stops; returns their URLs."""
    from testcontainers.rabbitmq import RabbitMqContainer
    from testcontainers.redis import RedisContainer

    rabbit = stack.enter_context(RabbitMqContainer("rabbitmq:3.13-alpine"))
    redis = stack.enter_context(RedisContainer("redis:7-alpine"))
    host = rabbit.get_container_host_ip()
    return (
        f"amqp://guest:guest@{host}:{rabbit.get_exposed_port(5672)}/",
        f"redis://{redis.get_container_host_ip()}:{redis.get_exposed_port(6379)}/0",
    )


def services_problem(rabbitmq_url: str, redis_url: str) -> str | None:
    """None when RabbitMQ and Redis answer; otherwise what to start."""
    missing = []
    for name, url, port, start in (
        ("RabbitMQ", rabbitmq_url, 5672, "rabbitmq-server -detached"),
        ("Redis", redis_url, 6379, "redis-server --daemonize yes"),
    ):
        parsed = urlparse(url)
        try:
            socket.create_connection(
                (parsed.hostname or "127.0.0.1", parsed.port or port), 2
            ).close()
        except OSError:
            missing.append(
                f"  - {name} at {parsed.hostname}:{parsed.port or port}: start it "
                f"(e.g. `{start}`) or set BRAINHANDS_{name.upper()}_URL"
            )
    if not missing:
        return None
    return (
        "brainhands demo needs these services, which do not answer (and no Docker engine "
        "runs to start them):\n" + "\n".join(missing)
    )


async def delete_namespace(url: str, namespace: str) -> None:
    """Remove the demo's queues and exchanges."""
    topology = Topology(namespace)
    with contextlib.suppress(Exception):
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel()
            for queue in (
                topology.hands_queue("email"),
                topology.brain_queue("v1"),
                topology.parking_queue,
            ):
                await channel.queue_delete(queue)
            await channel.exchange_delete(topology.exchange)
            await channel.exchange_delete(topology.dead_letter_exchange)


async def command(args: argparse.Namespace) -> int:
    """``brainhands demo``."""
    settings = load_settings(CommonSettings)
    runner = Demo(
        recipients=args.recipients,
        brains=args.brains,
        hands=args.hands,
        chaos=args.chaos,
        kill_interval=tuple(args.kill_interval),
        store_url=args.store_url,
        rabbitmq_url=settings.rabbitmq_url,
        redis_url=settings.redis_url,
        timeout=args.timeout,
        seed=args.seed,
        approve=args.approve,
    )
    return await runner.run()
