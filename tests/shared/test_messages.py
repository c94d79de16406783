from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from brainhands.shared.errors import InvalidMessage
from brainhands.shared.messages import (
    CancelNotice,
    Message,
    SessionWake,
    ToolJob,
    ToolResult,
    decode,
    encode,
)

JOB = ToolJob(
    operation_id="op-1",
    tool="send_email",
    arguments={"to": ["a@example.com"], "subject": "hi", "n": 3, "nested": {"x": None}},
    session_id="s-1",
    task_id="t-1",
    compat="v1",
    pool="email",
    deadline=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC),
    trace={"traceparent": "00-abc-def-01"},
)
MESSAGES: list[Message] = [
    JOB,
    ToolJob(
        operation_id="op-2",
        tool="t",
        arguments={},
        session_id="s",
        task_id="t",
        compat="v1",
        pool="default",
    ),
    ToolResult(operation_id="op-1", session_id="s-1", task_id="t-1", compat="v1", status="failed"),
    SessionWake(session_id="s-1", compat="v1", reason="timer"),
    CancelNotice(operation_id="op-1", session_id="s-1", reason="user cancelled"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.type)
def test_round_trip(message: Message) -> None:
    body = encode(message)

    assert isinstance(body, bytes)
    decoded = decode(body)
    assert decoded == message
    assert type(decoded) is type(message)
    assert decoded.schema_version == 1


def test_wire_format_names_type_and_version() -> None:
    body = encode(SessionWake(session_id="s", compat="v1", reason="r")).decode()

    assert '"type":"wake"' in body
    assert '"schema_version":1' in body


def test_messages_are_frozen() -> None:
    with pytest.raises(ValidationError, match="frozen"):
        JOB.operation_id = "other"  # type: ignore[misc]


def test_extra_field_is_rejected() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        SessionWake(session_id="s", compat="v1", reason="r", colour="blue")  # type: ignore[call-arg]

    body = b'{"type":"wake","session_id":"s","compat":"v1","reason":"r","colour":"blue"}'
    with pytest.raises(InvalidMessage, match=r"wake\.colour: Extra inputs are not permitted"):
        decode(body)


def test_naive_deadline_is_rejected() -> None:
    with pytest.raises(ValidationError, match="timezone"):
        ToolJob(**{**JOB.model_dump(), "deadline": datetime(2030, 1, 1)})


def test_empty_identifier_is_rejected() -> None:
    with pytest.raises(ValidationError, match="operation_id"):
        CancelNotice(operation_id="", session_id="s", reason="r")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "Invalid JSON"),
        (b"\xff\xfe", "Invalid JSON"),
        (b"[1, 2]", "Input should be an object"),
        (b'{"type": "launch_rocket"}', "Input tag 'launch_rocket' found using 'type'"),
        (b'{"session_id": "s"}', "Unable to extract tag using discriminator 'type'"),
        (b'{"type": "wake", "session_id": "s"}', "wake.compat: Field required"),
        (
            b'{"type": "wake", "schema_version": 2, "session_id": "s", "compat": "v", '
            b'"reason": "r"}',
            "wake.schema_version: Input should be 1",
        ),
        (
            b'{"type": "tool_result", "operation_id": "o", "session_id": "s", "task_id": "t", '
            b'"compat": "v", "status": "exploded"}',
            "tool_result.status: Input should be",
        ),
    ],
)
def test_invalid_body_raises_invalid_message_with_reason(body: bytes, reason: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        decode(body)

    assert reason in str(caught.value)
    assert str(caught.value).startswith("invalid message: ")
    assert isinstance(caught.value.__cause__, ValidationError)


def test_a_job_with_arguments_by_reference_is_version_2() -> None:
    by_reference = job_like(arguments={}, arguments_blob_id="b-1")

    assert by_reference.schema_version == 2
    assert decode(encode(by_reference)) == by_reference


def test_a_job_with_arguments_inline_keeps_the_version_1_body() -> None:
    body = encode(JOB).decode()

    assert '"schema_version":1' in body
    assert "arguments_blob_id" not in body  # a version-1 build forbids fields it does not know


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"arguments_blob_id": "b-1"}, "inline or by reference, not both"),
        ({"arguments": {}, "schema_version": 2}, "schema_version 2 is exactly"),
        ({"arguments": {}, "arguments_blob_id": "b-1", "schema_version": 1}, "schema_version 2"),
    ],
)
def test_a_job_whose_version_and_reference_disagree_is_rejected(
    fields: dict[str, object], reason: str
) -> None:
    with pytest.raises(ValidationError, match=reason):
        job_like(**fields)


def job_like(**fields: object) -> ToolJob:
    """``JOB`` with other ``fields``; its version follows from them unless they give one."""
    return ToolJob(**{**JOB.model_dump(exclude={"schema_version"}), **fields})
