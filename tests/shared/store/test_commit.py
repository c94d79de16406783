"""The commit contract, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio

import pytest

from brainhands.shared.errors import ConflictError, NotFoundError, StaleLeaseError
from brainhands.shared.store import Draft, Store

pytestmark = pytest.mark.integration


async def claimed_session(store: Store, session_id: str = "s1", token: int = 1) -> Store:
    await store.create_session(session_id, compat="v1")
    assert await store.claim_session_fence(session_id, token) == token
    return store


async def test_commit_applies_every_kind_of_change(store: Store) -> None:
    await claimed_session(store)
    draft = Draft("s1", version=0, fence=1)
    draft.append_entry("user", {"text": "hello"})
    draft.append_entry("model", {"raw": {"choices": []}})
    draft.put_document("plan", {"recipients": ["a", "b"]}, expected_version=None)
    task_id = draft.add_task(kind="generate", kind_version=1, input={"n": 1}, phase="prepare")
    sub_id = draft.add_submission(request_id="r1", input={"text": "hello"})
    draft.add_outbox("brain.v1", b'{"wake": 1}', {"x": "y"})

    receipt = await store.commit(draft)

    assert receipt.version == 1
    assert receipt.entry_seqs == [1, 2]
    state = await store.load("s1")
    assert state.session.version == 1
    assert [(e.seq, e.kind, e.body) for e in state.entries] == [
        (1, "user", {"text": "hello"}),
        (2, "model", {"raw": {"choices": []}}),
    ]
    assert state.documents["plan"].version == 1
    assert state.documents["plan"].body == {"recipients": ["a", "b"]}
    assert [(t.id, t.status, t.phase) for t in state.open_tasks] == [
        (task_id, "pending", "prepare")
    ]
    assert [(s.id, s.status) for s in state.open_submissions] == [(sub_id, "queued")]
    assert (await store.status())["outbox_unsent"] == 1


async def test_tasks_created_with_different_fields_in_one_commit_are_all_written(
    store: Store,
) -> None:
    await claimed_session(store)
    draft = Draft("s1", version=0, fence=1)
    failed = draft.add_task(
        kind="k", kind_version=1, input={}, status="terminal", outcome="failed", error={"x": 1}
    )
    waiting = draft.add_task(
        kind="k", kind_version=1, input={}, status="waiting", wait_for=[failed]
    )
    plain = draft.add_task(kind="k", kind_version=1, input={})
    await store.commit(draft)

    state = await store.load("s1")
    assert {t.id: t.status for t in state.open_tasks} == {waiting: "waiting", plain: "pending"}
    assert state.settled[failed].error == {"x": 1}


async def test_second_commit_advances_tasks_documents_and_submissions(store: Store) -> None:
    await claimed_session(store)
    first = Draft("s1", version=0, fence=1)
    task_id = first.add_task(kind="k", kind_version=1, input={}, phase="a")
    sub_id = first.add_submission(request_id="r1", input={})
    first.put_document("doc", {"n": 1}, expected_version=None)
    await store.commit(first)

    second = Draft("s1", version=1, fence=1)
    second.update_task(task_id, expected_status="pending", status="terminal", outcome="succeeded")
    second.update_submission(sub_id, status="answered", answer={"text": "done"})
    second.put_document("doc", {"n": 2}, expected_version=1)
    await store.commit(second)

    state = await store.load("s1")
    assert state.open_tasks == []
    assert state.open_submissions == []
    assert state.documents["doc"].version == 2
    assert state.documents["doc"].body == {"n": 2}


def test_a_draft_writes_each_task_once_however_often_it_changes() -> None:
    draft = Draft("s1", version=3, fence=1)
    old = "t-old"
    new = draft.add_task(kind="k", kind_version=1, input={}, phase="a")
    draft.update_task(new, status="running", attempt=1)
    draft.update_task(old, expected_status="waiting", status="running", phase="apply")
    draft.update_task(new, expected_status="running", phase="b", state={"n": 2})
    draft.update_task(old, expected_status="running", status="terminal", outcome="succeeded")

    [row] = draft.new_tasks
    assert (row["status"], row["attempt"], row["phase"], row["state"]) == (
        "running",
        1,
        "b",
        {"n": 2},
    )
    [update] = draft.task_updates
    assert update.expected_status == "waiting"  # the status the store must still have
    assert update.changes == {"status": "terminal", "phase": "apply", "outcome": "succeeded"}


def test_a_change_expecting_another_status_than_the_draft_leaves_is_kept_apart() -> None:
    draft = Draft("s1", version=3, fence=1)
    new = draft.add_task(kind="k", kind_version=1, input={})
    draft.update_task(new, expected_status="running", status="terminal")
    draft.update_task("t-old", expected_status="waiting", status="running")
    draft.update_task("t-old", expected_status="sleeping", status="terminal")

    assert draft.new_tasks[0]["status"] == "pending"
    assert [(u.task_id, u.expected_status) for u in draft.task_updates] == [
        (new, "running"),
        ("t-old", "waiting"),
        ("t-old", "sleeping"),
    ]


async def test_folded_task_writes_commit_what_the_changes_one_by_one_would(
    store: Store,
) -> None:
    await claimed_session(store)
    first = Draft("s1", version=0, fence=1)
    waiting = first.add_task(kind="k", kind_version=1, input={}, status="waiting")
    await store.commit(first)

    second = Draft("s1", version=1, fence=1)
    child = second.add_task(kind="k", kind_version=1, input={}, parent_id=waiting)
    second.update_task(child, expected_status="pending", status="running", phase="go")
    second.update_task(waiting, expected_status="waiting", status="running", phase="apply")
    second.update_task(waiting, expected_status="running", state={"seen": [child]})
    await store.commit(second)
    stale = Draft("s1", version=2, fence=1)
    stale.update_task(waiting, expected_status="waiting", status="terminal")
    stale.update_task(waiting, expected_status="terminal", outcome="succeeded")
    with pytest.raises(ConflictError):
        await store.commit(stale)

    state = await store.load("s1")
    rows = {t.id: t for t in state.open_tasks}
    assert (rows[child].status, rows[child].phase) == ("running", "go")
    assert (rows[waiting].status, rows[waiting].phase) == ("running", "apply")
    assert rows[waiting].state == {"seen": [child]}
    assert state.session.version == 2


async def test_two_committers_at_once_exactly_one_wins(store: Store) -> None:
    await claimed_session(store)

    async def commit(text: str) -> str:
        draft = Draft("s1", version=0, fence=1)
        draft.append_entry("user", {"text": text})
        try:
            await store.commit(draft)
        except ConflictError:
            return "conflict"
        return "won"

    results = await asyncio.gather(*(commit(f"c{i}") for i in range(4)))
    assert sorted(results) == ["conflict", "conflict", "conflict", "won"]
    state = await store.load("s1")
    assert state.session.version == 1
    assert len(state.entries) == 1


async def test_older_fence_after_newer_claim_is_rejected_and_writes_nothing(
    store: Store,
) -> None:
    await claimed_session(store, token=5)
    assert await store.claim_session_fence("s1", 7) == 7
    draft = Draft("s1", version=0, fence=5)
    draft.append_entry("user", {"text": "late"})
    draft.add_task(kind="k", kind_version=1, input={})
    draft.add_outbox("q", b"x")

    with pytest.raises(StaleLeaseError) as caught:
        await store.commit(draft)

    assert caught.value.token == 5
    assert caught.value.current == 7
    state = await store.load("s1")
    assert state.session.version == 0
    assert state.entries == [] and state.open_tasks == []
    assert (await store.status())["outbox_rows"] == 0


async def test_fence_claims_only_move_up(store: Store) -> None:
    await store.create_session("s1", compat="v1")
    assert await store.claim_session_fence("s1", 3) == 3
    for refused in (3, 2):  # equal too: a restarted Redis may hand out a token twice
        with pytest.raises(StaleLeaseError) as caught:
            await store.claim_session_fence("s1", refused)
        assert caught.value.current == 3
    assert await store.claim_session_fence("s1", 9) == 9
    with pytest.raises(NotFoundError):
        await store.claim_session_fence("missing", 1)


async def test_a_failing_statement_late_in_the_commit_leaves_nothing(store: Store) -> None:
    await claimed_session(store)
    draft = Draft("s1", version=0, fence=1)
    draft.append_entry("user", {"text": "x"})
    draft.add_outbox("q", b"x")
    draft.update_task("no-such-task", status="running")  # fails after the inserts ran

    with pytest.raises(ConflictError):
        await store.commit(draft)

    state = await store.load("s1")
    assert state.session.version == 0
    assert state.entries == []
    assert (await store.status())["outbox_rows"] == 0


async def test_document_version_check(store: Store) -> None:
    await claimed_session(store)
    create = Draft("s1", version=0, fence=1)
    create.put_document("plan", {"v": 1}, expected_version=None)
    await store.commit(create)

    stale = Draft("s1", version=1, fence=1)
    stale.put_document("plan", {"v": "lost"}, expected_version=0)
    with pytest.raises(ConflictError):
        await store.commit(stale)

    again = Draft("s1", version=1, fence=1)
    again.put_document("plan", {"v": "dup"}, expected_version=None)
    with pytest.raises(ConflictError):
        await store.commit(again)
    assert (await store.load("s1")).documents["plan"].body == {"v": 1}


async def test_same_request_id_twice_in_a_session_is_refused(store: Store) -> None:
    await claimed_session(store)
    first = Draft("s1", version=0, fence=1)
    first.add_submission(request_id="r1", input={})
    await store.commit(first)
    second = Draft("s1", version=1, fence=1)
    second.add_submission(request_id="r1", input={})
    with pytest.raises(ConflictError):
        await store.commit(second)


async def test_unknown_submission_fields_are_refused_before_any_io() -> None:
    # A task's fields are typed (``NewTask``, ``TaskChange``): mypy refuses unknown ones.
    draft = Draft("s1", version=0, fence=1)
    with pytest.raises(ValueError, match="unknown submission fields"):
        draft.update_submission("s", colour="red")


async def test_entry_seq_is_gap_free_under_concurrent_committers(store: Store) -> None:
    await claimed_session(store)
    per_writer, writers = 15, 4

    async def writer(name: str) -> int:
        written = conflicts = 0
        while written < per_writer:
            state = await store.load("s1")
            draft = Draft("s1", version=state.session.version, fence=1)
            batch = 1 + written % 2
            for i in range(batch):
                draft.append_entry("note", {"by": name, "n": written + i})
            try:
                await store.commit(draft)
            except ConflictError:
                conflicts += 1
                continue
            written += batch
        return conflicts

    await asyncio.gather(*(writer(f"w{i}") for i in range(writers)))
    state = await store.load("s1")
    seqs = [e.seq for e in state.entries]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) >= per_writer * writers
    assert state.session.entry_count == len(seqs)


async def test_status_counts_sessions_with_open_work_per_compatibility_key(store: Store) -> None:
    for session_id, compat in (("busy1", "v1"), ("busy2", "v1"), ("asked", "v2"), ("idle", "v2")):
        await store.create_session(session_id, compat=compat)
        await store.claim_session_fence(session_id, 1)
    for session_id, status in (("busy1", "pending"), ("busy2", "waiting"), ("idle", "terminal")):
        draft = Draft(session_id, version=0, fence=1)
        draft.add_task(kind="k", kind_version=1, input={}, status=status)
        await store.commit(draft)
    draft = Draft("asked", version=0, fence=1)
    draft.add_submission(request_id="r1", input={})
    await store.commit(draft)

    assert (await store.status())["open_sessions_by_compat"] == {"v1": 2, "v2": 1}
