"""Compensation: which effects are undone, in which order, and what a failed undo leaves.

The decisions first, as pure functions; then the scheduler in-process against real stores,
with the test standing in for Hands (it records each call's outcome in the ledger), so every
commit between a failure and the end of its compensation is seen.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import time
from typing import Any

import pytest

from brainhands.brain.compensation import (
    COMPENSATING,
    COMPENSATION_ENTRY,
    EFFECTS_DOCUMENT,
    Effect,
    Stuck,
    Undo,
    Undone,
    effect_of,
    next_compensation,
    requires_action,
    undo_operation_id,
    with_compensation,
)
from brainhands.brain.decide import TOOL_KIND
from brainhands.brain.edits import RunSummary
from brainhands.brain.registry import TaskKind, TaskRegistry
from brainhands.brain.scheduler import SessionRunner
from brainhands.brain.task import Call, Dispatch, Fail, Finish, Next, PhaseContext, Spawn, TaskView
from brainhands.shared.messages import ToolJob
from brainhands.shared.store import Store, TaskRecord
from brainhands.shared.store.catalog import ToolCatalog
from brainhands.shared.tools import ToolDeclaration, ToolRegistry
from brainhands.shared.tools import registry as tool_registry
from tests.brain.test_scheduler import TOPOLOGY, outbox_jobs, submit
from tests.helpers import booking, booking_tools

# The pure decisions ------------------------------------------------------------------------


def tool_task(task_id: str, tool: str = "book", arguments: Any = None, **fields: Any) -> TaskRecord:
    fields.setdefault(
        "input", {"tool": tool, "arguments": arguments or {"item": task_id}, "pool": "p"}
    )
    return TaskRecord.new(
        id=task_id,
        session_id="s1",
        kind=TOOL_KIND,
        kind_version=1,
        operation_id=f"op-{task_id}",
        **fields,
    )


def effect(task_id: str, **fields: Any) -> Effect:
    made = effect_of(tool_task(task_id), {"key": f"op-{task_id}"}, booking.cancel)
    assert made is not None
    return Effect(**{**made, **fields})  # type: ignore[typeddict-item]


def ended(task_id: str, outcome: str, error: Any = None) -> TaskRecord:
    return tool_task(task_id, status="terminal", outcome=outcome, error=error)


def test_an_effect_records_its_undo_derived_from_arguments_and_result() -> None:
    made = effect_of(
        tool_task("t1", arguments={"trip": "x", "item": "hotel"}), {"key": "k1"}, booking.cancel
    )

    assert made == {
        "task_id": "t1",
        "operation_id": "op-t1",
        "tool": "book",
        "undo": {"tool": "cancel_booking", "arguments": {"booking": "k1", "item": "hotel"}},
        "problem": None,
        "by": None,
        "outcome": None,
        "held_since": None,
    }
    assert effect_of(tool_task("t1"), {"key": "k1"}, None) is None  # nothing declared


def test_a_tool_named_as_undo_gets_the_whole_call() -> None:
    made = effect_of(tool_task("t1", arguments={"a": 1}), {"r": 2}, "unbook")

    assert made is not None and made["undo"] == {
        "tool": "unbook",
        "arguments": {"operation_id": "op-t1", "arguments": {"a": 1}, "result": {"r": 2}},
    }


def test_an_undo_that_cannot_be_derived_is_an_effect_with_a_problem() -> None:
    def broken(arguments: dict[str, Any], result: Any) -> Call:
        raise KeyError("receipt")

    raised = effect_of(tool_task("t1"), {}, broken)
    by_reference = effect_of(
        tool_task(
            "t2", input={"tool": "book", "arguments": {}, "arguments_blob_id": "b", "pool": "p"}
        ),
        {},
        booking.cancel,
    )

    assert raised is not None and raised["undo"] is None
    assert "raised KeyError" in (raised["problem"] or "")
    assert by_reference is not None and "by reference" in (by_reference["problem"] or "")


def test_effects_are_undone_one_at_a_time_the_most_recent_first() -> None:
    effects = [effect("t1"), effect("t2"), effect("t3")]

    effects, step = next_compensation(effects, {})
    assert isinstance(step, Undo) and step.index == 2
    assert step.call.operation_id == undo_operation_id("t3") == "t3/compensate"
    assert step.call.arguments == {"booking": "op-t3", "item": "t3"}

    effects[2]["by"] = "u3"
    effects, step = next_compensation(effects, {"u3": ended("u3", "succeeded")})
    assert isinstance(step, Undo) and step.index == 1
    assert effects[2]["outcome"] == "compensated"

    effects[1]["by"] = "u2"
    effects, step = next_compensation(effects, {"u2": ended("u2", "succeeded")})
    effects[0]["by"] = "u1"
    effects, step = next_compensation(effects, {"u1": ended("u1", "succeeded")})

    assert isinstance(step, Undone) and not step.failed
    assert step.record == {
        "status": "compensated",
        "compensated": [
            {"task_id": t, "operation_id": f"op-{t}", "tool": "book"} for t in ("t3", "t2", "t1")
        ],
    }


def test_a_failed_undo_stops_the_chain_and_leaves_the_rest_to_an_operator() -> None:
    effects = [effect("t1"), effect("t2", by="u2"), effect("t3", by="u3", outcome="compensated")]

    effects, step = next_compensation(effects, {"u2": ended("u2", "failed", {"why": "refused"})})

    assert isinstance(step, Stuck)  # the task waits for an operator (tests/brain/test_undo_acts.py)
    assert step.record["status"] == "requires_action"
    assert step.record["failed"]["task_id"] == "t2" and step.record["failed"]["undo_task"] == "u2"
    assert step.record["error"] == {"why": "refused"}
    assert [e["task_id"] for e in step.record["compensated"]] == ["t3"]
    assert [e["task_id"] for e in step.record["not_compensated"]] == ["t1"]


def test_an_effect_with_a_problem_stops_the_chain_too() -> None:
    effects = [effect("t1"), effect("t2", undo=None, problem="no undo")]

    _, step = next_compensation(effects, {})

    assert isinstance(step, Stuck) and step.record["error"] == "no undo"
    assert step.record["retryable"] is False


def test_an_undo_still_running_is_a_broken_invariant() -> None:
    with pytest.raises(RuntimeError, match="has not ended"):
        next_compensation([effect("t1", by="u1")], {"u1": tool_task("u1", status="waiting")})


def test_the_error_a_compensated_task_ends_with_keeps_its_own() -> None:
    record = {"status": "compensated", "compensated": []}

    assert with_compensation({"reason": "x"}, record) == {"reason": "x", "compensation": record}
    assert with_compensation("boom", record) == {"error": "boom", "compensation": record}
    assert requires_action({"requires_action": {"t": record}}) == {"t": record}
    assert requires_action(None) == {}


def test_a_declaration_names_its_compensating_tool_without_changing_older_digests() -> None:
    plain = ToolDeclaration("book", "p", "safe", "d", {})

    assert ToolDeclaration("book", "p", "safe", "d", {}, compensate="unbook").digest != plain.digest
    # The digest of a declaration without one is what it was before the field existed (and
    # before the fields added after it did).
    later = ("compensate", "policy_reason", "approval_when")
    fields = {k: v for k, v in dataclasses.asdict(plain).items() if k not in later}
    before = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    assert plain.digest == hashlib.sha256(before).hexdigest()
    with pytest.raises(TypeError, match="tool name or a function"):
        TaskKind("k").compensate("book", 3)  # type: ignore[arg-type]


# The scheduler, in-process -----------------------------------------------------------------


def booking_tool_specs() -> ToolRegistry:
    assert booking_tools.book is not None  # imported: its tools are registered
    tools = ToolRegistry()
    for name in ("book", "cancel_booking"):
        tools.add(tool_registry.get(name))
    return tools


# Kinds of these tests: two bookings at once under fail_fast, undone by the kind; and a
# reservation undone by the tool its declaration names (the kind says nothing of it).
KINDS = TaskRegistry().include(booking.registry)
pair = KINDS.add(TaskKind("pair"))
pair.compensate("book", booking.cancel)
errand = KINDS.add(TaskKind("errand"))
RESERVE = ToolDeclaration("reserve", "email", "safe", "Reserve.", {}, compensate="release")
RELEASE = ToolDeclaration("release", "email", "safe", "Release.", {})


@pair.phase("book")
async def book_both(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    calls = [Call("book", {"trip": "t", "item": item}) for item in ("hotel", "flight")]
    return Spawn(calls, then="done", join="fail_fast")


@pair.phase("done")
async def both_booked(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Finish({"booked": 2})


@errand.phase("reserve")
async def reserve(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Dispatch("reserve", {"item": "room"}, then="give_up")


@errand.phase("give_up")
async def give_up(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Fail({"reason": "plans changed"})


async def run(store: Store, catalog: ToolCatalog, session_id: str = "s1") -> RunSummary:
    """One Brain pass with ``catalog`` (a Brain's, kept from pass to pass), the booking
    tools (and the errand's) declared first as their Hands would."""
    specs = [s.declaration() for s in booking_tool_specs()]
    await store.declarations.declare_tools([*specs, RESERVE, RELEASE])
    token = (await store.load(session_id)).session.fence + 1
    await store.claim_session_fence(session_id, token)
    runner = SessionRunner(
        store=store,
        tasks=KINDS,
        tools=catalog,
        topology=TOPOLOGY,
        session_id=session_id,
        fence=token,
    )
    return await runner.run()


class FakeHands:
    """Records outcomes for the jobs in the outbox, as the Hands of their pool would."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.ledger = store.ledger
        self.done: set[str] = set()

    async def pending(self) -> list[ToolJob]:
        return [j for j in await outbox_jobs(self.store) if j.operation_id not in self.done]

    async def finish(self, job: ToolJob, status: str, result: Any = None) -> None:
        intent = {
            "session_id": job.session_id,
            "task_id": job.task_id,
            "tool": job.tool,
            "pool": job.pool,
            "arguments": job.arguments,
        }
        await self.ledger.claim(job.operation_id, 1, intent=intent)
        error = None if status == "succeeded" else {"type": "ToolError", "message": "no"}
        await self.ledger.record_outcome(
            job.operation_id,
            1,
            status=status,
            result=result,
            error=error,  # type: ignore[arg-type]
        )
        self.done.add(job.operation_id)

    async def run_one(self, fail: bool = False) -> ToolJob:
        """Finish the one pending job: a booking succeeds keyed by its operation id."""
        [job] = await self.pending()
        result = {"key": job.operation_id, "receipt": f"r-{job.operation_id}"}
        await self.finish(job, "failed" if fail else "succeeded", None if fail else result)
        return job


async def drive(
    store: Store, hands: FakeHands, *, fail: set[str], refuse: frozenset[str] = frozenset()
) -> list[ToolJob]:
    """Pass, answer the one job, pass again, until no job is pending; the jobs in order."""
    catalog = ToolCatalog(store)
    jobs: list[ToolJob] = []
    await run(store, catalog)
    while await hands.pending():
        [job] = await hands.pending()
        item = job.arguments.get("item")
        failing = (job.tool == "book" and item in fail) or (
            job.tool == "cancel_booking" and item in refuse
        )
        jobs.append(await hands.run_one(fail=failing))
        await run(store, catalog)
    return jobs


async def all_tasks(store: Store) -> list[TaskRecord]:
    from tests.brain.test_scheduler import all_tasks as read

    return await read(store)


@pytest.mark.integration
async def test_a_trip_whose_third_step_fails_is_undone_in_reverse_order(store: Store) -> None:
    await submit(store, "trip", {"trip": "t", "fail": ["car"]})
    hands = FakeHands(store)

    jobs = await drive(store, hands, fail={"car"})

    booked = [j for j in jobs if j.tool == "book"]
    undos = [j for j in jobs if j.tool == "cancel_booking"]
    assert [j.arguments["item"] for j in booked] == ["hotel", "flight", "car"]
    assert [j.arguments for j in undos] == [
        {"booking": booked[1].operation_id, "item": "flight"},
        {"booking": booked[0].operation_id, "item": "hotel"},
    ]
    uid = (await store.load("s1")).session.uid
    assert [j.operation_id for j in undos] == [
        f"{uid}:{j.task_id[:20]}/compensate" for j in booked[1::-1]
    ]
    record = await store.submissions.get("s1", "r1")
    assert record.status == "failed" and "car not booked" in (record.error or "")
    [root] = [t for t in await all_tasks(store) if t.kind == "trip"]
    assert root.status == "terminal" and root.outcome == "failed"
    assert root.error["reason"] == "car not booked"
    assert root.error["compensation"]["status"] == "compensated"
    state = await store.load("s1")
    assert state.documents[EFFECTS_DOCUMENT].body == {"tasks": {}, "requires_action": {}}
    [entry] = [e for e in state.entries if e.kind == COMPENSATION_ENTRY]
    assert entry.body["task_id"] == root.id and entry.body["status"] == "compensated"


@pytest.mark.integration
async def test_a_trip_that_succeeds_leaves_nothing_to_undo(store: Store) -> None:
    await submit(store, "trip", {"trip": "t"})

    jobs = await drive(store, FakeHands(store), fail=set())

    assert [j.tool for j in jobs] == ["book"] * 3
    assert (await store.submissions.get("s1", "r1")).status == "answered"
    body = (await store.load("s1")).documents[EFFECTS_DOCUMENT].body
    assert body == {"tasks": {}, "requires_action": {}}


@pytest.mark.integration
async def test_a_failed_undo_leaves_the_task_waiting_for_an_operator(store: Store) -> None:
    # The flight's cancellation is refused: the hotel's is never tried.
    await submit(store, "trip", {"trip": "t", "fail": ["car"]})

    jobs = await drive(store, FakeHands(store), fail={"car"}, refuse=frozenset({"flight"}))

    assert [j.tool for j in jobs] == ["book", "book", "book", "cancel_booking"]
    [root] = [t for t in await all_tasks(store) if t.kind == "trip"]
    assert root.status == "waiting" and root.phase == COMPENSATING
    assert (await store.submissions.get("s1", "r1")).status == "running"
    body = (await store.load("s1")).documents[EFFECTS_DOCUMENT].body
    record = requires_action(body)[root.id]
    assert record["status"] == "requires_action" and record["failed"]["tool"] == "book"
    assert [e["tool"] for e in record["not_compensated"]] == ["book"]


@pytest.mark.integration
async def test_a_cancelled_trip_undoes_what_it_booked(store: Store) -> None:
    await submit(store, "trip", {"trip": "t"})
    hands = FakeHands(store)
    catalog = ToolCatalog(store)
    await run(store, catalog)
    hotel = await hands.run_one()
    await run(store, catalog)  # the flight is dispatched
    await store.inbox.send_request(session_id="s1", kind="cancel", key="r1", wake=None)

    summary = await run(store, catalog)

    # The flight may still be booked: its Hands are told to stop, and its outcome awaited.
    [flight_job] = await hands.pending()
    assert flight_job.arguments["item"] == "flight"
    assert summary.cancelled_calls == {flight_job.operation_id}
    [root] = [t for t in await all_tasks(store) if t.kind == "trip"]
    assert root.status == "completing" and root.phase != COMPENSATING
    # Its Hands heard of the cancel before the call went out: not an effect.
    await hands.finish(flight_job, "cancelled")
    await run(store, catalog)

    [undo] = await hands.pending()
    assert undo.tool == "cancel_booking"
    assert undo.arguments == {"booking": hotel.operation_id, "item": "hotel"}
    [root] = [t for t in await all_tasks(store) if t.kind == "trip"]
    assert root.status == "completing" and root.phase == COMPENSATING
    assert root.outcome == "cancelled"
    await hands.finish(undo, "succeeded", {"cancelled": hotel.operation_id})
    await run(store, catalog)

    assert (await store.submissions.get("s1", "r1")).status == "cancelled"
    [root] = [t for t in await all_tasks(store) if t.kind == "trip"]
    assert root.status == "terminal" and root.error["compensation"]["status"] == "compensated"
    assert [e["tool"] for e in root.error["compensation"]["compensated"]] == ["book"]


@pytest.mark.integration
async def test_a_call_that_succeeds_after_its_cancel_is_undone(store: Store) -> None:
    """Under fail_fast the hotel fails while the flight is out: the flight is asked to stop,
    but its booking goes through all the same. Its success is awaited and undone, not
    thrown away with a cancelled outcome."""
    await submit(store, "pair", {})
    hands = FakeHands(store)
    catalog = ToolCatalog(store)
    await run(store, catalog)
    jobs = {j.arguments["item"]: j for j in await hands.pending()}
    await hands.finish(jobs["hotel"], "failed")

    summary = await run(store, catalog)

    flight_job = jobs["flight"]
    assert summary.cancelled_calls == {flight_job.operation_id}  # its Hands are told
    tasks = {t.id: t for t in await all_tasks(store)}
    flight = tasks[flight_job.task_id]
    assert flight.cancel_requested and flight.status == "waiting"
    [root] = [t for t in tasks.values() if t.kind == "pair"]
    assert root.status == "completing" and root.outcome == "failed"

    await hands.finish(flight_job, "succeeded", {"key": flight_job.operation_id})
    await run(store, catalog)

    [undo] = await hands.pending()
    assert undo.tool == "cancel_booking"
    assert undo.arguments == {"booking": flight_job.operation_id, "item": "flight"}
    tasks = {t.id: t for t in await all_tasks(store)}
    assert tasks[flight_job.task_id].outcome == "succeeded"
    await hands.finish(undo, "succeeded", {"cancelled": flight_job.operation_id})
    await run(store, catalog)

    record = await store.submissions.get("s1", "r1")
    assert record.status == "failed"
    [root] = [t for t in await all_tasks(store) if t.kind == "pair"]
    assert root.status == "terminal" and root.error["reason"] == "a child failed"
    assert root.error["compensation"] == {
        "status": "compensated",
        "compensated": [
            {"task_id": flight_job.task_id, "operation_id": flight_job.operation_id, "tool": "book"}
        ],
    }


@pytest.mark.integration
async def test_a_brain_that_read_no_declarations_records_a_declared_undo(
    store: Store,
) -> None:
    """The undo a tool's declaration names is frozen into its call at dispatch: a Brain that
    has not read the declaration when it settles the call still records the effect."""
    await submit(store, "errand", {})
    hands = FakeHands(store)
    await run(store, ToolCatalog(store))
    [job] = await hands.pending()
    [call] = [t for t in await all_tasks(store) if t.id == job.task_id]
    assert call.input["compensate"] == "release"
    await hands.finish(job, "succeeded", {"room": 7})

    fresh = ToolCatalog(store)  # a Brain just started: it knows no tools
    summary = await run(store, fresh)

    [root] = [t for t in await all_tasks(store) if t.kind == "errand"]
    assert root.phase == COMPENSATING and root.outcome == "failed"
    [effect] = (await store.load("s1")).documents[EFFECTS_DOCUMENT].body["tasks"][root.id]
    assert effect["undo"] == {
        "tool": "release",
        "arguments": {
            "operation_id": job.operation_id,
            "arguments": {"item": "room"},
            "result": {"room": 7},
        },
    }
    started = time.monotonic()
    while not await hands.pending():  # the undo waits for its own tool's declaration
        assert time.monotonic() - started < 10, "the undo was never dispatched"
        await asyncio.sleep(max(0.05, (summary.next_wake or 0) - time.time()))
        summary = await run(store, fresh)
    [undo] = await hands.pending()
    assert undo.tool == "release"
    await hands.finish(undo, "succeeded", {})
    await run(store, fresh)
    [root] = [t for t in await all_tasks(store) if t.kind == "errand"]
    assert root.status == "terminal" and root.error["compensation"]["status"] == "compensated"


@pytest.mark.integration
async def test_a_brain_that_read_no_declarations_holds_the_undo_until_it_has(
    store: Store,
) -> None:
    """A Brain restarted mid-compensation knows no tools yet: the undo waits for their
    declarations (read meanwhile) instead of failing as a call of an unknown tool."""
    await submit(store, "trip", {"trip": "t", "fail": ["flight"]})
    hands = FakeHands(store)
    first = ToolCatalog(store)
    await run(store, first)
    hotel = await hands.run_one()
    await run(store, first)
    await hands.run_one(fail=True)  # the flight: the trip fails

    fresh = ToolCatalog(store)
    summary = await run(store, fresh)

    [root] = [t for t in await all_tasks(store) if t.kind == "trip"]
    assert root.status == "sleeping" and root.phase == COMPENSATING
    assert summary.next_wake is not None and await hands.pending() == []
    started = time.monotonic()
    while not await hands.pending():
        assert time.monotonic() - started < 10, "the undo was never dispatched"
        await asyncio.sleep(max(0.05, summary.next_wake - time.time()))
        summary = await run(store, fresh)
    [undo] = await hands.pending()
    assert undo.arguments == {"booking": hotel.operation_id, "item": "hotel"}
    await hands.finish(undo, "succeeded", {})
    await run(store, fresh)
    [root] = [t for t in await all_tasks(store) if t.kind == "trip"]
    assert root.status == "terminal" and root.error["compensation"]["status"] == "compensated"
