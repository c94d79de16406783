"""What the store says about a parked message's work (``cli.parked.parked_work``): a plain
function over the rows, tested without any service."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from brainhands.cli.parked import ParkedWork, PurgeFilter, parked_work
from brainhands.shared.messages import CancelNotice, LiveNote, SessionWake, ToolResult
from brainhands.shared.parking import ParkedMessage

WAKE = SessionWake(session_id="s1", compat="v1", reason="submission")
CANCEL = CancelNotice(operation_id="op1", session_id="s1", reason="cancelled")
RESULT = ToolResult(
    operation_id="op1", session_id="s1", task_id="t1", compat="v1", status="succeeded"
)


def row(**fields: Any) -> Any:
    """parked_work reads a row's ``status`` (and a task's ``outcome``) only."""
    return SimpleNamespace(**fields)


def test_an_unreadable_body_is_unknown() -> None:
    assert parked_work(None, {}, {}, {}).state == "unknown"


def test_a_live_note_is_settled() -> None:
    note = LiveNote(session_id="s1", kind="progress", message="half way")
    assert parked_work(note, {}, {}, {}).state == "settled"


@pytest.mark.parametrize(
    ("sessions", "state"), [({}, "unknown"), ({"s1": True}, "pending"), ({"s1": False}, "settled")]
)
def test_a_wake_follows_its_session(sessions: dict[str, bool], state: str) -> None:
    assert parked_work(WAKE, {}, {}, sessions).state == state


def test_a_cancel_of_a_final_operation_is_settled_else_pending() -> None:
    final = {"op1": row(status="cancelled")}
    assert parked_work(CANCEL, {}, final, {}) == ParkedWork("settled", "operation cancelled")
    assert parked_work(CANCEL, {}, {"op1": row(status="started")}, {}).state == "pending"


def test_a_result_follows_its_task() -> None:
    assert parked_work(RESULT, {}, {}, {}).state == "unknown"
    waiting = {"t1": row(status="waiting", outcome=None)}
    assert parked_work(RESULT, waiting, {}, {}) == ParkedWork("pending", "outcome not applied yet")
    done = {"t1": row(status="terminal", outcome="succeeded")}
    assert parked_work(RESULT, done, {}, {}) == ParkedWork("settled", "task succeeded")


def test_a_purge_filter_matches_every_criterion_given() -> None:
    parked = ParkedMessage("q", "delivery_limit", 1, "{}", message=WAKE)
    settled, pending = ParkedWork("settled", ""), ParkedWork("pending", "")
    assert PurgeFilter().matches(parked, pending)
    assert not PurgeFilter(settled=True).matches(parked, pending)
    assert PurgeFilter(settled=True, session_id="s1", message_type="wake").matches(parked, settled)
    assert not PurgeFilter(session_id="s2").matches(parked, settled)


def test_the_work_of_an_erased_session_is_settled_and_of_an_unknown_one_unknown() -> None:
    gone = {WAKE.session_id, RESULT.session_id}
    assert parked_work(WAKE, {}, {}, {}, gone) == ParkedWork("settled", "its session was erased")
    assert parked_work(RESULT, {}, {}, {}, gone) == ParkedWork("settled", "its session was erased")
    assert parked_work(WAKE, {}, {}, {}, set()).state == "unknown"
    # A session made again after its erasure is judged by its rows, as any other.
    assert parked_work(WAKE, {}, {}, {WAKE.session_id: True}, gone).state == "pending"
