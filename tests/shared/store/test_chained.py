"""A draft written as one statement where the backend chains writes (PostgreSQL): the same
rows as the statements one by one, all or nothing, and the old way where the one snapshot
would see the draft's writes wrongly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, select

from brainhands.shared.errors import ConflictError, NotFoundError
from brainhands.shared.store import DocumentRecord, Draft, Store, schema
from brainhands.shared.store.backends.postgres.chained import chainable
from brainhands.shared.store.commit import apply_draft_sync
from brainhands.shared.store.draft import DocumentWrite, SubmissionUpdate

pytestmark = pytest.mark.integration


@contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    """The statements the store's writing connections send meanwhile (BEGIN left out)."""
    sent: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if not statement.startswith("BEGIN"):
            sent.append(statement)

    event.listen(store.backend.writes_on, "before_cursor_execute", note)
    try:
        yield sent
    finally:
        event.remove(store.backend.writes_on, "before_cursor_execute", note)


async def session_with_work(store: Store, session_id: str) -> tuple[str, str, int]:
    """A claimed session with a waiting task, a queued submission and an unapplied inbox
    request, committed at version 1: (task id, submission id, inbox id)."""
    store.document_increments = True  # increments alone: the statement's longest shape
    await store.create_session(session_id, compat="v1")
    await store.claim_session_fence(session_id, 1)
    first = Draft(session_id, version=0, fence=1)
    first.put_document("plan", {"v": 1}, expected_version=None)
    task_id = first.add_task(kind="k", kind_version=1, input={"n": 1}, status="waiting")
    submission_id = first.add_submission(request_id="r1", input={"text": "hi"})
    await store.commit(first)
    sent = await store.inbox.send_request(
        session_id=session_id, kind="signal", key="k1", name="go", body={"a": 1}, wake=None
    )
    return task_id, submission_id, sent.request.id


def second_draft(session_id: str, task_id: str, submission_id: str, inbox_id: int) -> Draft:
    """Every kind of change a chained draft holds, against ``session_with_work``."""
    draft = Draft(session_id, version=1, fence=1)
    draft.append_entry("model", {"raw": {"choices": [1]}})
    draft.append_entry("tool_result", {"ok": True})
    draft.add_task(kind="tool", kind_version=1, input={"x": 1}, status="running", phase="go")
    draft.add_task(kind="tool", kind_version=1, input={}, wake_at=5.0, status="sleeping")
    draft.update_task(task_id, expected_status="waiting", status="running", state={"s": [1]})
    draft.update_submission(submission_id, status="running", task_id=task_id)
    draft.mark_applied(inbox_id)
    read = DocumentRecord("plan", 1, {"v": 1}, baseline=1)  # an increment on its baseline
    draft.put_document("plan", {"v": 2}, expected_version=1, previous=read)
    draft.put_document("receipts", {"sent": []}, expected_version=None)
    draft.add_task(kind="tool", kind_version=1, input={"blob": draft.add_blob(b"large")})
    draft.add_outbox("hands.a", b"job-1", {"h": "1"})
    draft.add_outbox("hands.b", b"job-2")
    return draft


async def picture(store: Store, session_id: str) -> dict[str, Any]:
    """What the store holds of ``session_id``, ids and timestamps left out."""
    state = await store.load(session_id)
    o, i, b = schema.outbox, schema.inbox, schema.blob
    blob_ids = [t.input["blob"] for t in state.open_tasks if "blob" in t.input]
    async with store.backend.engine.connect() as conn:
        blobs = (await conn.execute(select(b.c.data).where(b.c.id.in_(blob_ids)))).scalars().all()
        outbox = (
            await conn.execute(
                select(o.c.routing_key, o.c.body, o.c.headers, o.c.publish_after)
                .where(o.c.session_id == session_id)
                .order_by(o.c.routing_key)
            )
        ).all()
        applied = (
            (
                await conn.execute(
                    select(i.c.applied_at.is_not(None)).where(i.c.session_id == session_id)
                )
            )
            .scalars()
            .all()
        )
    tasks = sorted(
        (
            t.kind,
            t.status,
            t.phase,
            "blob" if "blob" in t.input else t.input,
            t.state,
            t.wake_at,
            t.attempt,
            t.cancel_requested,
        )
        for t in state.open_tasks
    )
    return {
        "version": state.session.version,
        "entries": [(e.seq, e.kind, e.body) for e in state.entries],
        "tasks": tasks,
        "submissions": [(s.status, s.task_id is not None) for s in state.open_submissions],
        "documents": {n: (d.version, d.body, d.baseline) for n, d in state.documents.items()},
        "blobs": blobs,
        "outbox": [tuple(r) for r in outbox],
        "applied": applied,
    }


async def test_a_draft_is_one_statement_on_postgresql_and_writes_what_the_statements_would(
    store: Store,
) -> None:
    ids_a = await session_with_work(store, "a")
    ids_b = await session_with_work(store, "b")
    assert chainable(second_draft("a", *ids_a))

    with statements(store) as sent:
        receipt = await store.commit(second_draft("a", *ids_a))
    # The same draft, written the old way: one statement per write, in a transaction.
    old_way = second_draft("b", *ids_b)
    await store.backend.write(
        lambda conn: apply_draft_sync(conn, old_way, notify=False, handoff=store.handoff)
    )

    # On SQLite: the guard, a write per row, and the documents' increments in one.
    expected = {"Postgres": 1, "Sqlite": 13}[type(store.backend).__name__]
    assert len(sent) == expected, sent
    assert receipt.version == 2 and receipt.entry_seqs == [1, 2]
    assert [(r.routing_key, r.body, r.headers) for r in receipt.outbox] == [
        ("hands.a", b"job-1", {"h": "1"}),
        ("hands.b", b"job-2", None),
    ]
    assert len({r.id for r in receipt.outbox}) == 2
    a, b = await picture(store, "a"), await picture(store, "b")
    assert a == b
    assert a["applied"] == [True] and a["submissions"] == [("running", True)]
    assert a["documents"] == {"plan": (2, {"v": 2}, 1), "receipts": (1, {"sent": []}, 1)}
    assert a["blobs"] == [b"large"] and len(a["tasks"]) == 4


def expecting_another_status(draft: Draft, task_id: str) -> None:
    draft.update_task(task_id, expected_status="sleeping", status="terminal")  # kept apart
    draft.task_updates = [u for u in draft.task_updates if u.expected_status == "sleeping"]


def expecting_another_version(draft: Draft, _task_id: str) -> None:
    draft.documents[0] = DocumentWrite("plan", {"v": 3}, expected_version=7)


def updating_a_missing_submission(draft: Draft, _task_id: str) -> None:
    draft.submission_updates[0] = SubmissionUpdate("no-such-submission", {"status": "running"})


@pytest.mark.parametrize(
    ("spoil", "error", "says"),
    [
        (expecting_another_status, ConflictError, "task {task_id} of session s1 is missing or"),
        (expecting_another_version, ConflictError, "document 'plan' of session s1 is not at"),
        (updating_a_missing_submission, NotFoundError, "submission no-such-submission not found"),
    ],
)
async def test_a_check_that_fails_undoes_the_whole_statement(
    store: Store,
    spoil: Callable[[Draft, str], None],
    error: type[Exception],
    says: str,
) -> None:
    task_id, submission_id, inbox_id = await session_with_work(store, "s1")
    before = await picture(store, "s1")
    draft = second_draft("s1", task_id, submission_id, inbox_id)
    spoil(draft, task_id)
    assert chainable(draft)

    with pytest.raises(error, match=says.format(task_id=task_id)):
        await store.commit(draft)

    assert await picture(store, "s1") == before


async def test_a_root_ending_answers_its_own_and_the_joined_submissions_once(
    store: Store,
) -> None:
    task_id, own, _inbox = await session_with_work(store, "s1")
    setup = Draft("s1", version=1, fence=1)
    joined = setup.add_submission(request_id="r2", input={"text": "more"})
    queued = setup.add_submission(request_id="r3", input={"text": "later"})
    setup.update_submission(own, status="running", task_id=task_id)
    await store.commit(setup)
    join = Draft("s1", version=2, fence=1)
    join.update_submission(joined, status="running", task_id=task_id)
    await store.commit(join)

    ending = Draft("s1", version=3, fence=1)
    ending.update_task(task_id, expected_status="waiting", status="terminal", outcome="succeeded")
    ending.update_submission(own, status="answered", answer={"text": "done"})
    ending.answer_joined(task_id, status="answered", answer={"text": "done"})
    assert chainable(ending)
    with statements(store) as sent:
        await store.commit(ending)

    assert len(sent) == {"Postgres": 1, "Sqlite": 4}[type(store.backend).__name__]
    by_id = {s.id: s for s in await store.submissions.of_session("s1")}
    assert (by_id[own].status, by_id[own].answer) == ("answered", {"text": "done"})
    assert (by_id[joined].status, by_id[joined].answer) == ("answered", {"text": "done"})
    assert by_id[queued].status == "queued"


def test_drafts_whose_writes_depend_on_each_other_are_not_chained() -> None:
    def draft() -> Draft:
        return Draft("s1", version=1, fence=1)

    plain = draft()
    plain.append_entry("user", {})
    plain.update_task("t1", status="running")

    plain.put_document("plan", {}, expected_version=3)
    plain.add_blob(b"large")
    assert chainable(plain)

    document_twice = draft()
    document_twice.put_document("plan", {}, expected_version=None)
    document_twice.put_document("plan", {"more": 1}, expected_version=1)
    twice = draft()
    twice.update_task("t1", expected_status="waiting", status="running")
    twice.update_task("t1", expected_status="waiting", phase="again")  # kept apart
    new_and_updated = draft()
    new_task = new_and_updated.add_task(kind="k", kind_version=1, input={})
    new_and_updated.update_task(new_task, expected_status="running", phase="x")  # kept apart
    new_submission_updated = draft()
    sub = new_submission_updated.add_submission(request_id="r", input={})
    new_submission_updated.update_submission(sub, status="running")
    joined_and_kept_running = draft()
    joined_and_kept_running.update_submission("sub1", status="running", task_id="root")
    joined_and_kept_running.answer_joined("root", status="answered")
    for unchainable in (
        document_twice,
        twice,
        new_and_updated,
        new_submission_updated,
        joined_and_kept_running,
    ):
        assert not chainable(unchainable)
