"""Following a task of the Tasks extension (pure decisions, and the poll loop against a
scripted server's answers)."""

from __future__ import annotations

from typing import Any

import pytest

from brainhands.hands.mcp.tasks import TaskState, follow, poll_delay, task_result
from brainhands.shared.errors import ToolError

DONE = {"content": [{"type": "text", "text": "ok"}], "isError": False}


def state(status: str, **extra: Any) -> TaskState:
    return TaskState(task_id="t1", status=status, **extra)


def test_a_completed_task_gives_the_call_s_result_and_a_working_one_none() -> None:
    result = task_result(state("completed", result=DONE))
    assert result is not None and not result.is_error
    assert task_result(state("working")) is None


@pytest.mark.parametrize(
    ("status", "message", "said"),
    [
        ("failed", "disk full", "task t1 ended failed: disk full"),
        ("cancelled", None, "task t1 ended cancelled"),
        ("input_required", None, "it asks for input, which a Hands cannot give"),
    ],
)
def test_a_task_that_ends_otherwise_is_the_call_s_definite_failure(
    status: str, message: str | None, said: str
) -> None:
    with pytest.raises(ToolError, match=said) as raised:
        task_result(state(status, status_message=message))
    assert raised.value.retryable is False


def test_completed_with_no_result_is_refused() -> None:
    with pytest.raises(ToolError, match="completed with no result"):
        task_result(state("completed"))


def test_the_poll_interval_the_server_asks_for_is_kept_within_bounds() -> None:
    assert poll_delay(state("working", poll_interval_ms=300)) == 0.3
    assert poll_delay(state("working", poll_interval_ms=1)) == 0.05
    assert poll_delay(state("working", poll_interval_ms=600_000)) == 5.0
    assert poll_delay(state("working")) == 1.0


async def test_follow_polls_until_the_end_and_sends_one_cancel_once_asked() -> None:
    answers = [state("working", poll_interval_ms=1)] * 3 + [state("cancelled")]
    gets: list[str] = []
    cancels: list[str] = []

    async def get(task_id: str) -> TaskState:
        gets.append(task_id)
        return answers[len(gets) - 1]

    async def cancel(task_id: str) -> None:
        cancels.append(task_id)

    with pytest.raises(ToolError, match="ended cancelled"):
        await follow(
            state("working", poll_interval_ms=1),
            get=get,
            cancel=cancel,
            cancelled=lambda: len(gets) >= 2,
        )
    assert gets == ["t1"] * 4
    assert cancels == ["t1"]  # once, though cancelled() stayed true
