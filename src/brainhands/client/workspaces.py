"""Workspaces through a ``Client``: give a session's workspace its first version (from a
tarball, or another session's version), list a workspace's versions and which call made
each, compare two, and read a file or a tarball of one. The Hands write every later version
(``hands.workspace``); nothing here changes one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

from brainhands.shared.errors import InvalidRequest, NotFoundError
from brainhands.shared.store import Store, WorkspaceVersion
from brainhands.shared.tenancy import split_key
from brainhands.shared.workspace_trees import (
    BadTree,
    Manifest,
    changed_paths,
    check_name,
    from_tarball,
    read_manifest,
    to_tarball,
)


@dataclass(frozen=True)
class WorkspaceVersionView:
    """One version of a session's workspace: the call that made it (None: given by a client),
    how many files and bytes it holds, when it was committed (epoch seconds; None for
    version 0, the empty tree every workspace starts at)."""

    name: str
    version: int
    operation_id: str | None
    files: int
    bytes: int
    created_at: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _view(version: WorkspaceVersion) -> WorkspaceVersionView:
    return WorkspaceVersionView(
        version.name,
        version.version,
        version.operation_id,
        version.files,
        version.bytes,
        version.created_at,
    )


class _Client(Protocol):
    """What the acts need of the ``Client`` they belong to."""

    store: Store

    def key(self, session_id: str) -> str: ...


def _name(name: str) -> str:
    try:
        return check_name(name)
    except BadTree:
        raise InvalidRequest(f"{name!r} cannot name a workspace") from None


async def _files(store: Store, key: str, name: str, version: int) -> Manifest:
    found = await store.workspaces.version(key, _name(name), version)
    tenant, _ = split_key(key)
    return await read_manifest(found.root, lambda h: store.workspaces.objects(tenant, h))


class WorkspaceActs:
    """The workspace acts of a ``Client``."""

    async def create_workspace(
        self: _Client,
        session_id: str,
        name: str,
        *,
        tarball: bytes | None = None,
        from_session: str | None = None,
        from_version: int | None = None,
    ) -> WorkspaceVersionView:
        """Give the session's workspace ``name`` its first version: the files of
        ``tarball`` (a tar archive, compressed or not), or those of ``from_session``'s
        workspace of that name at ``from_version`` (its latest: None), a session of this
        client's tenant; neither: an empty tree. A tool declared with this workspace works
        on it from then on. ``InvalidRequest`` for a bad archive, ``ConflictError`` if the
        workspace has a version already."""
        key = self.key(session_id)
        name = _name(name)
        if tarball is not None and from_session is not None:
            raise InvalidRequest("a workspace is made from a tarball or a session, not both")
        contents: dict[str, bytes] = {}
        manifest: Manifest = {}
        if tarball is not None:
            try:
                manifest, contents = from_tarball(tarball)
            except BadTree as exc:
                raise InvalidRequest(str(exc)) from None
        elif from_session is not None:
            source = self.key(from_session)
            if split_key(source)[0] != split_key(key)[0]:
                raise InvalidRequest("a workspace is made from a session of its own tenant")
            head = await self.store.workspaces.head(source, name)
            version = head.version if from_version is None else from_version
            manifest = await _files(self.store, source, name, version)
        made = await self.store.workspaces.create(key, name, manifest, contents)
        return _view(made)

    async def workspaces(self: _Client, session_id: str) -> list[WorkspaceVersionView]:
        """The latest version of each of the session's workspaces, by name."""
        key = self.key(session_id)
        spaces = self.store.workspaces
        return [_view(await spaces.head(key, name)) for name in await spaces.names(key)]

    async def workspace_versions(
        self: _Client, session_id: str, name: str
    ) -> list[WorkspaceVersionView]:
        """Every version of the session's workspace ``name``, oldest first (none: it was
        never written)."""
        versions = await self.store.workspaces.versions(self.key(session_id), _name(name))
        return [_view(v) for v in versions]

    async def workspace_diff(
        self: _Client, session_id: str, name: str, before: int, after: int
    ) -> dict[str, str]:
        """What changed in the workspace from version ``before`` to ``after``: each path
        ``added``, ``removed`` or ``changed``, in path order."""
        key = self.key(session_id)
        return changed_paths(
            await _files(self.store, key, name, before), await _files(self.store, key, name, after)
        )

    async def workspace_file(
        self: _Client, session_id: str, name: str, version: int, path: str
    ) -> bytes:
        """The content of the file ``path`` at ``version`` (a link's: its target);
        ``NotFoundError`` if it holds none there."""
        key = self.key(session_id)
        entry = (await _files(self.store, key, name, version)).get(path)
        if entry is None:
            raise NotFoundError(f"workspace {name!r} has no file {path!r} at version {version}")
        tenant, _ = split_key(key)
        return (await self.store.workspaces.objects(tenant, [entry.hash]))[entry.hash]

    async def workspace_tarball(self: _Client, session_id: str, name: str, version: int) -> bytes:
        """The files of the workspace at ``version``, as a gzipped tar archive."""
        key = self.key(session_id)
        manifest = await _files(self.store, key, name, version)
        tenant, _ = split_key(key)
        contents = await self.store.workspaces.objects(
            tenant, {entry.hash for entry in manifest.values()}
        )
        return to_tarball(manifest, contents)
