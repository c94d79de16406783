"""How a consumer settles a delivery, as a plain function of what its handling ended with."""

from __future__ import annotations

import pytest

from brainhands.shared.consumer import HOLD_FOR, Outage
from brainhands.shared.errors import (
    BrokerUnavailable,
    InvalidMessage,
    LeaseBackendError,
    LeaseLost,
    StaleLeaseError,
    StoreUnavailable,
    ToolError,
)
from brainhands.shared.keys import operation_resource, session_resource
from brainhands.shared.messages import SessionWake
from brainhands.shared.settlement import Settlement, judge_delivery, misplaced


def test_a_handled_delivery_is_acked() -> None:
    assert judge_delivery(None) == Settlement("ack")


def test_a_holder_superseded_by_a_newer_one_acks_its_work_is_done_there() -> None:
    assert judge_delivery(StaleLeaseError(operation_resource("op-1"), 3, 4)) == Settlement("ack")


def test_a_message_with_no_place_on_its_queue_is_parked_saying_why() -> None:
    wake = SessionWake(session_id="s-1", compat="v1", reason="submission")
    assert judge_delivery(misplaced(wake)) == Settlement("park", "a wake message has no place here")
    assert judge_delivery(InvalidMessage("wake.colour: Extra inputs")) == Settlement(
        "park", "wake.colour: Extra inputs"
    )


@pytest.mark.parametrize(
    "ended",
    [
        LeaseLost(session_resource("s-1"), "renewal failed"),
        ToolError("the tool's own failure", retryable=True),
        ValueError("a bug"),
    ],
)
def test_a_lost_lease_or_a_failure_requeues_for_another_try(ended: BaseException) -> None:
    assert judge_delivery(ended) == Settlement("requeue")


@pytest.mark.parametrize(
    "ended",
    [StoreUnavailable("down"), BrokerUnavailable("no confirm"), LeaseBackendError("no Redis")],
)
def test_a_service_that_did_not_answer_holds_the_message_costing_no_delivery(
    ended: BaseException,
) -> None:
    assert judge_delivery(ended) == Settlement("hold", str(ended))


def test_a_held_message_pauses_longer_each_time_and_is_let_go_after_the_hold() -> None:
    held = Outage()
    assert held.wait_more(now=100.0)
    assert [held.next_pause() for _ in range(7)] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert held.wait_more(now=100.0 + HOLD_FOR - 1)
    assert not held.wait_more(now=100.0 + HOLD_FOR)
