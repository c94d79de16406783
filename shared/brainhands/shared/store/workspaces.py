"""Where a session's workspaces live: their versions, and their tenant's objects.

Objects (files' contents and trees, ``shared.workspace_trees``) are written first, once per
hash for a tenant, and may be written by a call whose outcome never commits: no version names
them then. A version commits with the outcome of the call that made it (``advance``, inside
the ledger's transaction), so an interrupted call leaves no version behind.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.engine import Connection, Row

from brainhands.shared.errors import (
    ConfigurationError,
    ConflictError,
    NotFoundError,
    WorkspaceMoved,
)
from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend
from brainhands.shared.store.object_bytes import ObjectBytes
from brainhands.shared.tenancy import DEFAULT_TENANT, split_key
from brainhands.shared.workspace_trees import (
    EMPTY_ROOT,
    EMPTY_TREE,
    Manifest,
    build_trees,
    check_name,
    decode_tree,
)

_v = schema.workspace_version
_o = schema.workspace_object
_BATCH = 500
"""Objects read or looked for per statement."""


@dataclass(frozen=True)
class WorkspaceVersion:
    """One version of a session's workspace: its root tree, the call whose outcome committed
    it (None: given by a client, or version 0, the empty tree every workspace starts at), and
    how many files and bytes it holds."""

    session_id: str
    name: str
    version: int
    root: str
    operation_id: str | None
    files: int
    bytes: int
    created_at: float | None


@dataclass(frozen=True)
class WorkspaceAdvance:
    """The next version a call made of a workspace it ran on at ``base``: committed with the
    call's outcome, or not at all."""

    session_id: str
    name: str
    base: int
    root: str
    files: int
    bytes: int


def tenant_of(session_id: str) -> str:
    """Whose objects a session's workspaces use."""
    return split_key(session_id)[0]


def _version(row: Row[Any]) -> WorkspaceVersion:
    return WorkspaceVersion(
        row.session_id,
        row.name,
        row.version,
        row.root,
        row.operation_id,
        row.files,
        row.bytes,
        row.created_at,
    )


_HEAD = (
    select(_v)
    .where(_v.c.session_id == bindparam("session_id"), _v.c.name == bindparam("name"))
    .order_by(_v.c.version.desc())
    .limit(1)
)
_LATEST = select(func.max(_v.c.version)).where(
    _v.c.session_id == bindparam("session_id"), _v.c.name == bindparam("name")
)


class Workspaces:
    """Workspaces' versions and objects, reached as ``store.workspaces``."""

    def __init__(self, backend: Backend, external: ObjectBytes | None = None) -> None:
        self._backend = backend
        self._external = external
        """Where objects' bytes go, when not in their rows (``object_bytes``)."""

    async def head(self, session_id: str, name: str) -> WorkspaceVersion:
        """The workspace's latest version: version 0, the empty tree, if it has none."""
        async with self._backend.snapshot() as conn:
            row = (
                await conn.execute(_HEAD, {"session_id": session_id, "name": check_name(name)})
            ).one_or_none()
        if row is None:
            return WorkspaceVersion(session_id, name, 0, EMPTY_ROOT, None, 0, 0, None)
        return _version(row)

    async def version(self, session_id: str, name: str, version: int) -> WorkspaceVersion:
        """One version of the workspace, or ``NotFoundError``."""
        if version == 0:
            return WorkspaceVersion(session_id, name, 0, EMPTY_ROOT, None, 0, 0, None)
        query = select(_v).where(
            _v.c.session_id == session_id, _v.c.name == name, _v.c.version == version
        )
        async with self._backend.snapshot() as conn:
            row = (await conn.execute(query)).one_or_none()
        if row is None:
            raise NotFoundError(
                f"workspace {name!r} of session {session_id} has no version {version}"
            )
        return _version(row)

    async def versions(self, session_id: str, name: str) -> list[WorkspaceVersion]:
        """Every committed version of the workspace, oldest first."""
        query = (
            select(_v)
            .where(_v.c.session_id == session_id, _v.c.name == name)
            .order_by(_v.c.version)
        )
        async with self._backend.snapshot() as conn:
            return [_version(row) for row in await conn.execute(query)]

    async def names(self, session_id: str) -> list[str]:
        """The session's workspaces that have a version."""
        query = select(_v.c.name).where(_v.c.session_id == session_id).distinct()
        async with self._backend.snapshot() as conn:
            return sorted(row.name for row in await conn.execute(query))

    async def objects(self, tenant: str, hashes: Iterable[str]) -> dict[str, bytes]:
        """The tenant's objects of ``hashes``; ``NotFoundError`` names one it does not have."""
        asked = set(hashes)
        wanted = sorted(asked - {EMPTY_ROOT})
        found: dict[str, bytes] = {EMPTY_ROOT: EMPTY_TREE} if EMPTY_ROOT in asked else {}
        elsewhere: dict[str, str] = {}
        async with self._backend.snapshot() as conn:
            for i in range(0, len(wanted), _BATCH):
                query = select(_o.c.hash, _o.c.data, _o.c.location).where(
                    _o.c.tenant == tenant, _o.c.hash.in_(wanted[i : i + _BATCH])
                )
                for row in await conn.execute(query):
                    if row.location is None:
                        found[row.hash] = bytes(row.data)
                    else:
                        elsewhere[row.location] = row.hash
        if elsewhere:
            fetched = await self._outside().get(elsewhere)
            found.update((elsewhere[key], data) for key, data in fetched.items())
        lost = [h for h in wanted if h not in found]
        if lost:
            raise NotFoundError(f"the workspace object {lost[0]} of tenant {tenant!r} is gone")
        return found

    async def missing(self, tenant: str, hashes: Iterable[str]) -> set[str]:
        """Which of ``hashes`` the tenant has no object of."""
        wanted = sorted(set(hashes) - {EMPTY_ROOT})
        have: set[str] = set()
        async with self._backend.snapshot() as conn:
            for i in range(0, len(wanted), _BATCH):
                query = select(_o.c.hash).where(
                    _o.c.tenant == tenant, _o.c.hash.in_(wanted[i : i + _BATCH])
                )
                have.update(row.hash for row in await conn.execute(query))
        return set(wanted) - have

    async def put(
        self, tenant: str, objects: dict[str, bytes], *, touch: Iterable[str] = ()
    ) -> set[str]:
        """Keep ``objects`` (by hash) for the tenant, and mark them, and the ones of ``touch``
        it has already, as wanted now: a version about to commit names them, and no
        collection takes them for a while (``collect``). Returns those of ``touch`` it
        found gone (a collection took them since the caller looked): the caller gives them
        again, or its version cannot name them."""
        if not objects and not touch:
            return set()
        now = time.time()
        given = objects
        uploads: dict[str, str] = {}
        if self._external is None:
            rows = [
                {"tenant": tenant, "hash": h, "data": d, "location": None, "touched_at": now}
                for h, d in objects.items()
            ]
        else:  # only what the tenant lacks is uploaded, each under a key of its own
            new = await self.missing(tenant, objects)
            touch = {*touch, *(objects.keys() - new)}
            uploads = {h: self._external.new_key(tenant, h) for h in new}
            await self._external.put({uploads[h]: objects[h] for h in new})
            objects = {h: objects[h] for h in new}
            rows = [
                {"tenant": tenant, "hash": h, "data": None, "location": key, "touched_at": now}
                for h, key in uploads.items()
            ]
        insert = self._backend.insert(_o)
        statement = insert.on_conflict_do_update(
            index_elements=[_o.c.tenant, _o.c.hash], set_={"touched_at": insert.excluded.touched_at}
        )
        touched = sorted(set(touch) - objects.keys() - {EMPTY_ROOT})
        found: set[str] = set()
        async with self._backend.transaction() as conn:
            for i in range(0, len(rows), _BATCH):
                await conn.execute(statement, rows[i : i + _BATCH])
            for i in range(0, len(touched), _BATCH):
                batch = touched[i : i + _BATCH]
                marked = await conn.execute(
                    update(_o)
                    .where(_o.c.tenant == tenant, _o.c.hash.in_(batch))
                    .values(touched_at=now)
                    .returning(_o.c.hash)
                )
                found.update(row.hash for row in marked)
        if uploads:  # a writer that raced this one to a hash kept its own upload
            await self._drop_unnamed(tenant, uploads)
        gone = set(touched) - found
        again = {h: given[h] for h in gone if h in given}
        if again:  # collected since it was looked for: kept anew, fresh past any margin
            await self.put(tenant, again)
        return gone - again.keys()

    async def _drop_unnamed(self, tenant: str, uploads: dict[str, str]) -> None:
        """Delete the uploads (key by hash) that their rows do not name."""
        named: set[str] = set()
        hashes = sorted(uploads)
        async with self._backend.snapshot() as conn:
            for i in range(0, len(hashes), _BATCH):
                query = select(_o.c.location).where(
                    _o.c.tenant == tenant, _o.c.hash.in_(hashes[i : i + _BATCH])
                )
                named.update(row.location for row in await conn.execute(query))
        await self._outside().delete(set(uploads.values()) - named)

    def _outside(self) -> ObjectBytes:
        if self._external is None:
            raise ConfigurationError(
                "workspace objects are kept in an object store, and this process has none: "
                "set BRAINHANDS_WORKSPACE_OBJECTS as the deployment's workers have it"
            )
        return self._external

    async def forget(self, session_id: str) -> int:
        """Drop every version of the session's workspaces (the session is erased, or its
        retention ended); how many. Their objects go at the next ``collect`` unless another
        version names them."""
        async with self._backend.transaction() as conn:
            done = await conn.execute(delete(_v).where(_v.c.session_id == session_id))
        return int(done.rowcount)

    async def collect(self, tenant: str, *, untouched_since: float) -> int:
        """Delete the tenant's objects that no version names and no writer touched since
        ``untouched_since`` (those a version about to commit may name); how many. A call's
        objects are touched when it captures its changes and committed seconds later, so a
        margin of an hour before now leaves every running call's alone."""
        sessions = (
            ~_v.c.session_id.contains("/")
            if tenant == DEFAULT_TENANT
            else _v.c.session_id.startswith(f"{tenant}/")
        )
        async with self._backend.snapshot() as conn:
            roots = {row.root for row in await conn.execute(select(_v.c.root).where(sessions))}
            old = select(_o.c.hash).where(_o.c.tenant == tenant, _o.c.touched_at < untouched_since)
            candidates = {row.hash for row in await conn.execute(old)}
        if not candidates:
            return 0
        reachable = set(roots)
        level = sorted(roots)
        while level:
            below = []
            for tree in (await self.objects(tenant, level)).values():
                for _, kind, child, _ in decode_tree(tree):
                    if child not in reachable:
                        reachable.add(child)
                        if kind == "d":
                            below.append(child)
            level = sorted(set(below))
        unnamed = sorted(candidates - reachable)
        locations: list[str] = []
        async with self._backend.transaction() as conn:
            for i in range(0, len(unnamed), _BATCH):
                batch = unnamed[i : i + _BATCH]
                gone = await conn.execute(
                    delete(_o)
                    .where(
                        _o.c.tenant == tenant,
                        _o.c.hash.in_(batch),
                        _o.c.touched_at < untouched_since,
                    )
                    .returning(_o.c.location)
                )
                locations += [row.location for row in gone if row.location is not None]
        if locations:  # after the rows: a crash between leaves bytes no row names, not the reverse
            await self._outside().delete(locations)
        return len(unnamed)

    async def tenants(self) -> list[str]:
        """The tenants that have workspace objects."""
        async with self._backend.snapshot() as conn:
            query = select(_o.c.tenant).distinct()
            return sorted(row.tenant for row in await conn.execute(query))

    async def create(
        self, session_id: str, name: str, manifest: Manifest, contents: dict[str, bytes]
    ) -> WorkspaceVersion:
        """Give a workspace with no version its first: the files of ``manifest``, whose
        contents (by hash) are in ``contents`` or among the tenant's objects already (a
        version of another of its sessions). ``ConflictError`` if it has a version."""
        check_name(name)
        root, trees = build_trees(manifest)
        tenant = tenant_of(session_id)
        needed = {entry.hash for entry in manifest.values()} - contents.keys()
        lost = await self.missing(tenant, needed)
        if lost:
            raise NotFoundError(f"the content {min(lost)} is neither given nor kept")
        gone = await self.put(tenant, {**contents, **trees}, touch=needed)
        if gone:
            raise NotFoundError(f"the content {min(gone)} is neither given nor kept")
        first = WorkspaceAdvance(
            session_id, name, 0, root, len(manifest), sum(e.size for e in manifest.values())
        )
        try:
            await self._backend.write(lambda conn: advance(conn, first, None, time.time()))
        except WorkspaceMoved:
            raise ConflictError(f"workspace {name!r} of session {session_id} exists") from None
        return await self.head(session_id, name)


def advance(conn: Connection, step: WorkspaceAdvance, operation_id: str | None, now: float) -> None:
    """Commit ``step`` as the workspace's next version, made by ``operation_id``:
    ``WorkspaceMoved`` if the workspace is past its base already. Two writers racing for one
    version are told apart by the primary key: the loser's transaction fails with
    ``ConflictError``, which its writer reads as ``WorkspaceMoved``."""
    latest = conn.execute(_LATEST, {"session_id": step.session_id, "name": step.name}).scalar()
    if (latest or 0) != step.base:
        raise WorkspaceMoved(step.session_id, step.name, step.base)
    conn.execute(
        _v.insert(),
        {
            "session_id": step.session_id,
            "name": step.name,
            "version": step.base + 1,
            "root": step.root,
            "operation_id": operation_id,
            "files": step.files,
            "bytes": step.bytes,
            "created_at": now,
        },
    )
