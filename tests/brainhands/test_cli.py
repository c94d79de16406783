"""The ``brainhands`` command, run as a user runs it: a real process."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import insert

from brainhands.brain.decide import TOOL_KIND
from brainhands.cli import acting
from brainhands.cli.operate import resume_command
from brainhands.client.budgets import BudgetStop
from brainhands.shared.config import normalize_database_url
from brainhands.shared.errors import InvalidRequest
from brainhands.shared.messages import ToolJob
from brainhands.shared.store import Store, schema
from brainhands.shared.vocabulary import TENANT_SCOPE
from tests.helpers.agent_run import AgentRun, agent_run
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually
from tests.helpers.processes import WORKDIR, spawn_email_hands
from tests.helpers.rabbit import BrokerEnv, broker_env
from tests.helpers.stores import StoreTarget, drop_schema

__all__ = ["agent_run"]  # the fixture


def brainhands(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BRAINHANDS_")}
    return subprocess.run(
        [sys.executable, "-m", "brainhands", *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_migrate_with_no_configuration_creates_the_embedded_store(tmp_path: Path) -> None:
    done = brainhands("migrate", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "empty -> " in done.stdout
    assert (tmp_path / "brainhands.db").exists()

    status = brainhands("status", "--json", cwd=tmp_path)
    assert json.loads(status.stdout)["revision"] == json.loads(status.stdout)["head"]


def test_invalid_settings_fail_at_start_naming_the_variable(tmp_path: Path) -> None:
    done = brainhands("status", cwd=tmp_path, env={"BRAINHANDS_DATABASE_URL": "mysql://db"})
    assert done.returncode == 2
    assert "BRAINHANDS_DATABASE_URL" in done.stderr
    assert "PostgreSQL" in done.stderr


def test_hands_refuses_a_pool_its_tool_modules_do_not_serve(tmp_path: Path) -> None:
    done = brainhands("hands", "--pool", "nope", "--tools", "tests.helpers.tools", cwd=WORKDIR)
    assert done.returncode == 2
    assert "no tool of pool 'nope'" in done.stderr and "email" in done.stderr


@pytest.mark.integration
async def test_dlq_lists_parked_messages_with_reasons_and_replays_them(
    rabbitmq_url: str, namespace: str, tmp_path: Path
) -> None:
    env = {"BRAINHANDS_RABBITMQ_URL": rabbitmq_url, "BRAINHANDS_NAMESPACE": namespace}
    async with broker_env(rabbitmq_url, namespace) as broker:
        queue = await broker.hands_queue("email")
        await park_garbage(broker, queue)

        listed = brainhands("dlq", "--json", cwd=tmp_path, env=env)
        assert listed.returncode == 0, listed.stderr
        [parked] = json.loads(listed.stdout)
        assert parked["origin"] == queue
        assert "invalid message" in parked["reason"]

        replayed = brainhands("dlq", "replay", cwd=tmp_path, env=env)
        assert "replayed 1 parked message" in replayed.stdout
        assert await broker.message_count(queue) == 1


def tool_job(task_id: str, queue_pool: str = "email") -> ToolJob:
    return ToolJob(
        operation_id=f"op-{task_id}",
        tool="send_email",
        arguments={},
        session_id="s1",
        task_id=task_id,
        compat="v1",
        pool=queue_pool,
    )


async def add_tool_task(store: Store, task_id: str, **row: object) -> None:
    now = time.time()
    async with store.backend.engine.begin() as conn:
        await conn.execute(
            insert(schema.task).values(
                **{
                    "id": task_id,
                    "session_id": "s1",
                    "kind": TOOL_KIND,
                    "kind_version": 1,
                    "input": {"tool": "send_email", "arguments": {}, "pool": "email"},
                    "operation_id": f"op-{task_id}",
                    "created_at": now,
                    "updated_at": now,
                    **row,
                }
            )
        )


@pytest.mark.integration
async def test_dlq_tells_settled_work_from_pending_and_purges_only_the_settled(
    store: Store, store_target: StoreTarget, rabbitmq_url: str, namespace: str, tmp_path: Path
) -> None:
    env = {
        **store_target.env(),
        "BRAINHANDS_RABBITMQ_URL": rabbitmq_url,
        "BRAINHANDS_NAMESPACE": namespace,
    }

    def dlq(*args: str) -> subprocess.CompletedProcess[str]:
        return brainhands("dlq", *args, cwd=tmp_path, env=env)

    await store.create_session("s1", compat="v1")
    await add_tool_task(store, "t-done", status="terminal", outcome="succeeded")
    await add_tool_task(store, "t-open", status="waiting")
    async with broker_env(rabbitmq_url, namespace) as broker:
        queue = await broker.hands_queue("email")
        await park_garbage(broker, queue)
        await broker.park_after_the_delivery_limit(queue, [tool_job("t-done"), tool_job("t-open")])

        listed = dlq("--json")
        assert listed.returncode == 0, listed.stderr
        states = sorted(
            (p["type"], p["session_id"], p["work"]["state"]) for p in json.loads(listed.stdout)
        )
        assert states == [
            ("tool_job", "s1", "pending"),
            ("tool_job", "s1", "settled"),
            ("unreadable", None, "unknown"),
        ]
        shown = dlq()
        assert "tool_job of session s1: settled (task succeeded)" in shown.stdout
        assert "tool_job of session s1: pending (no operation yet)" in shown.stdout

        unfiltered = dlq("purge")
        assert unfiltered.returncode == 2 and "--settled" in unfiltered.stderr
        purged = dlq("purge", "--session", "s1")
        assert purged.returncode == 0, purged.stderr
        assert "purged 1 parked message(s)" in purged.stdout
        assert "kept 1 whose work is not settled" in purged.stdout
        assert dlq("purge", "--settled").stdout.startswith("purged 0 ")
        forced = dlq("purge", "--type", "unreadable", "--force")
        assert forced.stdout.startswith("purged 1 ")

        [left] = json.loads(dlq("--json").stdout)
        assert left["work"] == {"state": "pending", "detail": "no operation yet"}
        assert '"task_id":"t-open"' in left["body_preview"]


async def park_garbage(broker: BrokerEnv, queue: str) -> None:
    """Deliver an undecodable body to a consumer, which parks it."""
    from tests.helpers.polling import eventually

    await broker.broker.publish_body(b"{not json", queue)
    consumer = await broker.broker.consume(queue, lambda message, delivery: delivery.ack())
    await eventually(lambda: broker.count_is(broker.topology.parking_queue, 1), what="parked")
    await consumer.cancel()


@pytest.mark.integration
async def test_submit_waits_for_the_answer_and_show_prints_the_session(
    brains: BrainHarness,
) -> None:
    brains.start_brain()
    submit = [
        "submit",
        "--session",
        "cli",
        "--request-id",
        "r1",
        "--wait",
        "30",
        '{"kind": "steps", "input": {"x": 7}}',
    ]

    first = await asyncio.to_thread(brainhands, *submit, cwd=WORKDIR, env=brains.settings())
    again = await asyncio.to_thread(brainhands, *submit, cwd=WORKDIR, env=brains.settings())
    shown = await asyncio.to_thread(brainhands, "show", "cli", cwd=WORKDIR, env=brains.settings())

    assert first.returncode == 0, first.stderr
    assert "(accepted)" in first.stdout
    assert json.loads(first.stdout.split("\n", 1)[1])["answer"]["input"] == {"x": 7}
    assert "nothing new started" in again.stdout
    assert "steps" in shown.stdout and "succeeded" in shown.stdout

    as_json = await asyncio.to_thread(
        brainhands, "show", "cli", "--json", cwd=WORKDIR, env=brains.settings()
    )
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    tasks, _ = await brains.store.queries.history("cli")
    [task] = document["tasks"]
    assert task["id"] == tasks[0].id and task["id"] in shown.stdout  # whole, not cut short
    assert (task["kind"], task["status"], task["outcome"]) == ("steps", "terminal", "succeeded")
    assert document["session"]["id"] == "cli"
    assert [e["seq"] for e in document["entries"]] == sorted(e["seq"] for e in document["entries"])

    # Another tenant's "cli" is its own session, by flag or by BRAINHANDS_TENANT.
    theirs = await asyncio.to_thread(
        brainhands, *submit, "--tenant", "acme", cwd=WORKDIR, env=brains.settings()
    )
    assert theirs.returncode == 0 and "(accepted)" in theirs.stdout, theirs.stderr
    acme = brains.settings(BRAINHANDS_TENANT="acme")
    shown = await asyncio.to_thread(brainhands, "show", "cli", "--json", cwd=WORKDIR, env=acme)
    session = json.loads(shown.stdout)["session"]
    assert (session["id"], session["tenant"]) == ("acme/cli", "acme")
    bad = await asyncio.to_thread(
        brainhands, "show", "cli", "--tenant", "a/b", cwd=WORKDIR, env=brains.settings()
    )
    assert bad.returncode == 2 and "--tenant: tenant 'a/b'" in bad.stderr, bad.stderr


@pytest.mark.integration
async def test_show_prints_every_task_and_operation_in_full_and_as_json(
    store: Store, store_target: StoreTarget, tmp_path: Path
) -> None:
    parent, child, operation = "t-" + "p" * 30, "t-" + "c" * 30, "op-" + "o" * 40
    wake_at = time.time() + 3600
    await store.create_session("s1", compat="v1")
    await add_tool_task(
        store,
        parent,
        kind="caller",
        operation_id=None,
        status="sleeping",
        phase="read",
        wake_at=wake_at,
        blocked_reason="no handler for caller v1",
    )
    await add_tool_task(
        store, child, parent_id=parent, status="terminal", outcome="failed", operation_id=operation
    )
    now = time.time()
    async with store.backend.engine.begin() as conn:
        await conn.execute(
            insert(schema.operation).values(
                operation_id=operation,
                session_id="s1",
                task_id=child,
                tool="send_email",
                pool="email",
                arguments={},
                status="failed",
                attempts=3,
                interruptions=1,
                error={"type": "ToolError", "message": "mailbox full", "retryable": False},
                created_at=now,
                updated_at=now,
            )
        )

    def show(*args: str) -> subprocess.CompletedProcess[str]:
        return brainhands("show", *args, cwd=tmp_path, env=store_target.env())

    text = show("s1")
    assert text.returncode == 0, text.stderr
    for full in (parent, child, operation):
        assert full in text.stdout
    assert f"parent: {parent}" in text.stdout
    assert "BLOCKED: no handler for caller v1" in text.stdout
    assert f"wakes: {datetime.fromtimestamp(wake_at, UTC).isoformat(timespec='seconds')}" in (
        text.stdout
    )
    assert "attempts=3 interruptions=1" in text.stdout
    assert "error: ToolError: mailbox full" in text.stdout

    as_json = show("s1", "--json")
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    assert set(document) == {
        "session",
        "entries",
        "tasks",
        "operations",
        "approvals",
        "budget_exhausted",
        "usage",
    }
    assert document["approvals"] == []
    by_id = {t["id"]: t for t in document["tasks"]}
    assert by_id[parent]["status"] == "sleeping" and by_id[parent]["wake_at"] == wake_at
    assert by_id[parent]["blocked_reason"] == "no handler for caller v1"
    assert (by_id[child]["parent_id"], by_id[child]["outcome"]) == (parent, "failed")
    [op] = document["operations"]
    assert (op["operation_id"], op["task_id"], op["status"]) == (operation, child, "failed")
    assert (op["attempts"], op["interruptions"]) == (3, 1)
    assert op["error"]["type"] == "ToolError" and op["error"]["message"] == "mailbox full"

    unknown = show("nope")
    assert unknown.returncode == 2
    assert "session nope does not exist" in unknown.stderr
    assert "Traceback" not in unknown.stderr and unknown.stdout == ""


def test_config_prints_every_setting_with_secrets_redacted(tmp_path: Path) -> None:
    env = {
        "BRAINHANDS_RABBITMQ_URL": "amqp://app:s3cret@mq.internal:5672/prod",
        "BRAINHANDS_DATABASE_URL": "postgresql://app:hunter2@db/brainhands",
        "BRAINHANDS_CONCURRENCY": "32",
    }
    done = brainhands("config", "--role", "hands", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "s3cret" not in done.stdout and "hunter2" not in done.stdout
    assert "BRAINHANDS_RABBITMQ_URL=amqp://app:***@mq.internal:5672/prod" in done.stdout
    assert "BRAINHANDS_CONCURRENCY=32" in done.stdout
    extra = '{"parallel_tool_calls": null}'
    model_env = {"BRAINHANDS_MODEL_API_KEY": "sk-topsecret", "BRAINHANDS_MODEL_EXTRA_BODY": extra}
    model = brainhands("config", "--role", "model", cwd=tmp_path, env=model_env)
    assert "sk-topsecret" not in model.stdout and "BRAINHANDS_MODEL_API_KEY=***" in model.stdout
    assert f"BRAINHANDS_MODEL_EXTRA_BODY={extra}" in model.stdout  # JSON, as the variable takes it
    bad = brainhands(
        "config", "--role", "brain", cwd=tmp_path, env={"BRAINHANDS_SWEEPER_PERIOD": "soon"}
    )
    assert bad.returncode == 2 and "BRAINHANDS_SWEEPER_PERIOD" in bad.stderr


@pytest.mark.integration
async def test_a_worker_waits_for_the_schema_migration_then_serves(
    postgres_url: str, rabbitmq_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    target = StoreTarget(normalize_database_url(postgres_url), f"mig{namespace}")
    env = {
        **target.env(),
        "BRAINHANDS_RABBITMQ_URL": rabbitmq_url,
        "BRAINHANDS_REDIS_URL": redis_url,
        "BRAINHANDS_NAMESPACE": namespace,
        "BRAINHANDS_HTTP_PORT": "-1",
    }
    log = tmp_path / "hands.log"
    worker = spawn_email_hands(env=env, log=log)
    try:
        await eventually(lambda: "schema_behind" in log.read_text(), within=30, what="warning")
        assert worker.poll() is None and '"consuming"' not in log.read_text()
        assert "run `brainhands migrate`" in log.read_text()

        done = await asyncio.to_thread(brainhands, "migrate", cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr

        await eventually(lambda: '"consuming"' in log.read_text(), within=30, what="consuming")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        await drop_schema(target.url, f"mig{namespace}")


async def test_hands_declare_their_tools_and_tools_lists_them_by_pool(
    brains: BrainHarness,
) -> None:
    log = brains.tmp_path / "hands.log"

    def declared() -> int:
        return log.read_text().count('"event": "declared"') if log.exists() else 0

    env = brains.settings()
    first = spawn_email_hands(env=env, log=log)
    brains.processes.append(first)
    await eventually(lambda: declared() == 1, within=30, what="the Hands to declare its tools")

    listed = await asyncio.to_thread(brainhands, "tools", "--json", cwd=WORKDIR, env=env)
    shown = await asyncio.to_thread(brainhands, "tools", cwd=WORKDIR, env=env)

    assert listed.returncode == 0, listed.stderr
    tools = {t["name"]: t for t in json.loads(listed.stdout)}
    assert {"send_safe", "send_query", "send_unsafe", "pay_unsafe"} <= set(tools)
    assert {t["pool"] for t in tools.values()} == {"email"}
    assert tools["send_unsafe"]["policy"] == "unsafe"
    assert tools["send_safe"]["args_schema"]["properties"]["to"]["type"] == "string"
    assert "pool email:" in shown.stdout and "send_query" in shown.stdout
    assert tools["send_invoice"]["approval_when"] == {"arg": ["amount"], "op": ">", "value": 100}
    assert "approval when amount > 100" in shown.stdout

    # The same build started again declares nothing new.
    first.kill()
    first.wait()
    brains.processes.append(spawn_email_hands(env=env, log=log))
    await eventually(lambda: declared() == 2, within=30, what="the second declaration")
    assert log.read_text().count('"changed": []') == 2


async def test_pending_show_approve_and_deny_from_the_command_line(agent_run: AgentRun) -> None:
    brains = agent_run.brains
    agent_run.start_brain()
    agent_run.start_hands()
    await agent_run.submit("guarded")
    env = brains.settings()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return brainhands(*args, cwd=brains.tmp_path, env=env)

    async def both_pending() -> bool:
        async with brains.client() as client:
            return len(await client.pending_approvals("s1")) == 2

    await eventually(both_pending, within=60, what="two calls waiting for approval")
    listed = run("pending")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("send_safe") == 2 and "asked by guarded" in listed.stdout
    shown = run("show", "s1")
    assert "NEEDS ACTION: 2 call(s) waiting for approval" in shown.stdout
    async with brains.client() as client:
        ana, bo = sorted(await client.pending_approvals("s1"), key=lambda a: a.arguments["to"])

    everything = run("approve", "--session", "s1", "--by", "ops")  # names no call
    assert everything.returncode == 2 and "--all" in everything.stderr
    approved = run("approve", "--session", "s1", "--id", ana.approval_id, "--by", "ops")
    assert approved.returncode == 0, approved.stderr
    assert f"{ana.approval_id}: approved by ops" in approved.stdout
    denied = run("deny", "--session", "s1", "--id", bo.approval_id, "--by", "ops", "--reason", "no")
    assert f"{bo.approval_id}: denied by ops" in denied.stdout
    decided = {r.key: r.body for r in await brains.store.inbox.of_session("s1")}
    principals = {b["payload"]["principal"] for k, b in decided.items() if "decision:" in k}
    assert principals == {"operator"}  # BRAINHANDS_IDENTITY's default, not --by
    refused = run("approve", "--session", "s1", "--id", bo.approval_id, "--by", "eve")
    assert refused.returncode == 2
    assert "already denied by ops" in refused.stderr and "Traceback" not in refused.stderr
    unknown = run("approve", "--session", "s1", "--id", "nope", "--by", "ops")
    assert unknown.returncode == 2 and "has no approval 'nope'" in unknown.stderr
    no_session = run("signal", "--session", "nobody", "--name", "go")
    assert no_session.returncode == 2 and "session nobody does not exist" in no_session.stderr
    record = await brains.answer(within=60)
    assert record.status == "answered"
    assert run("pending").stdout.strip() == "no call is waiting for approval"


async def test_approve_with_edited_arguments_from_the_command_line(agent_run: AgentRun) -> None:
    brains = agent_run.brains
    agent_run.start_brain()
    agent_run.start_hands()
    await agent_run.submit("invoicer")
    env = brains.settings()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return brainhands(*args, cwd=brains.tmp_path, env=env)

    async def one_pending() -> bool:
        async with brains.client() as client:
            return len(await client.pending_approvals("s1")) == 1

    await eventually(one_pending, within=60, what="the invoice over 100 to wait")
    listed = run("pending")
    assert "because the call meets the approval condition amount > 100" in listed.stdout
    async with brains.client() as client:
        [bo] = await client.pending_approvals("s1")
    approve = ("approve", "--session", "s1", "--id", bo.approval_id, "--by", "ops")

    invalid = run(*approve, "--arguments", '{"to": "bo@example.com", "amount": 2.5}')
    assert invalid.returncode == 2 and "amount: 2.5 is not of type" in invalid.stderr
    assert "Traceback" not in invalid.stderr
    edited = run(*approve, "--arguments", '{"to": "bo@example.com", "amount": 250}')
    assert edited.returncode == 0, edited.stderr
    assert (
        f'{bo.approval_id}: approved by ops with arguments {{"to": "bo@example.com", '
        '"amount": 250}' in edited.stdout
    )
    assert (await brains.answer(within=60)).status == "answered"
    sends = (await agent_run.email.ledger())["sends"]
    assert sorted(s["subject"] for s in sends) == ["invoice 250", "invoice 50"]


@pytest.mark.parametrize(("given", "why"), [("{amount: 250}", "not JSON"), ("[1]", "JSON object")])
async def test_approve_refuses_arguments_that_are_no_json_object(given: str, why: str) -> None:
    with pytest.raises(InvalidRequest, match=f"--arguments is .*{why}"):
        await acting.approve(argparse.Namespace(arguments=given))


def test_show_names_the_command_that_resumes_a_stopped_run() -> None:
    run_stop = BudgetStop("t1", "tool_calls", {"tool_calls": 3}, {"tool_calls": 3}, 0.0)
    tenant_stop = BudgetStop(
        "t1", "cost", {"tokens": 1000, "cost": 2.5}, {"cost": 2.6}, 0.0, scope=TENANT_SCOPE
    )

    assert resume_command(run_stop, "s1", "acme") == (
        "brainhands raise-budget --session s1 --tool-calls N"
    )
    # A set replaces every limit of the tenant: the others are repeated as they are.
    assert resume_command(tenant_stop, "s1", "acme") == (
        "brainhands tenant budget set acme --tokens 1000 --cost N"
    )
