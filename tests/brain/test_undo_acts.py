"""A failed undo waits for an operator: the rules of ``retry`` and ``abandon`` as pure
functions, then the three-step booking in-process against real stores (the test stands in
for Hands, as in ``tests.brain.test_compensation``): the session shows ``requires_action``
in its view and in the list, a retry runs the failed undo again under a new operation id
and the chain goes on, an abandon ends the trip failed with the record and the reason."""

from __future__ import annotations

from typing import Any

import pytest

from brainhands.brain.compensation import (
    COMPENSATING,
    Stuck,
    Undo,
    Undone,
    next_compensation,
    operator_act,
    undo_operation_id,
)
from brainhands.brain.decide import Facts, Settle, next_action
from brainhands.brain.ids import CHOSEN_OPERATION_ID_MAX
from brainhands.client.compensations import act_on_compensation
from brainhands.client.views import session_view
from brainhands.shared.errors import DecisionRefused, InvalidRequest
from brainhands.shared.messages import ToolJob
from brainhands.shared.store import SessionFilter, Store, TaskRecord
from brainhands.shared.store.catalog import ToolCatalog
from brainhands.shared.vocabulary import (
    EFFECTS_DOCUMENT,
    CompensationAction,
    compensation_ref,
    compensation_signal,
)
from tests.brain.test_compensation import FakeHands, all_tasks, effect, ended, run
from tests.brain.test_scheduler import TOPOLOGY
from tests.helpers.submitting import submit_input

# The pure decisions ------------------------------------------------------------------------


def act(action: str, effect_id: str = "t2", attempt: int = 0, **extra: Any) -> dict[str, Any]:
    ref = compensation_ref({"failed": {"task_id": effect_id}, "attempt": attempt})
    return {"action": action, "ref": ref, "by": "ops", "at": 1.0, "reason": "why", **extra}


def stuck_at_t2() -> list[Any]:
    """Three effects: t3 undone, t2's undo (u2) failed, t1 not tried."""
    return [effect("t1"), effect("t2", by="u2"), effect("t3", by="u3", outcome="compensated")]


FAILED = {"u2": ended("u2", "failed", {"why": "refused"})}


def test_a_retry_runs_the_failed_undo_again_under_a_new_operation_id() -> None:
    effects, step = next_compensation(stuck_at_t2(), FAILED, act("retry", action_id="a1"))

    assert isinstance(step, Undo) and step.index == 1
    assert step.call.operation_id == "t2/compensate/retry-1" != undo_operation_id("t2")
    assert step.call.arguments == {"booking": "op-t2", "item": "t2"}
    assert effects[1]["retries"] == 1 and effects[1]["outcome"] is None
    assert effects[1]["acts"] == [
        {"action": "retry", "by": "ops", "at": 1.0, "reason": "why", "action_id": "a1"}
    ]

    # The retry succeeds: the chain goes on to t1, then ends compensated, the retry kept.
    effects[1]["by"] = "r2"
    effects, step = next_compensation(effects, {"r2": ended("r2", "succeeded")})
    assert isinstance(step, Undo) and step.index == 0
    effects[0]["by"] = "u1"
    _, step = next_compensation(effects, {"u1": ended("u1", "succeeded")})
    assert isinstance(step, Undone) and not step.failed
    assert [e["task_id"] for e in step.record["compensated"]] == ["t3", "t2", "t1"]
    assert step.record["retried"][0]["reason"] == "why"


def test_a_retry_that_fails_again_waits_again_for_an_act_on_that_attempt() -> None:
    effects, step = next_compensation(stuck_at_t2(), FAILED, act("retry"))
    assert isinstance(step, Undo)
    effects[1]["by"] = "r2"
    again = {"r2": ended("r2", "failed", {"why": "still down"})}

    effects, step = next_compensation(effects, again)
    assert isinstance(step, Stuck)
    assert step.record["attempt"] == 1 and step.record["error"] == {"why": "still down"}
    assert step.record["failed"]["undo_task"] == "r2"

    # The act sent for the first failure is used up: nothing happens.
    _, stale = next_compensation(effects, {}, act("retry", attempt=0))
    assert isinstance(stale, Stuck) and stale.record == step.record
    _, step = next_compensation(effects, {}, act("retry", attempt=1))
    assert isinstance(step, Undo) and step.call.operation_id == "t2/compensate/retry-2"


def test_an_abandon_ends_it_failed_with_the_record_and_the_reason() -> None:
    _, step = next_compensation(stuck_at_t2(), FAILED, act("abandon", reason="done by hand"))

    assert isinstance(step, Undone) and step.failed
    assert step.record["status"] == "compensation_failed"
    assert step.record["error"] == {"why": "refused"}
    assert step.record["abandoned"]["reason"] == "done by hand"
    assert step.record["abandoned"]["by"] == "ops"
    assert [e["task_id"] for e in step.record["not_compensated"]] == ["t1"]


def test_an_effect_without_an_undo_can_only_be_abandoned() -> None:
    effects = [effect("t1"), effect("t2", undo=None, problem="no undo")]

    _, retried = next_compensation(effects, {}, act("retry"))
    _, abandoned = next_compensation(effects, {}, act("abandon"))

    assert isinstance(retried, Stuck) and retried.record["retryable"] is False
    assert isinstance(abandoned, Undone) and abandoned.record["error"] == "no undo"


def test_a_retried_undo_keeps_a_new_operation_id_within_the_chosen_limit() -> None:
    task_id = "f" * 32
    ids = {undo_operation_id(task_id, n) for n in (0, 1, 2, 10, 100)}

    assert len(ids) == 5
    assert all(len(i) <= CHOSEN_OPERATION_ID_MAX for i in ids)


def task(status: str, **fields: Any) -> TaskRecord:
    return TaskRecord.new(
        id="t", session_id="s1", kind="trip", kind_version=1, input={}, status=status, **fields
    )


def test_only_the_tasks_own_signal_is_an_act_and_receiving_it_decides_again() -> None:
    own = {"name": compensation_signal("t"), "payload": act("retry"), "signal_id": "a1"}
    other = {"name": compensation_signal("u"), "payload": act("retry"), "signal_id": "a2"}

    assert operator_act(task("pending", signal=own)) == {**act("retry"), "action_id": "a1"}
    assert operator_act(task("pending", signal=other)) is None
    assert operator_act(task("pending")) is None
    received = task("pending", phase=COMPENSATING, outcome="failed", error={"e": 1}, signal=own)
    assert next_action(Facts(received, now=0.0, has_handler=True, max_restarts=3)) == Settle(
        "failed", error={"e": 1}
    )


# The booking, in-process -------------------------------------------------------------------


class Trip:
    """A trip in session ``key`` whose car fails and whose flight's cancellation fails too:
    it waits for an operator. ``passes()`` runs a Brain pass; ``root`` is the trip's task."""

    def __init__(self, store: Store, key: str = "s1") -> None:
        self.store, self.key = store, key
        self.hands, self.catalog = FakeHands(store), ToolCatalog(store)

    async def passes(self) -> None:
        await run(self.store, self.catalog, self.key)

    async def stuck(self) -> tuple[TaskRecord, ToolJob]:
        """Run it until it waits; returns its task and the hotel's booking job."""
        input = {"kind": "trip", "input": {"trip": "t", "fail": ["car"]}}
        await submit_input(
            self.store, TOPOLOGY, session_id=self.key, request_id="r1", input=input, compat="v1"
        )
        await self.passes()
        hotel = await self.hands.run_one()
        await self.passes()
        await self.hands.run_one()  # the flight
        await self.passes()
        await self.hands.run_one(fail=True)  # the car: sold out
        await self.passes()
        refused = await self.hands.run_one(fail=True)  # the flight's cancellation
        assert refused.tool == "cancel_booking" and refused.arguments["item"] == "flight"
        await self.passes()
        tasks, _ = await self.store.queries.history(self.key)
        [root] = [t for t in tasks if t.kind == "trip"]
        assert root.status == "waiting"
        return root, hotel


async def send(
    store: Store, task_id: str, action: CompensationAction, action_id: str, reason: str = "fixed"
) -> bool:
    receipt = await act_on_compensation(
        store, "s1", task_id, action, reason, None, "operator", action_id
    )
    return receipt.created


async def needing_action(store: Store) -> list[str]:
    which = SessionFilter(tenant="default", needs_action=True)
    return [s.id for s in await store.listings.page(which, limit=10, after=None)]


@pytest.mark.integration
async def test_a_failed_undo_shows_as_requiring_action_and_a_retry_undoes_it_once(
    store: Store,
) -> None:
    trip = Trip(store)
    root, hotel = await trip.stuck()
    hands = trip.hands

    view = session_view(await store.detail("s1"))
    assert (view.status, view.needs_action) == ("requires_action", True)
    [stop] = view.compensations
    assert stop.task_id == root.id and stop.retryable and stop.attempt == 0
    assert stop.failed["tool"] == "book" and stop.error["error"]["message"] == "no"
    assert [e["task_id"] for e in stop.not_compensated] == [hotel.task_id]
    assert await needing_action(store) == ["s1"]
    with pytest.raises(InvalidRequest):
        await send(store, root.id, "retry", "a0", reason="")
    with pytest.raises(DecisionRefused, match="not waiting"):
        await send(store, "another-task", "retry", "a0")

    assert await send(store, root.id, "retry", "a1")
    assert not await send(store, root.id, "retry", "a1")  # the same act: one
    await trip.passes()

    retried = await hands.run_one()  # the flight's cancellation, again: it goes through now
    assert retried.operation_id.endswith("/compensate/retry-1")
    assert retried.arguments["item"] == "flight"
    assert session_view(await store.detail("s1")).status == "running"
    assert await needing_action(store) == []
    await trip.passes()
    undo_hotel = await hands.run_one()
    assert undo_hotel.arguments == {"booking": hotel.operation_id, "item": "hotel"}
    await trip.passes()

    # At the ledger: each booking cancelled by exactly one succeeded call.
    ops = await store.queries.operations_by_ids([j for j in hands.done])
    cancels = [op for op in ops.values() if op.tool == "cancel_booking"]
    succeeded = [op.arguments["item"] for op in cancels if op.status == "succeeded"]
    assert sorted(succeeded) == ["flight", "hotel"] and len(cancels) == 3
    [root] = [t for t in await all_tasks(store) if t.kind == "trip"]
    assert root.status == "terminal" and root.outcome == "failed"
    compensation = root.error["compensation"]
    assert compensation["status"] == "compensated"
    assert [(a["action"], a["by"], a["reason"]) for a in compensation["retried"]] == [
        ("retry", "operator", "fixed")
    ]
    assert (await store.submissions.get("s1", "r1")).status == "failed"
    body = (await store.load("s1")).documents[EFFECTS_DOCUMENT].body
    assert body == {"tasks": {}, "requires_action": {}}
    assert not await send(store, root.id, "retry", "a1")  # answered as sent before
    with pytest.raises(DecisionRefused, match="not waiting"):
        await send(store, root.id, "abandon", "a2")
    assert session_view(await store.detail("s1")).status == "idle"


@pytest.mark.integration
async def test_an_abandoned_compensation_ends_the_trip_failed_with_the_reason(
    store: Store,
) -> None:
    trip = Trip(store)
    root, hotel = await trip.stuck()
    hands = trip.hands

    # An act for another failure (a later attempt) is used up: the trip waits on.
    stale = await store.inbox.send_signal(
        session_id="s1",
        name=compensation_signal(root.id),
        signal_id="stale",
        payload=act("retry", effect_id=hotel.task_id, attempt=1),
        wake=None,
    )
    await trip.passes()
    [applied] = [r for r in await store.inbox.of_session("s1") if r.id == stale.request.id]
    assert applied.applied_at is not None and await hands.pending() == []
    assert [s.task_id for s in session_view(await store.detail("s1")).compensations] == [root.id]

    assert await send(store, root.id, "abandon", "a1", reason="the hotel is refunded by hand")
    await trip.passes()

    assert await hands.pending() == []  # the hotel's booking is left as it is
    [root] = [t for t in await all_tasks(store) if t.kind == "trip"]
    assert root.status == "terminal" and root.outcome == "failed"
    assert root.error["reason"] == "car not booked"
    compensation = root.error["compensation"]
    assert compensation["status"] == "compensation_failed"
    assert compensation["failed"]["tool"] == "book" and compensation["error"]["status"] == "failed"
    assert compensation["abandoned"]["reason"] == "the hotel is refunded by hand"
    assert compensation["abandoned"]["by"] == "operator"
    assert [e["task_id"] for e in compensation["not_compensated"]] == [hotel.task_id]
    record = await store.submissions.get("s1", "r1")
    assert record.status == "failed" and "the hotel is refunded by hand" in (record.error or "")
    view = session_view(await store.detail("s1"))
    assert (view.status, view.needs_action, view.compensations) == ("idle", False, [])
    assert await needing_action(store) == []
