"""The scheduler in-process, against real stores: what one pass over a session does."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from pathlib import Path

import pytest

from brainhands.brain.approval import ApprovalRequest, approval_kinds
from brainhands.brain.decide import TOOL_KIND
from brainhands.brain.edits import RunSummary
from brainhands.brain.registry import TaskKind, TaskRegistry
from brainhands.brain.scheduler import SessionRunner
from brainhands.client.approvals import decide, pending_approvals
from brainhands.shared.messages import SessionWake, ToolJob, decode, encode
from brainhands.shared.store import Draft, OutboxMessage, Store, TaskRecord
from brainhands.shared.store.catalog import ToolCatalog
from brainhands.shared.tools import ToolRegistry, declare, load_tool_modules
from brainhands.shared.topology import Topology
from brainhands.shared.vocabulary import APPROVAL_KIND, decision_signal
from tests.helpers import kinds
from tests.helpers.submitting import submit_input

pytestmark = pytest.mark.integration

TOPOLOGY = Topology("kernel")


async def run(
    store: Store,
    session_id: str = "s1",
    registry: TaskRegistry = kinds.registry,
    tools: ToolRegistry | None = None,
    max_restarts: int = 3,
    declaration_grace: float = 30.0,
) -> RunSummary:
    """One Brain pass, holding a freshly claimed lease token; ``tools`` are declared first,
    as the Hands serving them would."""
    if tools is not None:
        await store.declarations.declare_tools([spec.declaration() for spec in tools])
    token = (await store.load(session_id)).session.fence + 1
    await store.claim_session_fence(session_id, token)
    runner = SessionRunner(
        store=store,
        tasks=registry,
        tools=ToolCatalog(store),
        topology=TOPOLOGY,
        session_id=session_id,
        fence=token,
        max_restarts=max_restarts,
        declaration_grace=declaration_grace,
    )
    return await runner.run()


async def submit(
    store: Store, kind: str, input: object, request_id: str = "r1", session_id: str = "s1"
) -> None:
    await submit_input(
        store,
        TOPOLOGY,
        session_id=session_id,
        request_id=request_id,
        input={"kind": kind, "input": input},
        compat="v1",
    )


async def answer(store: Store, request_id: str = "r1") -> object:
    record = await store.submissions.get("s1", request_id)
    assert record.status == "answered", (record.status, record.error)
    return record.answer


async def test_a_submission_runs_its_task_through_every_phase(store: Store) -> None:
    await submit(store, "steps", {"x": 1})

    summary = await run(store)

    assert await answer(store) == {"state": {"from": "one", "then": "two"}, "input": {"x": 1}}
    assert summary.phases == 3
    state = await store.load("s1")
    assert state.open_tasks == [] and state.open_submissions == []
    assert state.documents["log"].body == ["one", "two"]
    assert state.documents["log"].version == 2


async def test_light_phases_commit_with_the_commit_that_made_them_ready(store: Store) -> None:
    await store.create_session("s1", compat="v1")
    draft = Draft("s1", version=0, fence=0)
    draft.append_entry("user", {"text": "first"})
    await store.commit(draft)
    await submit(store, "chain", {"text": "hi"})

    summary = await run(store)

    # Accepting the submission, entering the task, both light phases and the answer: one
    # commit; the second phase read the entry the first had appended in it.
    assert summary.commits == 1 and summary.phases == 2
    assert await answer(store) == {"entries": [[1, "user"], [2, "note"]]}
    assert [(e.seq, e.kind) for e in (await store.load("s1")).entries] == [
        (1, "user"),
        (2, "note"),
    ]


async def test_a_light_phase_that_always_raises_is_counted_and_fails(store: Store) -> None:
    await submit(store, "fragile", {})

    summary = await run(store, max_restarts=3)

    record = await store.submissions.get("s1", "r1")
    assert record.status == "failed" and "light and always fails" in (record.error or "")
    assert summary.phases == 3 and summary.commits == 1


async def test_resubmitting_a_request_id_starts_nothing(store: Store) -> None:
    receipts = await asyncio.gather(
        *(
            submit_input(
                store,
                TOPOLOGY,
                session_id="s1",
                request_id="same",
                input={"kind": "steps", "input": {}},
                compat="v1",
            )
            for _ in range(3)
        )
    )
    assert sum(r.created for r in receipts) == 1
    assert len({r.submission.id for r in receipts}) == 1
    await run(store)
    await run(store)
    assert (await store.status())["tasks"] == 1  # one run


async def test_all_settled_parent_sees_every_child_outcome(store: Store) -> None:
    specs = [{"n": n, "fail": n == 2} for n in range(5)]
    await submit(store, "parent", {"children": specs})

    await run(store)

    assert await answer(store) == [
        ["succeeded", 0],
        ["succeeded", 10],
        ["failed", None],
        ["succeeded", 30],
        ["succeeded", 40],
    ]


async def test_fail_fast_cancels_the_others_and_winds_down_before_failing(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    specs = [{"n": 0, "fail": True}] + [{"n": n, "sleep": 60} for n in range(1, 5)]
    await submit(store, "parent", {"children": specs, "join": "fail_fast"})
    caplog.set_level(logging.INFO, logger="brainhands.brain")

    await run(store)

    record = await store.submissions.get("s1", "r1")
    assert record.status == "failed" and "a child failed" in (record.error or "")
    rows = await all_tasks(store)
    [parent] = [t for t in rows if t.kind == "parent"]
    children = sorted((t for t in rows if t.kind == "child"), key=lambda t: t.input["n"])
    assert (parent.status, parent.outcome) == ("terminal", "failed")
    assert [c.outcome for c in children] == ["failed"] + ["cancelled"] * 4
    assert "winding down" in caplog.text  # the parent was completing while they stopped


async def test_a_sleeping_task_runs_when_its_time_comes(store: Store) -> None:
    await submit(store, "napper", {"seconds": 0.5})

    first = await run(store)
    assert first.next_wake is not None
    assert (await store.submissions.get("s1", "r1")).status == "running"
    await run(store)  # too early: nothing happens
    assert (await store.submissions.get("s1", "r1")).status == "running"

    await asyncio.sleep(max(0.0, first.next_wake - time.time()) + 0.05)
    await run(store)
    assert (await answer(store))["woke_at"] >= first.next_wake  # type: ignore[index]


async def test_a_phase_that_always_raises_fails_after_the_restart_limit(store: Store) -> None:
    await submit(store, "broken", {})

    summary = await run(store, max_restarts=3)

    record = await store.submissions.get("s1", "r1")
    assert record.status == "failed"
    assert "phase raised" in (record.error or "") and "always fails" in (record.error or "")
    assert summary.phases == 3


async def test_a_task_interrupted_too_often_in_one_phase_fails_without_running(
    store: Store,
) -> None:
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    draft = Draft("s1", version=0, fence=1)
    task_id = draft.add_task(
        kind="steps", kind_version=1, input={}, status="running", phase="two", attempt=3
    )
    await store.commit(draft)

    summary = await run(store, max_restarts=3)

    [row] = (await store.queries.tasks_by_ids([task_id])).values()
    assert (row.status, row.outcome) == ("terminal", "failed")
    assert row.error["reason"] == "crash loop"
    assert summary.phases == 0


async def test_an_unknown_kind_is_blocked_untouched_then_migrated_by_a_newer_build(
    store: Store,
) -> None:
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    draft = Draft("s1", version=0, fence=1)
    task_id = draft.add_task(kind="steps", kind_version=1, input={"x": 2}, phase="one")
    await store.commit(draft)

    await run(store, registry=TaskRegistry())  # a build that knows no "steps" at all
    [blocked] = (await store.load("s1")).open_tasks
    assert blocked.blocked_reason == "no handler for task kind steps v1 in this build"
    assert (blocked.status, blocked.phase, blocked.input, blocked.kind_version) == (
        "pending",
        "one",
        {"x": 2},
        1,
    )

    registry_v2 = TaskRegistry()
    steps_v2 = registry_v2.add(TaskKind("steps", version=2))

    @steps_v2.phase("one")
    async def v2_one(task, docs, ctx):  # type: ignore[no-untyped-def]
        from brainhands.brain import Finish

        return Finish({"input": task.input, "version": task.version})

    await run(store, registry=registry_v2)  # knows v2 but no way up from v1: still blocked
    assert (await store.load("s1")).open_tasks[0].kind_version == 1

    @registry_v2.migration("steps", from_version=1)
    def to_v2(input, state):  # type: ignore[no-untyped-def]
        return {**input, "migrated": True}, state

    await run(store, registry=registry_v2)
    [done] = (await store.queries.tasks_by_ids([task_id])).values()
    assert (done.outcome, done.result) == (
        "succeeded",
        {"input": {"x": 2, "migrated": True}, "version": 2},
    )
    assert done.blocked_reason is None


def echo_tools() -> ToolRegistry:
    tools = ToolRegistry()

    async def echo(args, ctx):  # type: ignore[no-untyped-def]
        return {}

    from pydantic import BaseModel

    class Args(BaseModel):
        text: str

    echo.__annotations__ = {"args": Args, "ctx": object}
    tools.add(
        declare(
            echo,
            name="echo",
            pool="default",
            policy="safe",
            query=None,
            timeout=5,
            retry=None,
            description="echo",
        )
    )
    return tools


async def test_a_dispatched_call_is_committed_with_its_job_and_applied_once(
    store: Store,
) -> None:
    tools = echo_tools()
    await submit(store, "caller", {"tool": "echo", "arguments": {"text": "hi"}})

    await run(store, tools=tools)

    [tool_task] = [t for t in (await store.load("s1")).open_tasks if t.kind == TOOL_KIND]
    jobs = await outbox_jobs(store)
    assert [(j.operation_id, j.tool, j.arguments, j.pool) for j in jobs] == [
        (tool_task.operation_id, "echo", {"text": "hi"}, "default")
    ]
    # Hands record the outcome; the next pass applies it to the waiting task once.
    ledger = store.ledger
    op = jobs[0].operation_id
    await ledger.claim(
        op,
        1,
        intent={
            "session_id": "s1",
            "task_id": tool_task.id,
            "tool": "echo",
            "pool": "default",
            "arguments": {},
        },
    )
    await ledger.record_outcome(op, 1, status="succeeded", result={"echoed": "hi"})
    await run(store, tools=tools)
    await run(store, tools=tools)

    assert await answer(store) == {
        "outcome": "succeeded",
        "result": {"status": "succeeded", "result": {"echoed": "hi"}},
        "error": None,
    }


async def test_a_pass_lets_go_without_reading_the_outcome_of_a_call_it_just_dispatched(
    store: Store,
) -> None:
    """Its outcome comes after the job's commit, so its result's wake-up waits for the
    pass's lease; a call dispatched by an earlier pass is read before the pass lets go."""
    from typing import Any

    from sqlalchemy import event

    tools = echo_tools()
    await submit(store, "caller", {"tool": "echo", "arguments": {"text": "hi"}})
    operation_reads: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM operation" in statement:
            operation_reads.append(statement)

    engines = {store.backend.writes_on, store.backend.engine.sync_engine}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", count)
    try:
        await run(store, tools=tools)
        dispatching = len(operation_reads)
        await run(store, tools=tools)  # no outcome yet: still waiting
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", count)

    assert [j.tool for j in await outbox_jobs(store)] == ["echo"]
    assert dispatching == 0
    assert len(operation_reads) >= 1


async def test_ids_are_rooted_in_the_session_uid_and_derived_again_until_committed(
    tmp_path: Path,
) -> None:
    """Session s1 in two stores: different task and operation ids for the same calls. The
    same store run again from before the Brain committed (a copy taken then): the same."""
    tools = load_tool_modules(["tests.helpers.tools"])
    calls = [
        {"tool": "send_safe", "arguments": {"to": "ana@example.com"}},
        {"tool": "send_safe", "arguments": {"to": "bo@example.com"}, "operation_id": "pay-1"},
    ]

    async def submitted(name: str) -> Path:
        store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / name}", upgrade=True)
        await submit(store, "calls", {"calls": calls})
        await store.close()
        return tmp_path / name

    async def sent(path: Path) -> tuple[str, list[tuple[str, str]]]:
        """The session's uid, and (task id, operation id) of each job one pass sends."""
        store = await Store.open(f"sqlite+aiosqlite:///{path}", upgrade=False)
        try:
            await run(store, tools=tools)
            uid = (await store.load("s1")).session.uid
            return uid, [(job.task_id, job.operation_id) for job in await outbox_jobs(store)]
        finally:
            await store.close()

    here, elsewhere = await submitted("here.db"), await submitted("elsewhere.db")
    before_commit = tmp_path / "before-commit.db"
    with (
        contextlib.closing(sqlite3.connect(here)) as source,
        contextlib.closing(sqlite3.connect(before_commit)) as copy,
    ):
        source.backup(copy)

    uid, ids = await sent(here)
    assert [operation for _, operation in ids] == [f"op-{ids[0][0]}", f"{uid}:pay-1"]
    assert await sent(before_commit) == (uid, ids)
    other_uid, other_ids = await sent(elsewhere)
    assert other_uid != uid
    assert not {i for pair in ids for i in pair} & {i for pair in other_ids for i in pair}


async def test_a_call_to_a_tool_nobody_declared_fails_visibly_and_sends_nothing(
    store: Store,
) -> None:
    await submit(store, "caller", {"tool": "nope", "arguments": {}})

    await run(store, declaration_grace=0)

    result = await answer(store)
    assert result["outcome"] == "failed"  # type: ignore[index]
    message = result["error"]["error"]["message"]  # type: ignore[index]
    assert "no Hands pool has declared a tool named 'nope'" in message
    assert await outbox_jobs(store) == []


async def test_a_call_to_a_tool_not_declared_yet_waits_for_its_hands(store: Store) -> None:
    """A Brain that runs before the Hands serving a tool have started: the phase sleeps and
    runs again, sending nothing meanwhile; once they declared it, the call goes out."""
    await submit(store, "caller", {"tool": "send_safe", "arguments": {"to": "ana@example.com"}})

    summary = await run(store, declaration_grace=60)

    [caller] = (await store.load("s1")).open_tasks
    assert (caller.kind, caller.status) == ("caller", "sleeping")
    assert summary.next_wake is not None and summary.next_wake <= time.time() + 1.5
    assert await outbox_jobs(store) == []

    await asyncio.sleep(max(0.0, summary.next_wake - time.time()))
    await run(store, tools=load_tool_modules(["tests.helpers.tools"]), declaration_grace=60)

    [job] = await outbox_jobs(store)
    assert (job.tool, job.pool, job.arguments) == ("send_safe", "email", {"to": "ana@example.com"})


async def outbox_jobs(store: Store) -> list[ToolJob]:
    from sqlalchemy import select

    from brainhands.shared.store import schema

    async with store.backend.engine.connect() as conn:
        rows = await conn.execute(select(schema.outbox.c.body).order_by(schema.outbox.c.id))
        messages = [decode(bytes(r.body)) for r in rows]
    return [m for m in messages if isinstance(m, ToolJob)]


async def all_tasks(store: Store) -> list[TaskRecord]:
    from sqlalchemy import select

    from brainhands.shared.store import schema

    async with store.backend.engine.connect() as conn:
        ids = [r.id for r in await conn.execute(select(schema.task.c.id))]
    return list((await store.queries.tasks_by_ids(ids)).values())


async def signal(
    store: Store, name: str, signal_id: str, payload: object = None, session_id: str = "s1"
) -> bool:
    """Send a signal as a client does (its wake-up left out: the test runs the passes)."""
    receipt = await store.inbox.send_signal(
        session_id=session_id, name=name, signal_id=signal_id, payload=payload, wake=None
    )
    return receipt.created


async def test_a_signal_sent_before_the_wait_is_kept_and_received_once(store: Store) -> None:
    await submit(store, "listener", {"names": ["go", "go"], "timeout": 0.3})
    assert await signal(store, "go", "sig-1", {"n": 1})
    assert not await signal(store, "go", "sig-1", {"n": 2})  # the same id: one signal

    summary = await run(store)

    [waiting] = (await store.load("s1")).open_tasks
    assert (waiting.status, waiting.wait_signal) == ("waiting", "go")
    assert summary.next_wake is not None
    await asyncio.sleep(max(0.0, summary.next_wake - time.time()) + 0.05)
    await run(store)
    assert await answer(store) == [
        {"name": "go", "payload": {"n": 1}, "signal_id": "sig-1", "timed_out": False},
        {"name": "go", "payload": None, "signal_id": None, "timed_out": True},
    ]
    [request] = await store.inbox.of_session("s1")
    assert request.applied_at is not None


async def test_waits_entered_one_after_another_in_a_pass_share_one_read_of_the_signals(
    store: Store,
) -> None:
    """Three waits in one pass: the first takes what the pass's own read of the session
    found (less than a second ago), the next two the same, less what was received -- each
    signal once, in order."""
    from typing import Any

    from sqlalchemy import event

    await submit(store, "listener", {"names": ["go", "go", "done"], "timeout": 5})
    for name, signal_id in (("go", "sig-1"), ("go", "sig-2"), ("done", "sig-3")):
        assert await signal(store, name, signal_id, {"id": signal_id})
    inbox_reads: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM inbox" in statement:
            inbox_reads.append(statement)

    event.listen(store.backend.engine.sync_engine, "before_cursor_execute", count)
    try:
        await run(store)
    finally:
        event.remove(store.backend.engine.sync_engine, "before_cursor_execute", count)

    assert await answer(store) == [
        {"name": name, "payload": {"id": sid}, "signal_id": sid, "timed_out": False}
        for name, sid in (("go", "sig-1"), ("go", "sig-2"), ("done", "sig-3"))
    ]
    # Two loads (``run`` reads the fence, the pass its session), and no read of a wait's own.
    assert len(inbox_reads) == 2
    assert all(r.applied_at is not None for r in await store.inbox.of_session("s1"))


async def test_a_kept_signal_wakes_its_session_only_once_a_task_waits_for_it(
    store: Store,
) -> None:
    await submit(store, "listener", {"names": ["later"]})
    await run(store)
    assert await signal(store, "other", "sig-1")
    now = time.time() + 100

    assert [r.session_id for r in await store.queries.sessions_needing_attention(now=now)] == []

    assert await signal(store, "later", "sig-2")
    assert [r.session_id for r in await store.queries.sessions_needing_attention(now=now)] == ["s1"]
    await run(store)
    assert await answer(store) == [
        {"name": "later", "payload": None, "signal_id": "sig-2", "timed_out": False}
    ]


def approval_input(on_expiry: str, expires_in: float) -> dict[str, object]:
    request = ApprovalRequest(
        tool="send_safe",
        arguments={"to": "ana@example.com"},
        call_id="call-1",
        agent="payments",
        expires_in=expires_in,
        on_expiry=on_expiry,  # type: ignore[arg-type]
    )
    return request.input()


async def decision(store: Store, approval_id: str, verdict: str) -> bool:
    payload = {"verdict": verdict, "by": "ana", "reason": "ok", "decision_id": "d1", "at": 1.0}
    name = decision_signal(approval_id)
    return await signal(store, name, name, payload)


APPROVALS = approval_kinds()
TOOLS = "tests.helpers.tools"


async def test_a_decision_sent_before_the_expiry_is_sent_counts_and_the_expiry_does_not(
    store: Store,
) -> None:
    """The expiry is due, but a decision reached the inbox before the Brain sent the
    expiry: the decision's unique key keeps the expiry out, and the call is dispatched."""
    # Long enough for the first pass to end before it, on a loaded machine too.
    await submit(store, APPROVAL_KIND, approval_input("deny", 1.0))
    await run(store, registry=APPROVALS, tools=load_tool_modules([TOOLS]))
    [gate] = (await store.load("s1")).open_tasks
    await asyncio.sleep(1.1)  # the expiry is due; no Brain has run since
    assert await decision(store, gate.id, "approved")

    await run(store, registry=APPROVALS)

    [job] = await outbox_jobs(store)
    assert (job.tool, job.arguments) == ("send_safe", {"to": "ana@example.com"})
    [made] = await store.inbox.of_session("s1")
    assert made.body["payload"]["verdict"] == "approved" and made.applied_at is not None  # type: ignore[index]


async def test_an_escalated_approval_stays_pending_with_no_expiry_until_decided(
    store: Store,
) -> None:
    await submit(store, APPROVAL_KIND, approval_input("escalate", 0.2))
    await run(store, registry=APPROVALS, tools=load_tool_modules([TOOLS]))
    await asyncio.sleep(0.3)

    await run(store, registry=APPROVALS)

    [gate] = (await store.load("s1")).open_tasks
    assert (gate.status, gate.wait_signal, gate.wake_at) == (
        "waiting",
        decision_signal(gate.id),
        None,
    )
    assert gate.state == {"escalated": True}
    assert await store.inbox.of_session("s1") == []  # an escalation is not a decision
    assert await decision(store, gate.id, "denied")
    await run(store, registry=APPROVALS)
    result = await answer(store)
    assert result["status"] == "denied"  # type: ignore[index]
    assert result["error"] == "call of 'send_safe' denied by ana: ok"  # type: ignore[index]


async def test_a_tasks_call_meeting_the_tools_condition_waits_then_runs_as_edited(
    store: Store,
) -> None:
    """``send_invoice`` needs approval of an amount over 100, wherever it is called: a
    task's call under it is dispatched at once, one over it waits (the approval task in its
    place says why), and an approval that edits the arguments dispatches the edit alone."""
    registry = TaskRegistry().include(kinds.registry).include(APPROVALS)
    under = {"tool": "send_invoice", "arguments": {"to": "ana", "amount": 50}}
    await submit(store, "forwarder", None, session_id="s2")
    await run(store, "s2", registry=registry, tools=load_tool_modules([TOOLS]))
    assert await signal(store, "go", "sig-1", under, session_id="s2")
    await run(store, "s2", registry=registry)
    [job] = await outbox_jobs(store)
    assert (job.tool, job.arguments) == ("send_invoice", {"to": "ana", "amount": 50})

    over = {"tool": "send_invoice", "arguments": {"to": "bo", "amount": 500}}
    await submit(store, "forwarder", None)
    await run(store, registry=registry)
    assert await signal(store, "go", "sig-2", over)
    await run(store, registry=registry)
    assert len(await outbox_jobs(store)) == 1  # nothing dispatched before a decision
    [gate] = [t for t in await all_tasks(store) if t.kind == APPROVAL_KIND]
    assert gate.input["reason"] == "the call meets the approval condition amount > 100"
    [pending] = await pending_approvals(store, "s1")
    assert (pending.approval_id, pending.reason) == (gate.id, gate.input["reason"])

    edit = {"to": "bo", "amount": 90}
    [made] = await decide(
        store, "s1", gate.id, "approved", None, {}, principal="ana", wake=no_wake, arguments=edit
    )
    assert (made.arguments, made.principal) == (edit, "ana")
    await run(store, registry=registry)

    assert [(j.tool, j.arguments) for j in await outbox_jobs(store)] == [
        ("send_invoice", {"to": "ana", "amount": 50}),
        ("send_invoice", edit),
    ]


def no_wake(compat: str) -> OutboxMessage:
    """A decision's wake-up of ``s1``, left in the outbox: the tests run the passes."""
    return OutboxMessage(
        "nowhere", encode(SessionWake(session_id="s1", compat=compat, reason="decision"))
    )


async def test_a_phase_waiting_for_a_tool_declaration_keeps_the_signal_it_resumed_with(
    store: Store,
) -> None:
    await submit(store, "forwarder", None)
    await run(store)
    payload = {"tool": "send_safe", "arguments": {"to": "ana@example.com"}}
    assert await signal(store, "go", "sig-1", payload)

    summary = await run(store, declaration_grace=60)  # received; the tool is not declared yet

    [waiting] = (await store.load("s1")).open_tasks
    assert (waiting.status, waiting.phase, waiting.signal["signal_id"]) == (  # type: ignore[index]
        "sleeping",
        "call",
        "sig-1",
    )
    assert summary.next_wake is not None
    await asyncio.sleep(max(0.0, summary.next_wake - time.time()) + 0.05)
    await run(store, tools=load_tool_modules([TOOLS]))
    [job] = await outbox_jobs(store)
    assert (job.tool, job.arguments) == ("send_safe", {"to": "ana@example.com"})


@pytest.mark.parametrize(
    ("join", "specs", "outcomes"),
    [
        # quorum of 2: the two quick successes meet it; the sleepers are stopped.
        ({"join": "quorum", "k": 2}, [{}, {"sleep": 60}, {}, {"sleep": 60}], "scsc"),
        # first 2: a failure counts as ended; the sleeper is stopped.
        ({"join": "first", "k": 2}, [{"fail": True}, {}, {"sleep": 60}], "fsc"),
    ],
)
async def test_a_met_join_stops_the_rest_and_the_next_phase_sees_them_ended(
    store: Store, join: dict[str, object], specs: list[dict[str, object]], outcomes: str
) -> None:
    children = [{"n": n, **spec} for n, spec in enumerate(specs)]
    await submit(store, "parent", {"children": children, **join})

    await run(store)

    seen = await answer(store)
    letter = {"succeeded": "s", "cancelled": "c", "failed": "f"}
    assert "".join(letter[outcome] for outcome, _ in seen) == outcomes  # type: ignore[union-attr]


async def test_an_unreachable_quorum_fails_the_wait(store: Store) -> None:
    children = [{"n": 0, "fail": True}, {"n": 1, "fail": True}, {"n": 2, "sleep": 60}]
    await submit(store, "parent", {"children": children, "join": "quorum", "k": 2})

    await run(store)

    record = await store.submissions.get("s1", "r1")
    assert record.status == "failed" and "quorum of 2 unreachable" in (record.error or "")
