from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from brainhands.shared.calls import ToolCallIntent, ToolOutcome
from brainhands.shared.messages import ToolJob, decode, encode
from brainhands.shared.store.records import TaskRecord

INLINE = ToolCallIntent("op-1", "s-1", "t-1", "send_email", "email", {"to": "a@example.com"})
BY_REFERENCE = ToolCallIntent("op-2", "s-1", "t-2", "send_email", "email", {}, "blob-1")


def tool_task(input: Any, operation_id: str | None, task_id: str = "t-1") -> TaskRecord:
    return TaskRecord.new(
        id=task_id,
        session_id="s-1",
        kind="brainhands.tool",
        kind_version=1,
        input=input,
        status="waiting",
        operation_id=operation_id,
    )


def test_a_tool_tasks_input_is_stored_as_earlier_builds_wrote_it() -> None:
    assert json.dumps(INLINE.task_input()) == json.dumps(
        {"tool": "send_email", "arguments": {"to": "a@example.com"}, "pool": "email"}
    )
    assert json.dumps(BY_REFERENCE.task_input()) == json.dumps(
        {"tool": "send_email", "arguments": {}, "arguments_blob_id": "blob-1", "pool": "email"}
    )


@pytest.mark.parametrize("intent", [INLINE, BY_REFERENCE])
def test_an_intent_is_read_back_from_its_task_and_from_its_job(intent: ToolCallIntent) -> None:
    row = tool_task(intent.task_input(), intent.operation_id, task_id=intent.task_id)

    assert ToolCallIntent.from_task(row) == intent
    job = decode(encode(intent.job(compat="v1")))
    assert isinstance(job, ToolJob)
    assert ToolCallIntent.of_job(job) == intent


def test_a_job_is_the_wire_message_earlier_builds_sent() -> None:
    job = INLINE.job(compat="v1", trace={"traceparent": "00-abc-def-01"})
    earlier = ToolJob(
        operation_id="op-1",
        tool="send_email",
        arguments={"to": "a@example.com"},
        session_id="s-1",
        task_id="t-1",
        compat="v1",
        pool="email",
        trace={"traceparent": "00-abc-def-01"},
    )

    assert encode(job) == encode(earlier)
    assert BY_REFERENCE.job(compat="v1").schema_version == 2


@pytest.mark.parametrize(
    ("input", "operation_id"),
    [
        ({"tool": "send_email"}, "op-1"),
        (None, "op-1"),
        ({"tool": "send_email", "arguments": [], "pool": "email"}, "op-1"),
        ({"tool": "send_email", "arguments": {}, "pool": "email"}, None),
        ({"tool": "x", "arguments": {}, "pool": "p", "arguments_blob_id": 3}, "op-1"),
    ],
)
def test_a_row_that_holds_no_intent_is_refused_saying_why(
    input: Any, operation_id: str | None
) -> None:
    with pytest.raises(ValueError, match=r"^its? "):
        ToolCallIntent.from_task(tool_task(input, operation_id))


def test_a_job_refuses_an_intent_with_an_empty_name() -> None:
    with pytest.raises(ValidationError):
        ToolCallIntent("op-1", "s-1", "t-1", "", "email", {}).job(compat="v1")


def test_an_operation_row_takes_the_intents_columns() -> None:
    assert BY_REFERENCE.operation_columns() == {
        "session_id": "s-1",
        "task_id": "t-2",
        "tool": "send_email",
        "pool": "email",
        "arguments": {},
        "arguments_blob_id": "blob-1",
    }


@pytest.mark.parametrize(
    ("outcome", "task_outcome", "result", "error", "for_model"),
    [
        (
            ToolOutcome("succeeded", result=[1]),
            "succeeded",
            {"status": "succeeded", "result": [1]},
            None,
            {"status": "succeeded", "result": [1]},
        ),
        (
            ToolOutcome("uncertain", error={"type": "Interrupted"}),
            "failed",
            None,
            {"status": "uncertain", "error": {"type": "Interrupted"}},
            {"status": "uncertain", "error": {"type": "Interrupted"}},
        ),
        (
            ToolOutcome("cancelled", error=None),
            "cancelled",
            None,
            {"status": "cancelled", "error": None},
            {"status": "cancelled", "error": None},
        ),
    ],
)
def test_an_outcome_is_stored_on_its_tool_task_read_back_and_shown_to_the_model(
    outcome: ToolOutcome, task_outcome: str, result: Any, error: Any, for_model: Any
) -> None:
    assert (outcome.task_outcome, outcome.task_result(), outcome.task_error()) == (
        task_outcome,
        result,
        error,
    )
    stored = (outcome.task_outcome, outcome.task_result(), outcome.task_error())
    assert ToolOutcome.of_task(*stored, tool_task=True) == outcome
    assert outcome.for_model() == for_model
