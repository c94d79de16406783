"""The namespaces of signal ids: pure functions, tested as such."""

from __future__ import annotations

import pytest

from brainhands.shared.errors import InvalidRequest
from brainhands.shared.vocabulary import (
    BUDGET_SIGNAL,
    compensation_signal,
    decision_signal,
    signal_id_of,
    signal_key,
    signal_name,
)


@pytest.mark.parametrize(
    "signal_id", ["decision:a1", "approval:mgr-7", "brainhands.budget:r1", "brainhands.x"]
)
def test_a_plain_signal_may_not_take_an_id_in_a_runtime_namespace(signal_id: str) -> None:
    with pytest.raises(InvalidRequest, match="runtime's own"):
        signal_name("note", signal_id, decision=False)
    with pytest.raises(InvalidRequest, match="runtime's own"):
        signal_key("note", signal_id)  # nor past the client, at the store


def test_each_kind_of_act_keeps_its_ids_in_a_namespace_of_its_own() -> None:
    decision = signal_name("manager-ok", "mgr-7", decision=True)
    keys = {
        signal_key("note", "mgr-7"),
        signal_key(decision, "mgr-7"),
        signal_key(BUDGET_SIGNAL, "mgr-7"),
        signal_key(compensation_signal("t1"), "mgr-7"),
    }
    assert keys == {
        "mgr-7",
        "approval:mgr-7",
        "brainhands.budget:mgr-7",
        "brainhands.compensation:mgr-7",
    }
    assert all(len(k) <= 192 for k in keys)  # the inbox key's width


def test_one_signal_per_name_keeps_its_name_as_its_key() -> None:
    """An approval's decision and an exclusive wait's timeout are sent under their name."""
    approval = decision_signal("a1")
    assert signal_key(approval, approval) == "decision:a1"
    exclusive = signal_name("go", "go", decision=True)
    assert signal_key(exclusive, exclusive) == "approval:go"
    assert signal_key(exclusive, "go") == "approval:go"  # the approver's, sent first


def test_a_receiver_reads_the_id_as_it_was_sent() -> None:
    assert signal_id_of("note", "n1") == "n1"
    assert signal_id_of("approval:manager-ok", "approval:mgr-7") == "mgr-7"
    assert signal_id_of(BUDGET_SIGNAL, "brainhands.budget:r1") == "r1"
    assert signal_id_of("decision:a1", "decision:a1") == "decision:a1"
