"""Reading a session back costs a fixed number of queries, whatever its size; taking a
session claims its fence and reads it in one transaction, reusing a state still current."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import event, text

from brainhands.shared.errors import NotFoundError, StaleLeaseError
from brainhands.shared.store import Draft, Store, load, schema
from brainhands.shared.store.backends.postgres.rows import ROWS_AS_JSON
from tests.helpers.stores import StoreTarget, holding_a_transaction, until_waiting_on_a_lock

pytestmark = pytest.mark.integration


async def count_load_queries(store: Store, session_id: str) -> int:
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    event.listen(store.backend.engine.sync_engine, "before_cursor_execute", count)
    try:
        await store.load(session_id)
    finally:
        event.remove(store.backend.engine.sync_engine, "before_cursor_execute", count)
    return len(statements)


async def grow(store: Store, session_id: str, entries: int, tasks: int, docs: int) -> None:
    state = await store.load(session_id)
    draft = Draft(session_id, version=state.session.version, fence=1)
    for i in range(entries):
        draft.append_entry("note", {"i": i})
    for _ in range(tasks):
        draft.add_task(kind="k", kind_version=1, input={})
    for i in range(docs):
        draft.put_document(f"d{i}", {"i": i}, expected_version=None)
    draft.add_submission(request_id=f"r{state.session.version}", input={})
    await store.commit(draft)


async def test_load_is_not_n_plus_one(store: Store) -> None:
    for sid in ("small", "large"):
        await store.create_session(sid, compat="v1")
        await store.claim_session_fence(sid, 1)
    await grow(store, "small", entries=1, tasks=1, docs=1)
    await grow(store, "large", entries=200, tasks=40, docs=10)

    small = await count_load_queries(store, "small")
    large = await count_load_queries(store, "large")

    # The session, then a statement per row kind; PostgreSQL reads the kinds in one.
    assert small == large == (2 if store.backend.chains_writes else 7)
    state = await store.load("large")
    assert len(state.entries) == 200
    assert len(state.open_tasks) == 40
    assert len(state.documents) == 10


@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_the_one_statement_read_gives_the_records_the_reads_by_kind_give(
    store: Store,
) -> None:
    for sid in ("s1", "s2"):
        await store.create_session(sid, compat="v1")
        await store.claim_session_fence(sid, 1)
    draft = Draft("s1", version=0, fence=1)
    draft.append_entry("user", {"text": 'quotes " and \\ and ünïcode ✓', "n": 1.5, "none": None})
    draft.append_entry("note", ["a", 2, True, {"deep": [None]}])
    draft.put_document("doc", {"v": [1, 2.25]}, expected_version=None)
    first = draft.add_task(kind="k", kind_version=3, input={"x": 1}, status="sleeping")
    draft.update_task(first, wake_at=1_800_000_000.125, state={"s": "t"})
    draft.add_task(kind="k", kind_version=1, input=None, status="waiting", wait_for=[first])
    draft.add_submission(request_id="r1", input={"agent": "a"}, status="queued")
    draft.add_submission(request_id="r2", input=[], status="running")
    for op in ("inline", "blob"):
        draft.add_task(
            kind="brainhands.tool", kind_version=1, input={}, status="waiting", operation_id=op
        )
    await store.commit(draft)
    for sid in ("s1", "s2"):
        await store.inbox.send_signal(
            session_id=sid, name="go", signal_id="g", payload=[1], wake=None
        )
    ledger = store.ledger
    intent = {"session_id": "s1", "task_id": "t", "tool": "echo", "pool": "p", "arguments": {}}
    for op in ("inline", "blob"):
        await ledger.claim(op, 1, intent=intent)
    await ledger.record_outcome("inline", 1, status="failed", error={"reason": "x", "n": 0.5})
    await ledger.record_outcome("blob", 1, status="succeeded", blob=b'{"r": [1, "\\u00e9"]}')

    def both(conn: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        # s1 whole, s2 only its arrivals, as a claim that reuses a kept state reads them.
        return (
            ROWS_AS_JSON.read(conn, ["s1"], ["s2"], True),
            load.ROWS_BY_KIND.read(conn, ["s1"], ["s2"], True),
        )

    by_json, by_kind = await store.backend.read(both)

    assert by_json == by_kind
    s1, s2 = by_json["s1"], by_json["s2"]
    assert [len(s1.entries), len(s1.tasks), len(s1.submissions), len(s1.inbox)] == [2, 4, 2, 1]
    assert (s2.entries, s2.tasks, len(s2.inbox), s2.operations) == ([], [], 1, {})
    assert s1.operations["blob"].result == {"r": [1, "\u00e9"]}
    pairs = [*zip(s1.tasks, by_kind["s1"].tasks, strict=True)]
    pairs += [(s1.operations[op], by_kind["s1"].operations[op]) for op in ("inline", "blob")]
    for from_json, by_its_kind in pairs:
        assert {k: type(v) for k, v in vars(from_json).items()} == {
            k: type(v) for k, v in vars(by_its_kind).items()
        }


@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_rows_with_a_column_a_later_migration_added_are_read_as_this_build_knows_them(
    store: Store,
) -> None:
    """A rolling upgrade: a newer build's migration added columns this build's records do not
    have; the one-statement read, which returns whole rows, still reads every session."""
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    draft = Draft("s1", version=0, fence=1)
    draft.add_task(
        kind="brainhands.tool", kind_version=1, input={}, status="waiting", operation_id="op"
    )
    draft.add_submission(request_id="r1", input={}, status="queued")
    await store.commit(draft)
    await store.inbox.send_signal(session_id="s1", name="go", signal_id="g", payload=1, wake=None)
    intent = {"session_id": "s1", "task_id": "t", "tool": "echo", "pool": "p", "arguments": {}}
    await store.ledger.claim("op", 1, intent=intent)
    await store.ledger.record_outcome("op", 1, status="succeeded", blob=b'{"r": 1}')
    before = await store.backend.read(lambda conn: ROWS_AS_JSON.read(conn, ["s1"], [], True))

    async with store.backend.transaction() as conn:
        for table in (schema.task, schema.submission, schema.inbox, schema.operation):
            await conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN later INTEGER DEFAULT 7"))

    after = await store.backend.read(lambda conn: ROWS_AS_JSON.read(conn, ["s1"], [], True))
    assert after == before
    rows = after["s1"]
    assert [len(rows.tasks), len(rows.submissions), len(rows.inbox)] == [1, 1, 1]
    assert rows.operations["op"].result == {"r": 1}


async def test_claiming_a_session_reads_its_state_and_what_its_waits_need(store: Store) -> None:
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    draft = Draft("s1", version=0, fence=1)
    draft.append_entry("user", {"text": "hi"})
    done = draft.add_task(
        kind="k", kind_version=1, input={}, status="terminal", outcome="succeeded"
    )
    call = draft.add_task(
        kind="brainhands.tool", kind_version=1, input={}, status="waiting", operation_id="op1"
    )
    draft.add_task(kind="k", kind_version=1, input={}, status="waiting", wait_for=[done, call])
    await store.commit(draft)

    claimed = await store.claim_session("s1", 2)

    assert claimed.state.session.fence == 2
    assert [e.body for e in claimed.state.entries] == [{"text": "hi"}]
    assert len(claimed.state.open_tasks) == 2
    assert list(claimed.state.settled) == [done]  # the settled task a wait refers to
    assert claimed.operations == {}  # Hands has not claimed op1 yet


async def test_a_claim_at_or_below_the_fence_is_refused_and_changes_nothing(
    store: Store,
) -> None:
    await store.create_session("s1", compat="v1")
    await store.claim_session("s1", 5)

    for refused in (5, 4):
        with pytest.raises(StaleLeaseError) as caught:
            await store.claim_session("s1", refused)
        assert caught.value.current == 5

    assert (await store.load("s1")).session.fence == 5


async def test_a_state_still_at_its_version_is_reused_and_only_arrivals_are_read(
    store: Store,
) -> None:
    await store.create_session("s1", compat="v1")
    await grow_at(store, "s1", fence=1, entries=30)
    known = (await store.claim_session("s1", 2)).state
    await store.commit(submission_draft(known.session.version, fence=2))
    known = (await store.claim_session("s1", 3)).state  # now at the new version

    statements = await count_claim_statements(store, "s1", 4, known)

    # The fence claim, then the open submissions, inbox and waited-for operations (all one
    # statement on PostgreSQL; on SQLite, after its BEGIN); the rest is reused.
    assert statements == (1 if store.backend.chains_writes else 5)
    await store.inbox.send_signal(
        session_id="s1", name="go", signal_id="g", payload=None, wake=None
    )
    claimed = await store.claim_session("s1", 7, known)
    assert claimed.state.entries is known.entries
    assert [s.request_id for s in claimed.state.open_submissions] == ["r-new"]
    assert [r.name for r in claimed.state.inbox] == ["go"]


async def test_a_claim_reads_the_outcomes_its_waiting_calls_refer_to(store: Store) -> None:
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    draft = Draft("s1", version=0, fence=1)
    for op in ("small", "large", "pending"):
        draft.add_task(
            kind="brainhands.tool", kind_version=1, input={}, status="waiting", operation_id=op
        )
    draft.add_task(
        kind="brainhands.tool", kind_version=1, input={}, status="terminal", operation_id="done"
    )
    await store.commit(draft)
    ledger = store.ledger
    intent = {"session_id": "s1", "task_id": "t", "tool": "echo", "pool": "p", "arguments": {}}
    for op in ("small", "large", "pending", "done"):
        await ledger.claim(op, 1, intent=intent)
    await ledger.record_outcome("small", 1, status="succeeded", result={"n": 1.5})
    await ledger.record_outcome("large", 1, status="succeeded", blob=b'{"big": ["x", 2]}')
    await ledger.record_outcome("done", 1, status="succeeded", result=1)
    known = (await store.claim_session("s1", 2)).state

    whole = await store.claim_session("s1", 3)  # read whole
    reused = await store.claim_session("s1", 4, known)  # only the arrivals read again

    for claimed in (whole, reused):
        ops = claimed.operations
        assert sorted(ops) == ["large", "pending", "small"]  # not the settled call's
        assert ops["small"].result == {"n": 1.5}
        assert ops["large"].result == {"big": ["x", 2]} and ops["large"].blob_id is not None
        assert (ops["pending"].status, ops["pending"].result) == ("intended", None)


async def test_a_state_behind_the_stored_version_is_not_reused(store: Store) -> None:
    await store.create_session("s1", compat="v1")
    await grow_at(store, "s1", fence=1, entries=2)
    stale = (await store.claim_session("s1", 2)).state
    draft = Draft("s1", version=stale.session.version, fence=2)
    draft.append_entry("note", {"i": "later"})
    await store.commit(draft)  # another holder moved the session on

    claimed = await store.claim_session("s1", 3, stale)

    assert [e.body for e in claimed.state.entries][-1] == {"i": "later"}
    assert claimed.state.session.version == stale.session.version + 1


@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
@pytest.mark.parametrize("reuse", [False, True], ids=["unknown", "kept"])
async def test_a_claim_that_waited_for_a_commit_reads_what_the_commit_wrote(
    store: Store, store_target: StoreTarget, reuse: bool
) -> None:
    # The older holder's commit has locked the session's row and not committed yet: the
    # one-statement claim waits for it, so its snapshot predates the commit's rows (kept:
    # the claimer holds the state before that commit).
    await store.create_session("s1", compat="v1")
    await grow_at(store, "s1", fence=1, entries=2)
    known = (await store.claim_session("s1", 2)).state
    async with holding_a_transaction(store_target) as holder:
        await holder.execute(
            "UPDATE session SET version = version + 1, entry_count = 3 WHERE id = 's1'"
        )
        await holder.execute(
            "INSERT INTO entry (session_id, seq, kind, body, created_at) "
            """VALUES ('s1', 3, 'note', '{"i": "late"}', 1)"""
        )
        pending = asyncio.create_task(store.claim_session("s1", 3, known if reuse else None))
        await until_waiting_on_a_lock(holder, "the claim to wait on it")
        assert not pending.done()
    claimed = await pending
    assert claimed.state.session.version == known.session.version + 1
    assert [e.body for e in claimed.state.entries] == [{"i": 0}, {"i": 1}, {"i": "late"}]


async def grow_at(store: Store, session_id: str, *, fence: int, entries: int) -> None:
    await store.claim_session_fence(session_id, fence)
    state = await store.load(session_id)
    draft = Draft(session_id, version=state.session.version, fence=fence)
    for i in range(entries):
        draft.append_entry("note", {"i": i})
    await store.commit(draft)


def submission_draft(version: int, *, fence: int) -> Draft:
    draft = Draft("s1", version=version, fence=fence)
    draft.add_submission(request_id="r-new", input={})
    return draft


async def count_claim_statements(store: Store, session_id: str, token: int, known: Any) -> int:
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    engine = store.backend.writes_on
    event.listen(engine, "before_cursor_execute", count)
    try:
        await store.claim_session(session_id, token, known)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return len(statements)


async def test_claims_asked_together_share_one_hop_each_answered_alone(store: Store) -> None:
    for sid in ("a", "b", "c", "stale"):
        await store.create_session(sid, compat="v1")
        await grow_at(store, sid, fence=1, entries=3)
    known = (await store.claim_session("c", 2)).state
    await store.claim_session_fence("stale", 9)
    lone = await count_statements(store, lambda: store.claim_session("a", 2))

    claims = [
        ("a", 3, None),
        ("b", 2, None),
        ("c", 3, known),
        ("stale", 2, None),
        ("gone", 1, None),
    ]
    together: list[Any] = []

    async def claim_all() -> None:
        together.extend(
            await asyncio.gather(
                *(store.claim_session(sid, token, kept) for sid, token, kept in claims),
                return_exceptions=True,
            )
        )

    shared = await count_statements(store, claim_all)

    a, b, c, stale, gone = together
    assert [len(x.state.entries) for x in (a, b, c)] == [3, 3, 3]
    assert (a.state.session.fence, b.state.session.fence, c.state.session.fence) == (3, 2, 3)
    assert c.state.entries is known.entries  # still at its version: reused, not read
    assert isinstance(stale, StaleLeaseError) and stale.current == 9
    assert isinstance(gone, NotFoundError)
    if store.backend.chains_writes:  # PostgreSQL pipelines each read for the whole batch
        assert shared <= lone + 1  # + the fences of the refused claims


async def count_statements(store: Store, work: Callable[[], Awaitable[object]]) -> int:
    """How many statements (pipelined ones once) ``work`` sent to the store."""
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    engines = {store.backend.writes_on, store.backend.engine.sync_engine}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", count)
    try:
        await work()
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", count)
    return len(statements)


async def test_arrivals_asked_together_share_one_hop_each_answered_alone(store: Store) -> None:
    for sid in ("a", "b", "c"):
        await store.create_session(sid, compat="v1")
        await store.claim_session_fence(sid, 1)
    for sid, n in (("a", 2), ("b", 1)):
        for i in range(n):
            await store.inbox.send_signal(
                session_id=sid, name="go", signal_id=f"{sid}{i}", payload=i, wake=None
            )
    draft = Draft("c", version=0, fence=1)
    draft.add_submission(request_id="r1", input={}, status="queued")
    await store.commit(draft)
    lone = await count_statements(store, lambda: store.arrivals("c", queued=True))

    asks = [("a", False), ("b", True), ("c", True)]
    found: list[Any] = []

    async def ask_all() -> None:
        found.extend(await asyncio.gather(*(store.arrivals(s, queued=q) for s, q in asks)))

    shared = await count_statements(store, ask_all)

    (a_inbox, a_queued), (b_inbox, b_queued), (c_inbox, c_queued) = found
    assert [r.key for r in a_inbox] == ["a0", "a1"] and a_queued == []
    assert [r.key for r in b_inbox] == ["b0"] and b_queued == []
    assert c_inbox == [] and [s.request_id for s in c_queued] == ["r1"]
    if store.backend.chains_writes:  # PostgreSQL reads both kinds in one statement, pipelined
        assert shared == lone == 1


async def test_rows_asked_together_share_one_hop_each_gets_its_own(store: Store) -> None:
    await store.create_session("s1", compat="v1")
    await store.claim_session_fence("s1", 1)
    draft = Draft("s1", version=0, fence=1)
    first = draft.add_task(kind="k", kind_version=1, input={})
    second = draft.add_task(kind="k", kind_version=1, input={})
    await store.commit(draft)

    async def ask_both() -> None:
        found.extend(
            await asyncio.gather(store.rows([first], []), store.rows([second, "gone"], []))
        )

    found: list[Any] = []
    lone = await count_statements(store, lambda: store.rows([first], []))
    shared = await count_statements(store, ask_both)

    assert [list(tasks) for tasks, _ops in found] == [[first], [second]]
    assert shared == lone


async def test_a_deferred_claim_reads_and_leaves_the_fence_to_the_first_commit(
    store: Store,
) -> None:
    await store.create_session("s1", compat="v1")
    await grow_at(store, "s1", fence=1, entries=2)

    checked = await store.claim_session("s1", 2, defer=True)

    assert checked.state.session.fence == 2  # as the holder will make it
    assert len(checked.state.entries) == 2
    assert (await store.load("s1")).session.fence == 1  # nothing written
    for refused in (1, 0):
        with pytest.raises(StaleLeaseError) as caught:
            await store.claim_session("s1", refused, defer=True)
        assert caught.value.current == 1

    draft = Draft("s1", version=checked.state.session.version, fence=2, claims_fence=True)
    draft.append_entry("note", {"claimed": True})
    await store.commit(draft)
    assert (await store.load("s1")).session.fence == 2
    late = Draft("s1", version=checked.state.session.version + 1, fence=1)  # the old holder
    late.append_entry("note", {})
    with pytest.raises(StaleLeaseError):
        await store.commit(late)


async def test_a_first_commit_claims_nothing_once_a_newer_holder_claimed(store: Store) -> None:
    await store.create_session("s1", compat="v1")
    checked = await store.claim_session("s1", 2, defer=True)
    await store.claim_session("s1", 3)  # a newer holder, claimed at once

    draft = Draft("s1", version=checked.state.session.version, fence=2, claims_fence=True)
    draft.append_entry("note", {})
    with pytest.raises(StaleLeaseError) as caught:
        await store.commit(draft)

    assert caught.value.current == 3
    equal = Draft("s1", version=checked.state.session.version, fence=3, claims_fence=True)
    equal.append_entry("note", {})
    with pytest.raises(StaleLeaseError):  # a claim needs a token above the fence
        await store.commit(equal)


async def test_deferred_and_immediate_claims_share_one_hop(store: Store) -> None:
    for sid in ("a", "b", "stale"):
        await store.create_session(sid, compat="v1")
        await grow_at(store, sid, fence=1, entries=1)
    await store.claim_session_fence("stale", 9)

    a, b, stale = await asyncio.gather(
        store.claim_session("a", 2, defer=True),
        store.claim_session("b", 2),
        store.claim_session("stale", 3, defer=True),
        return_exceptions=True,
    )

    assert not isinstance(a, BaseException) and not isinstance(b, BaseException)
    assert (a.state.session.fence, b.state.session.fence) == (2, 2)
    assert isinstance(stale, StaleLeaseError) and stale.current == 9
    fences = {sid: (await store.load(sid)).session.fence for sid in ("a", "b")}
    assert fences == {"a": 1, "b": 2}
