"""Workspaces in the store, on both backends: versions made from nothing, a tarball or
another session's version; objects kept once per tenant; a version committed with the
outcome of the call that made it, or not at all."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import obstore
import pytest
from obstore.store import from_url
from sqlalchemy import func, select

from brainhands.shared.errors import (
    ConfigurationError,
    ConflictError,
    NotFoundError,
    StaleLeaseError,
    WorkspaceMoved,
)
from brainhands.shared.store import ObjectBytes, OutboxMessage, Store, WorkspaceAdvance, schema
from brainhands.shared.workspace_trees import (
    EMPTY_ROOT,
    FileEntry,
    build_trees,
    from_tarball,
    object_hash,
    read_manifest,
    to_tarball,
)
from tests.helpers.stores import StoreTarget

pytestmark = pytest.mark.integration


@pytest.fixture(params=["in rows", "in an object store"])
async def store(request: pytest.FixtureRequest, store_target: StoreTarget) -> AsyncIterator[Store]:
    """A migrated, empty store on each backend, keeping objects' bytes in their rows, or in
    an S3 object store (``BRAINHANDS_WORKSPACE_OBJECTS``)."""
    outside = None
    if request.param == "in an object store":
        outside = ObjectBytes(request.getfixturevalue("s3_objects"))
    opened = await Store.open(
        store_target.url, upgrade=True, db_schema=store_target.schema, workspace_objects=outside
    )
    yield opened
    await opened.close()


async def count_objects(store: Store, tenant: str) -> int:
    query = select(func.count()).where(schema.workspace_object.c.tenant == tenant)
    async with store.backend.engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


async def uploaded(url: str) -> list[str]:
    """The keys in the object store at ``url``, below its prefix."""
    listed = obstore.list(from_url(url), return_arrow=False)
    return sorted(item["path"] for page in listed for item in page)


async def in_rows(store: Store) -> list[tuple[str, bool, str | None]]:
    """Each object row: its hash, whether it holds the bytes, where they are otherwise."""
    o = schema.workspace_object
    async with store.backend.engine.connect() as conn:
        rows = await conn.execute(select(o.c.hash, o.c.data.is_not(None), o.c.location))
        return sorted((r[0], bool(r[1]), r[2]) for r in rows)


def project() -> tuple[dict[str, FileEntry], dict[str, bytes]]:
    files = {"src/app.py": b"print('hi')\n", "README": b"readme\n", "src/util.py": b"u = 1\n"}
    manifest = {p: FileEntry("f", object_hash(d), len(d)) for p, d in files.items()}
    return manifest, {object_hash(d): d for d in files.values()}


async def test_a_workspace_starts_empty_and_is_made_from_a_tarball_or_another_version(
    store: Store,
) -> None:
    spaces = store.workspaces
    empty = await spaces.head("acme/s1", "repo")
    assert (empty.version, empty.root, empty.files) == (0, EMPTY_ROOT, 0)

    manifest, contents = project()
    first = await spaces.create("acme/s1", "repo", *from_tarball(to_tarball(manifest, contents)))
    assert (first.version, first.files, first.bytes, first.operation_id) == (1, 3, 25, None)
    objects = await count_objects(store, "acme")
    assert objects == 3 + 2  # the files, the root and src/

    # Another session of the tenant starts from that version: nothing is stored again.
    tree = await read_manifest(first.root, lambda h: spaces.objects("acme", h))
    copy = await spaces.create("acme/s2", "repo", tree, {})
    assert copy.root == first.root
    assert await count_objects(store, "acme") == objects
    # Another tenant does not see acme's contents.
    with pytest.raises(NotFoundError, match="neither given nor kept"):
        await spaces.create("other/s1", "repo", tree, {})
    with pytest.raises(ConflictError, match="exists"):
        await spaces.create("acme/s1", "repo", manifest, contents)
    assert [v.version for v in await spaces.versions("acme/s1", "repo")] == [1]
    assert await spaces.names("acme/s1") == ["repo"]


async def claimed(store: Store, operation_id: str, token: int = 1) -> None:
    intent = {"session_id": "acme/s1", "task_id": "t1", "tool": "edit", "pool": "default"}
    await store.ledger.claim(operation_id, token, intent={**intent, "arguments": {}})


def next_of(base: int, files: dict[str, bytes]) -> tuple[WorkspaceAdvance, dict[str, bytes]]:
    manifest = {p: FileEntry("f", object_hash(d), len(d)) for p, d in files.items()}
    root, trees = build_trees(manifest)
    objects = {**trees, **{object_hash(d): d for d in files.values()}}
    size = sum(map(len, files.values()))
    step = WorkspaceAdvance("acme/s1", "repo", base, root, len(files), size)
    return step, objects


async def test_a_version_commits_with_its_calls_outcome_and_only_on_the_version_it_ran_on(
    store: Store,
) -> None:
    ledger, spaces = store.ledger, store.workspaces
    for op in ("op1", "op2", "op3"):
        await claimed(store, op)
    one, objects = next_of(0, {"a.txt": b"one"})
    await spaces.put("acme", objects)
    event = OutboxMessage("brain.v1", b"result")
    await ledger.record_outcome(
        "op1", 1, status="succeeded", notify=event, session_id="acme/s1", workspace=one
    )
    head = await spaces.head("acme/s1", "repo")
    assert (head.version, head.root, head.operation_id) == (1, one.root, "op1")

    # A call that ran on version 0 too comes second: neither its outcome nor its version
    # is written, and its writer hears why.
    late, objects = next_of(0, {"a.txt": b"late"})
    await spaces.put("acme", objects)
    with pytest.raises(WorkspaceMoved, match="moved past version 0"):
        await ledger.record_outcome("op2", 1, status="succeeded", notify=event, workspace=late)
    assert (await ledger.get("op2")).status == "intended"
    # A stale holder writes nothing either.
    await claimed(store, "op3", 5)
    two, _ = next_of(1, {"a.txt": b"two"})
    with pytest.raises(StaleLeaseError):
        await ledger.record_outcome("op3", 1, status="succeeded", workspace=two)
    assert (await spaces.head("acme/s1", "repo")).version == 1


async def test_two_calls_racing_for_one_version_commit_one(store: Store) -> None:
    for op in ("op1", "op2"):
        await claimed(store, op)
    steps = [next_of(0, {"a.txt": text})[0] for text in (b"left", b"right")]

    results = await asyncio.gather(
        *(
            store.ledger.record_outcome(op, 1, status="succeeded", workspace=step)
            for op, step in zip(("op1", "op2"), steps, strict=True)
        ),
        return_exceptions=True,
    )

    assert sorted(type(r).__name__ for r in results) == ["NoneType", "WorkspaceMoved"]
    versions = await store.workspaces.versions("acme/s1", "repo")
    assert len(versions) == 1
    winner = versions[0].operation_id
    assert (await store.ledger.get(winner or "")).status == "succeeded"


async def test_a_forgotten_sessions_own_contents_are_collected_and_shared_ones_kept(
    store: Store,
) -> None:
    spaces = store.workspaces
    shared = {"lib.py": b"shared = True\n"}
    mine = {**shared, "mine.py": b"only in s1\n"}
    theirs = {**shared, "theirs.py": b"only in s2\n"}
    for session, files in (("acme/s1", mine), ("acme/s2", theirs), ("s3", mine)):
        manifest = {p: FileEntry("f", object_hash(d), len(d)) for p, d in files.items()}
        await spaces.create(session, "repo", manifest, {object_hash(d): d for d in files.values()})
    # A capture's objects for a version not committed yet: touched past the margin.
    margin = time.time()
    pending = b"captured, its version about to commit\n"
    await spaces.put("acme", {object_hash(pending): pending})
    before = await count_objects(store, "acme")

    assert await spaces.forget("acme/s1") == 1
    assert await spaces.collect("acme", untouched_since=margin) == 2  # mine.py, s1's root
    assert await count_objects(store, "acme") == before - 2
    with pytest.raises(NotFoundError):
        await spaces.objects("acme", [object_hash(mine["mine.py"])])
    kept = await spaces.objects("acme", [object_hash(shared["lib.py"]), object_hash(pending)])
    assert len(kept) == 2
    # What s2 holds reads back whole; the default tenant's s3, with mine.py, is its own.
    head = await spaces.head("acme/s2", "repo")
    assert await read_manifest(head.root, lambda h: spaces.objects("acme", h)) == {
        p: FileEntry("f", object_hash(d), len(d)) for p, d in theirs.items()
    }
    assert await spaces.collect("default", untouched_since=time.time()) == 0
    assert await spaces.versions("acme/s1", "repo") == []
    # Once past its margin, the uncommitted capture's object goes too.
    assert await spaces.collect("acme", untouched_since=time.time()) == 1
    assert sorted(await spaces.tenants()) == ["acme", "default"]
    # A capture that found an object there already touches it: kept, though no version
    # names it any more, until its version commits.
    assert await spaces.forget("acme/s2") == 1
    margin = time.time()
    await spaces.put("acme", {}, touch=[object_hash(shared["lib.py"])])
    assert await spaces.collect("acme", untouched_since=margin) == 2  # theirs.py, s2's root
    assert await spaces.objects("acme", [object_hash(shared["lib.py"])])


@pytest.mark.parametrize("store", ["in an object store"], indirect=True)
async def test_with_an_object_store_the_rows_say_where_the_bytes_are_and_hold_none(
    store: Store, store_target: StoreTarget, s3_objects: str
) -> None:
    spaces = store.workspaces
    manifest, contents = project()
    first = await spaces.create("acme/s1", "repo", manifest, contents)

    rows = await in_rows(store)
    assert len(rows) == 5 and not any(holds for _, holds, _ in rows)
    # One upload an object, under the tenant and its hash.
    keys = await uploaded(s3_objects)
    assert keys == sorted(str(where) for *_, where in rows)
    assert all(where and where.startswith(f"acme/{h}/") for h, _, where in rows)
    tree = await read_manifest(first.root, lambda h: spaces.objects("acme", h))
    assert tree == manifest

    # Two writers racing with the same new object: one row, one upload kept.
    racing = b"written by two captures at once\n"
    await asyncio.gather(*(spaces.put("acme", {object_hash(racing): racing}) for _ in range(4)))
    assert len(await in_rows(store)) == 6
    assert len(await uploaded(s3_objects)) == 6
    assert await spaces.objects("acme", [object_hash(racing)]) == {object_hash(racing): racing}

    # Collected: the rows and their uploads both.
    assert await spaces.forget("acme/s1") == 1
    assert await spaces.collect("acme", untouched_since=time.time()) == 6
    assert await in_rows(store) == [] and await uploaded(s3_objects) == []

    # A process of the deployment that was not told of the object store says what to set.
    await spaces.create("acme/s2", "repo", manifest, contents)
    blind = await Store.open(store_target.url, db_schema=store_target.schema)
    try:
        with pytest.raises(ConfigurationError, match="BRAINHANDS_WORKSPACE_OBJECTS"):
            await blind.workspaces.objects("acme", contents)
    finally:
        await blind.close()


async def test_a_touch_that_finds_its_object_collected_meanwhile_says_so(store: Store) -> None:
    spaces = store.workspaces
    data = b"found there by a writer, then collected before its touch\n"
    await spaces.put("acme", {object_hash(data): data})
    assert await spaces.missing("acme", [object_hash(data)]) == set()  # the writer looks
    assert await spaces.collect("acme", untouched_since=time.time()) == 1  # a sweeper collects

    other = b"another object of the same capture\n"
    gone = await spaces.put("acme", {object_hash(other): other}, touch=[object_hash(data)])

    assert gone == {object_hash(data)}  # not there to touch: the writer must give it again
    assert await spaces.put("acme", {object_hash(data): data}) == set()
    assert await spaces.objects("acme", [object_hash(data), object_hash(other)])
