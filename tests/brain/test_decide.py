"""The kernel's decisions as plain functions, over every stored state (DESIGN §4)."""

from __future__ import annotations

import dataclasses
from typing import Any
from unittest.mock import ANY

import pytest

from brainhands.brain.decide import (
    TOOL_KIND,
    Block,
    Cut,
    Expire,
    Facts,
    Idle,
    Receive,
    Run,
    Settle,
    WindDown,
    answer,
    child_tool_outcome,
    entry_changes,
    evaluate_join,
    exclusive_signal_reused,
    may_join,
    next_action,
    phase_failed,
    tool_outcome,
    transition,
    unknown_tool,
)
from brainhands.brain.task import (
    FOLLOW_UP,
    Child,
    ChildOutcome,
    Dispatch,
    Fail,
    Finish,
    First,
    Goto,
    Quorum,
    Sleep,
    Spawn,
    WaitSignal,
)
from brainhands.shared.calls import ToolOutcome
from brainhands.shared.errors import UnknownToolError
from brainhands.shared.store.records import (
    InboxRecord,
    OperationRecord,
    SubmissionRecord,
    TaskRecord,
)

NOW = 1_000.0


def task(**fields: Any) -> TaskRecord:
    base: dict[str, Any] = {
        "id": "t",
        "session_id": "s",
        "kind": "k",
        "kind_version": 1,
        "input": {},
        "phase": "p",
    }
    return TaskRecord.new(**{**base, **fields})


def child(n: int, status: str = "terminal", outcome: str | None = "succeeded") -> TaskRecord:
    return task(id=f"c{n}", status=status, outcome=outcome if status == "terminal" else None)


def operation(status: str, **fields: Any) -> OperationRecord:
    return OperationRecord(
        operation_id="op",
        session_id="s",
        task_id="t",
        tool="x",
        pool="p",
        arguments={},
        arguments_blob_id=None,
        status=status,
        attempts=1,
        interruptions=0,
        unsettled_claims=None,
        fence=1,
        handle=None,
        result=fields.get("result"),  # type: ignore[arg-type]
        error=fields.get("error"),
        blob_id=None,
        next_attempt_at=None,
        created_at=0,
        started_at=None,
        finished_at=None,
        updated_at=0,
    )


def decide(t: TaskRecord, **facts: Any) -> object:
    return next_action(
        Facts(
            task=t,
            now=NOW,
            has_handler=facts.pop("has_handler", True),
            max_restarts=facts.pop("max_restarts", 3),
            **facts,
        )
    )


def test_pending_runs_its_saved_phase() -> None:
    assert decide(task(status="pending", phase="send")) == Run("send")


@pytest.mark.parametrize("attempt", [0, 1, 2])
def test_interrupted_running_reenters_its_phase(attempt: int) -> None:
    assert decide(task(status="running", phase="send", attempt=attempt)) == Run("send")


def test_interrupted_too_often_fails_with_the_reason() -> None:
    action = decide(task(status="running", phase="send", attempt=3))
    assert isinstance(action, Settle) and action.outcome == "failed"
    assert action.error["reason"] == "crash loop" and action.error["phase"] == "send"


def test_running_entered_by_this_scheduler_is_not_a_crash() -> None:
    assert decide(task(status="running", attempt=3), entered_here=True) == Run("p")


@pytest.mark.parametrize(
    ("wake_at", "expected"),
    [
        (NOW - 1, Run("p")),
        (NOW, Run("p")),
        (NOW + 5, Idle(until=NOW + 5)),
        (None, Run("p")),
    ],
)
def test_sleeping_wakes_when_due(wake_at: float | None, expected: object) -> None:
    assert decide(task(status="sleeping", wake_at=wake_at)) == expected


def test_waiting_all_settled() -> None:
    waiting = task(status="waiting", wait_for=["c1", "c2"], join_policy="all_settled")
    assert decide(waiting, waited=[child(1), child(2, "running")]) == Idle()
    assert decide(waiting, waited=[child(1), child(2, outcome="failed")]) == Run("p")


def test_waiting_fail_fast_winds_down_the_others_then_settles() -> None:
    waiting = task(status="waiting", wait_for=["c1", "c2", "c3"], join_policy="fail_fast")
    action = decide(waiting, waited=[child(1, outcome="failed"), child(2, "sleeping"), child(3)])
    assert isinstance(action, WindDown)
    assert action.outcome == "failed" and action.cancel == ["c2"]
    settled = decide(waiting, waited=[child(1, outcome="failed"), child(2, outcome="cancelled")])
    assert isinstance(settled, Settle) and settled.outcome == "failed"


def test_completing_settles_only_when_every_child_has() -> None:
    completing = task(status="completing", outcome="failed", error={"e": 1}, wait_for=["c1"])
    assert decide(completing, waited=[child(1, "running")]) == Idle()
    assert decide(completing, waited=[child(1, outcome="cancelled")]) == Settle(
        "failed", error={"e": 1}
    )


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        ("succeeded", "succeeded"),
        ("failed", "failed"),
        ("uncertain", "failed"),
        ("cancelled", "cancelled"),
    ],
)
def test_a_tool_task_ends_as_its_operation(status: str, outcome: str) -> None:
    waiting = task(kind=TOOL_KIND, status="waiting", operation_id="op", phase=None)
    action = decide(waiting, operation=operation(status, result={"r": 1}, error={"e": 2}))
    assert isinstance(action, Settle) and action.outcome == outcome
    if status == "uncertain":
        assert action.error == {"status": "uncertain", "error": {"e": 2}}  # stays visible


@pytest.mark.parametrize("status", [None, "intended", "started"])
def test_a_tool_task_waits_while_the_operation_has_no_outcome(status: str | None) -> None:
    waiting = task(kind=TOOL_KIND, status="waiting", operation_id="op", phase=None)
    op = operation(status) if status else None
    assert decide(waiting, operation=op) == Idle()


def test_no_handler_blocks_once_and_touches_nothing_else() -> None:
    pending = task(kind="gone", kind_version=7)
    action = decide(pending, has_handler=False)
    assert action == Block("no handler for task kind gone v7 in this build")
    assert (
        decide(
            dataclasses.replace(pending, blocked_reason=action.reason),  # type: ignore[union-attr]
            has_handler=False,
        )
        == Idle()
    )


@pytest.mark.parametrize("status", ["pending", "running", "sleeping", "waiting"])
def test_cancel_settles_at_once_without_running_children(status: str) -> None:
    action = decide(task(status=status, cancel_requested=True))
    assert isinstance(action, Settle) and action.outcome == "cancelled"


def test_cancel_with_running_children_winds_them_down() -> None:
    waiting = task(status="waiting", wait_for=["c1", "c2"], cancel_requested=True)
    action = decide(waiting, waited=[child(1), child(2, "running")])
    assert action == WindDown("cancelled", {"reason": "cancelled"}, ["c2"])


def test_cancelled_tool_task_tells_hands() -> None:
    waiting = task(kind=TOOL_KIND, status="waiting", operation_id="op", cancel_requested=True)
    action = decide(waiting)
    assert isinstance(action, Settle) and action.notify_cancel


@pytest.mark.parametrize("undo", [None, "unbook"])
def test_a_cancel_keeps_a_call_that_already_ended(undo: str | None) -> None:
    # The operation's outcome is in (Hands recorded it before the cancel was carried out):
    # the tool task ends with it, so a success is undone with the rest, not thrown away.
    input_ = {"tool": "book", **({"compensate": undo} if undo else {})}
    waiting = task(
        kind=TOOL_KIND, status="waiting", operation_id="op", cancel_requested=True, input=input_
    )

    succeeded = operation("succeeded", result={"key": "k"})
    assert decide(waiting, operation=succeeded) == tool_outcome(succeeded)
    failed = operation("failed", error={"type": "X"})
    assert decide(waiting, operation=failed) == tool_outcome(failed)


@pytest.mark.parametrize("undo", ["unbook", True])
def test_a_cancel_waits_for_the_real_outcome_of_a_call_with_an_undo(undo: object) -> None:
    # Its call may still succeed after the cancel (Hands hear of it through the notice or
    # the store): settling it cancelled now would leave that success never undone.
    waiting = task(
        kind=TOOL_KIND,
        status="waiting",
        operation_id="op",
        cancel_requested=True,
        input={"tool": "book", "compensate": undo},
    )

    assert decide(waiting) == Idle()  # not yet claimed by Hands
    assert decide(waiting, operation=operation("started")) == Idle()
    late = operation("succeeded", result={"key": "k"})
    assert decide(waiting, operation=late) == tool_outcome(late)
    stopped = operation("cancelled", error={"type": "Cancelled"})
    assert decide(waiting, operation=stopped) == tool_outcome(stopped)


@pytest.mark.parametrize(
    ("policy", "outcomes", "expected"),
    [
        ("all_settled", ("succeeded", "succeeded"), "resume"),
        ("all_settled", ("succeeded", None), "wait"),
        ("all_settled", ("failed", None), "wait"),
        ("all_settled", ("failed", "succeeded"), "resume"),
        ("all_settled", ("cancelled", "failed"), "resume"),
        ("fail_fast", ("succeeded", "succeeded"), "resume"),
        ("fail_fast", ("succeeded", None), "wait"),
        ("fail_fast", ("failed", None), "fail_fast"),
        ("fail_fast", ("failed", "succeeded"), "fail_fast"),
        ("fail_fast", ("cancelled", None), "fail_fast"),
    ],
)
def test_join_policies(policy: str, outcomes: tuple[str | None, ...], expected: str) -> None:
    waited = [child(n, "terminal" if o else "running", o) for n, o in enumerate(outcomes)]
    assert evaluate_join(policy, waited) == expected  # type: ignore[arg-type]


def test_transitions() -> None:
    assert transition(Goto("b", state={"k": 1}), now=NOW, spawned=[]) == {
        "wake_at": None,
        "wait_for": None,
        "join_policy": None,
        "wait_signal": None,
        "wait_exclusive": False,
        "signal": None,
        "status": "running",
        "phase": "b",
        "attempt": 1,
        "state": {"k": 1},
    }
    slept = transition(Sleep(then="c", seconds=2), now=NOW, spawned=[])
    assert (slept["status"], slept["phase"], slept["wake_at"]) == ("sleeping", "c", NOW + 2)
    spawned = transition(
        Spawn([Child("x", {})], then="d", join="fail_fast"), now=NOW, spawned=["c1"]
    )
    assert (spawned["status"], spawned["wait_for"], spawned["join_policy"]) == (
        "waiting",
        ["c1"],
        "fail_fast",
    )
    dispatched = transition(Dispatch("tool", {}, then="e"), now=NOW, spawned=["c2"])
    assert (dispatched["status"], dispatched["wait_for"], dispatched["phase"]) == (
        "waiting",
        ["c2"],
        "e",
    )
    assert transition(Finish(5), now=NOW, spawned=[])["outcome"] == "succeeded"
    assert transition(Fail("x"), now=NOW, spawned=[])["error"] == "x"
    with pytest.raises(ValueError, match="exactly one"):
        transition(Sleep(then="c"), now=NOW, spawned=[])
    with pytest.raises(TypeError, match="not a Next"):
        transition("done", now=NOW, spawned=[])  # type: ignore[arg-type]


def test_tool_outcome_of_success_carries_the_result() -> None:
    assert tool_outcome(operation("succeeded", result={"r": 1})) == Settle(
        "succeeded", result={"status": "succeeded", "result": {"r": 1}}
    )


@pytest.mark.parametrize(
    ("status", "outcome"),
    [("failed", "failed"), ("uncertain", "failed"), ("cancelled", "cancelled")],
)
def test_tool_outcome_of_a_failure_keeps_the_operations_status_and_error(
    status: str, outcome: str
) -> None:
    assert tool_outcome(operation(status, error={"type": "X"})) == Settle(
        outcome,  # type: ignore[arg-type]
        error={"status": status, "error": {"type": "X"}},
    )


@pytest.mark.parametrize(
    "op",
    [
        operation("succeeded", result={"r": 1}),
        operation("uncertain", error={"type": "Interrupted"}),
        operation("cancelled", error={"type": "Cancelled"}),
    ],
)
def test_a_tool_childs_outcome_reads_back_as_its_operation_ended(op: OperationRecord) -> None:
    settled = tool_outcome(op)
    ended = ChildOutcome("t", TOOL_KIND, {}, settled.outcome, settled.result, settled.error)

    assert child_tool_outcome(ended) == ToolOutcome.of_operation(op)


def test_a_task_tools_outcome_is_read_as_the_task_ended() -> None:
    succeeded = ChildOutcome("t", "emails.batch", {}, "succeeded", {"sent": 2}, None)
    failed = ChildOutcome("t", "emails.batch", {}, "failed", None, {"reason": "a child failed"})
    cancelled = ChildOutcome("t", TOOL_KIND, {}, "cancelled", None, {"reason": "cancelled"})

    assert child_tool_outcome(succeeded) == ToolOutcome("succeeded", result={"sent": 2})
    assert child_tool_outcome(failed) == ToolOutcome("failed", error={"reason": "a child failed"})
    assert child_tool_outcome(cancelled) == ToolOutcome("cancelled", error={"reason": "cancelled"})


def kept(n: int, name: str, key: str | None = None) -> InboxRecord:
    return InboxRecord(
        id=n,
        session_id="s",
        kind="signal",
        key=key or f"sig-{n}",
        body={"payload": {"n": n}},
        created_at=0,
        applied_at=None,
        name=name,
    )


def waiting_for(name: str, *, wake_at: float | None = None, exclusive: bool = False) -> TaskRecord:
    return task(status="waiting", wait_signal=name, wake_at=wake_at, wait_exclusive=exclusive)


def test_a_signal_wait_receives_the_oldest_signal_of_its_name() -> None:
    signals = [kept(1, "other"), kept(2, "go"), kept(3, "go")]

    action = decide(waiting_for("go"), signals=signals)

    assert action == Receive(
        2,
        {
            "name": "go",
            "payload": {"n": 2},
            "signal_id": "sig-2",
            "timed_out": False,
            "received_at": NOW,
        },
    )


def test_a_signal_wait_idles_until_its_timeout_then_times_out_once_signals_were_read() -> None:
    assert decide(waiting_for("go", wake_at=NOW + 5)) == Idle(until=NOW + 5)
    assert decide(waiting_for("go")) == Idle(until=None)
    # Due, but this pass has not read the inbox: a signal may be there, so read first.
    assert decide(waiting_for("go", wake_at=NOW)) == Expire(send=False)
    timed_out = decide(
        waiting_for("go", wake_at=NOW), signals=[kept(1, "other")], signals_read=True
    )
    assert isinstance(timed_out, Receive) and timed_out.inbox_id is None
    assert timed_out.signal["timed_out"] and timed_out.signal["payload"] is None


def test_a_follow_up_look_ends_without_a_read_of_its_own() -> None:
    # The read that served its entry is its read: what is queued later starts the next turn.
    look = decide(waiting_for(FOLLOW_UP, wake_at=NOW))
    assert isinstance(look, Receive) and look.signal["timed_out"]


def test_an_exclusive_wait_sends_its_timeout_as_its_one_signal_unless_one_is_there() -> None:
    exclusive = waiting_for("decision:t", wake_at=NOW, exclusive=True)
    assert decide(exclusive, signals_read=True) == Expire(send=True)
    there = decide(
        waiting_for("decision:t", wake_at=NOW, exclusive=True),
        signals=[kept(4, "decision:t", key="decision:t")],
    )
    assert isinstance(there, Receive) and there.inbox_id == 4


def test_a_follow_up_wait_receives_the_oldest_waiting_submission() -> None:
    follow_up = SubmissionRecord(
        id="sub-2",
        session_id="s",
        request_id="note-1",
        status="queued",
        input={"agent": "a", "text": "and one more thing"},
        answer=None,
        error=None,
        created_at=0,
        updated_at=0,
    )

    action = decide(
        waiting_for(FOLLOW_UP, wake_at=NOW),
        follow_ups=[(follow_up, {"agent": "a", "text": "and one more thing"})],
    )

    assert isinstance(action, Receive) and action.submission_id == "sub-2"
    assert action.signal["payload"]["text"] == "and one more thing"
    assert action.signal["signal_id"] == "note-1"


def test_a_signal_wait_transition_records_the_name_the_timeout_and_exclusivity() -> None:
    changes = transition(
        WaitSignal("go", then="next", timeout=30, exclusive=True, state={"k": 1}),
        now=NOW,
        spawned=[],
    )
    assert changes["status"] == "waiting" and changes["phase"] == "next"
    assert (changes["wait_signal"], changes["wait_exclusive"], changes["wake_at"]) == (
        "go",
        True,
        NOW + 30,
    )
    assert changes["state"] == {"k": 1} and changes["wait_for"] is None
    with pytest.raises(ValueError, match="signal name"):
        WaitSignal("", then="next")


def test_a_follow_up_joins_only_the_loop_of_its_own_agent() -> None:
    root = {"agent": "payments", "text": "pay the March invoices"}
    assert may_join({"agent": "payments", "text": "and April's"}, root)
    assert not may_join({"agent": "support", "text": "hello"}, root)
    assert not may_join({"agent": "payments", "text": "x", "extra": 1}, root)
    assert not may_join("plain text", root)


def test_a_failed_phase_runs_again_until_its_attempts_are_spent_then_fails() -> None:
    assert phase_failed(task(status="running", attempt=2), ValueError("x"), max_restarts=3) == {
        "attempt": 3
    }
    spent = phase_failed(task(status="running", attempt=3), ValueError("x"), max_restarts=3)
    assert spent == Settle(
        "failed",
        error={
            "reason": "phase raised",
            "message": "phase 'p' raised ValueError: x",
            "phase": "p",
            "attempts": 3,
        },
    )


def test_an_entry_counts_a_first_attempt_or_one_more_after_an_interruption() -> None:
    assert entry_changes(task(status="pending", attempt=0, restarts=2)) == {
        "status": "running",
        "attempt": 1,
        "restarts": 2,
    }
    assert entry_changes(task(status="running", attempt=2, restarts=2)) == {
        "status": "running",
        "attempt": 3,
        "restarts": 3,
    }


def test_a_call_of_an_unknown_tool_is_a_failed_call() -> None:
    settled = unknown_tool(UnknownToolError("no tool 'x'"))

    assert settled == Settle(
        "failed",
        error={"status": "failed", "error": {"type": "UnknownToolError", "message": "no tool 'x'"}},
    )


@pytest.mark.parametrize(
    ("outcome", "result", "error", "ending"),
    [
        ("succeeded", {"text": "hi"}, None, {"status": "answered", "answer": {"text": "hi"}}),
        ("failed", None, {"reason": "x"}, {"status": "failed", "error": "{'reason': 'x'}"}),
        ("cancelled", None, {"reason": "cancelled"}, {"status": "cancelled", "error": ANY}),
    ],
)
def test_a_root_tasks_end_answers_its_submission(
    outcome: str, result: Any, error: Any, ending: dict[str, Any]
) -> None:
    ended = task(status="terminal", outcome=outcome, result=result, error=error)

    assert answer(ended) == ending


def test_a_reused_exclusive_signal_fails_the_wait() -> None:
    settled = exclusive_signal_reused(waiting_for("go", exclusive=True))

    assert (settled.outcome, settled.error["reason"]) == ("failed", "exclusive signal reused")


@pytest.mark.parametrize(
    ("policy", "outcomes", "cancelling", "expected"),
    [
        # quorum:2 of three: met by two successes, unreachable once two cannot come.
        ("quorum:2", ("succeeded", None, None), (), "wait"),
        ("quorum:2", ("succeeded", "succeeded", None), (), "cut"),
        ("quorum:2", ("succeeded", "succeeded", None), (2,), "wait"),  # stopping: wait
        ("quorum:2", ("succeeded", "succeeded", "cancelled"), (), "resume"),
        ("quorum:2", ("failed", "succeeded", None), (), "wait"),
        ("quorum:2", ("failed", "failed", None), (), "unreachable"),
        ("quorum:2", ("failed", "cancelled", "succeeded"), (), "unreachable"),
        # first:2 of three: met by any two ended, however they ended.
        ("first:2", ("failed", None, None), (), "wait"),
        ("first:2", ("failed", "succeeded", None), (), "cut"),
        ("first:2", ("failed", "succeeded", None), (2,), "wait"),
        ("first:2", ("failed", "failed", "succeeded"), (), "resume"),
        ("first:3", ("failed", "failed", None), (), "wait"),
    ],
)
def test_quorum_and_first(
    policy: str, outcomes: tuple[str | None, ...], cancelling: tuple[int, ...], expected: str
) -> None:
    waited = [
        dataclasses.replace(
            child(n, "terminal" if o else "running", o), cancel_requested=n in cancelling
        )
        for n, o in enumerate(outcomes)
    ]
    assert evaluate_join(policy, waited) == expected


def test_a_met_quorum_cuts_the_rest_then_resumes_once_they_ended() -> None:
    waiting = task(status="waiting", wait_for=["c1", "c2", "c3"], join_policy="quorum:2")
    met = [child(1), child(2, "running"), child(3)]
    assert decide(waiting, waited=met) == Cut(["c2"])
    stopping = [child(1), dataclasses.replace(child(2, "running"), cancel_requested=True), child(3)]
    assert decide(waiting, waited=stopping) == Idle()
    assert decide(waiting, waited=[child(1), child(2, outcome="cancelled"), child(3)]) == Run("p")


def test_an_unreachable_quorum_winds_down_and_fails_saying_why() -> None:
    waiting = task(status="waiting", wait_for=["c1", "c2", "c3"], join_policy="quorum:2")
    lost = [child(1, outcome="failed"), child(2, outcome="failed"), child(3, "running")]
    action = decide(waiting, waited=lost)
    assert isinstance(action, WindDown) and action.cancel == ["c3"]
    assert action.error == {"reason": "quorum of 2 unreachable", "failed": ["c1", "c2"]}


@pytest.mark.parametrize("join", [Quorum(0), Quorum(3), First(4)])
def test_a_join_asking_more_than_its_children_is_refused(join: Quorum | First) -> None:
    with pytest.raises(ValueError, match="k must be between 1 and the 2 children"):
        Spawn([Child("c", {}), Child("c", {})], then="p", join=join)
