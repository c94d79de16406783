"""How a consumer settles a delivery, as a plain function of what its handling ended with."""

from __future__ import annotations

import pytest

from brainhands.shared.errors import (
    BrokerUnavailable,
    InvalidMessage,
    LeaseLost,
    StaleLeaseError,
    StoreUnavailable,
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
        StoreUnavailable("down"),
        BrokerUnavailable("no confirm"),
        ValueError("a bug"),
    ],
)
def test_a_lost_lease_or_a_failure_requeues_for_another_try(ended: BaseException) -> None:
    assert judge_delivery(ended) == Settlement("requeue")
