"""Two Brain builds at once: sessions stay on a build that can read them, or are migrated
by a newer build that says it can."""

from __future__ import annotations

import pytest

from brainhands.shared.store import Draft
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_old_and_new_builds_each_run_only_their_sessions(brains: BrainHarness) -> None:
    await brains.env.brain_queue("v2")
    old = brains.start_brain(tasks="tests.helpers.kinds", compats=("v1",))
    new = brains.start_brain(tasks="tests.helpers.kinds_v2", compats=("v2",))
    for n in range(4):
        await brains.submit("steps", {"n": n}, session_id=f"old-{n}", compat="v1")
        await brains.submit("steps", {"n": n}, session_id=f"new-{n}", compat="v2")

    for n in range(4):
        from_old = await brains.answer(session_id=f"old-{n}")
        from_new = await brains.answer(session_id=f"new-{n}")
        assert "build" not in from_old.answer  # v1's result shape
        assert from_new.answer["build"] == 2
    old_log, new_log = brains.log(0), brains.log(1)
    assert '"session_id": "new-' not in old_log
    assert '"session_id": "old-' not in new_log  # never picked up a session it cannot read
    assert old.poll() is None and new.poll() is None


async def test_a_new_build_that_serves_both_keys_migrates_old_sessions(
    brains: BrainHarness,
) -> None:
    # A session of the old build, its task at v1 and half done, the old build retired.
    store = brains.store
    await store.create_session("handover", compat="v1")
    await store.claim_session_fence("handover", 1)
    draft = Draft("handover", version=0, fence=1)
    task_id = draft.add_task(
        kind="steps", kind_version=1, input={"n": 9}, phase="two", state={"from": "one"}
    )
    await store.commit(draft)

    brains.start_brain(tasks="tests.helpers.kinds_v2", compats=("v1", "v2"))

    async def finished() -> bool:
        row = (await store.queries.tasks_by_ids([task_id]))[task_id]
        return row.status == "terminal"

    await eventually(finished, within=30, what="the v2 build to finish the v1 task")
    row = (await store.queries.tasks_by_ids([task_id]))[task_id]
    assert (row.kind_version, row.outcome) == (2, "succeeded")
    assert row.result == {"build": 2, "input": {"n": 9, "migrated": True}, "state": {"from": "one"}}
    assert '"event": "upgraded"' in brains.log(0)


async def test_a_follow_up_sent_with_another_key_still_reaches_the_sessions_own_build(
    brains: BrainHarness,
) -> None:
    await brains.env.brain_queue("v2")
    brains.start_brain(tasks="tests.helpers.kinds", compats=("v1",))
    new = brains.start_brain(tasks="tests.helpers.kinds_v2", compats=("v2",))
    await brains.submit("steps", {"n": 1}, session_id="mixed", compat="v1")
    await brains.answer(session_id="mixed")

    # The follow-up names v2, but the session belongs to v1 Brains: they run it.
    await brains.submit("steps", {"n": 2}, session_id="mixed", compat="v2", request_id="r2")
    follow_up = await brains.answer(session_id="mixed", request_id="r2")

    assert "build" not in follow_up.answer  # run by the v1 build
    assert '"session_id": "mixed"' not in brains.log(1)
    assert new.poll() is None
