"""The journal a hosted run is replayed against: built from the run's own entries."""

from __future__ import annotations

from brainhands.brain.hosted.journal import MODEL_ENTRY, Journal, ModelTurn
from brainhands.shared.store import EntryRecord


def entry(seq: int, kind: str, body: dict[str, object]) -> EntryRecord:
    return EntryRecord(seq=seq, kind=kind, body=body, created_at=0.0)


def test_the_journal_holds_the_answers_in_order_and_the_outcomes_by_call_id() -> None:
    entries = [
        entry(1, "user", {"text": "an earlier run"}),
        entry(2, MODEL_ENTRY, {"raw": "old answer"}),
        entry(3, "tool_result", {"call_id": "c1", "status": "succeeded", "result": 0}),
        entry(4, "user", {"text": "this run"}),
        entry(5, MODEL_ENTRY, {"raw": "first"}),
        entry(6, "tool_result", {"call_id": "c1", "status": "uncertain", "error": "cut"}),
        entry(7, MODEL_ENTRY, {"raw": "second"}),
    ]

    journal = Journal.of(entries, since=3)  # the run began after entry 3

    assert journal.turns == ["first", "second"]
    assert journal.outcomes == {"c1": {"call_id": "c1", "status": "uncertain", "error": "cut"}}


def test_a_pass_asks_for_one_answer_and_sees_it_after_the_journaled_ones() -> None:
    journal = Journal(["first"], {})

    assert (journal.answer(0), journal.answer(1), journal.can_ask()) == ("first", None, True)
    journal.record(ModelTurn("second", "m", input_tokens=3, output_tokens=2))

    assert (journal.answer(1), journal.can_ask()) == ("second", False)
    assert journal.fresh[0].entry() == {
        "raw": "second",
        "model": "m",
        "usage": {
            "input_tokens": 3,
            "output_tokens": 2,
            "cost": 0.0,
            "model_calls": 1,
            "tool_calls": 0,
            "resent": 0,
            "tokens": 5,
        },
    }
