"""The pass's picture of its rows: a changed row is the record the commit will leave."""

from __future__ import annotations

import dataclasses

import pytest

from brainhands.brain.edits import _changed
from brainhands.shared.store.records import TaskRecord


def test_a_changed_row_is_what_dataclasses_replace_gives_and_the_old_one_stays() -> None:
    task = TaskRecord.new(id="t1", session_id="s1", kind="k", kind_version=1, input={"a": 1})
    changes = {"status": "running", "attempt": 1, "updated_at": 5.0}

    row = _changed(task, changes)

    assert row == dataclasses.replace(task, **changes)  # type: ignore[arg-type]
    assert type(row) is TaskRecord and row is not task
    assert (task.status, task.attempt) == ("pending", 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.status = "terminal"  # type: ignore[misc]
