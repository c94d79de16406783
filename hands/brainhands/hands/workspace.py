"""A tool's workspace on a Hands: its latest version written out in the attempt's working
directory before the tool runs (``materialise``), and what the tool left there read back as
the next version (``capture``), its new objects stored before the outcome that commits it.

Any Hands can do this for any session: versions and objects are in the store, and each
process keeps the objects it read or wrote lately (``ObjectCache``), so a Hands that ran the
last call on a workspace, or one like it, reads little or nothing to run the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from brainhands.hands.sandbox import CallSandbox, Sandboxes, Workdir
from brainhands.shared.store import WorkspaceAdvance, Workspaces, WorkspaceVersion
from brainhands.shared.tenancy import split_key
from brainhands.shared.tools import ToolSpec
from brainhands.shared.workspace_trees import (
    FileEntry,
    Manifest,
    build_trees,
    object_hash,
    read_manifest,
)

log = logging.getLogger("brainhands.hands.workspace")

CACHE_BYTES = 256 * 1024 * 1024


class ObjectCache:
    """Objects by ``(tenant, hash)`` this process read or wrote lately, up to ``max_bytes``;
    the least recently used leave first."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._objects: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._bytes = 0

    def get(self, tenant: str, object_hash: str) -> bytes | None:
        data = self._objects.get((tenant, object_hash))
        if data is not None:
            self._objects.move_to_end((tenant, object_hash))
        return data

    def put(self, tenant: str, object_hash: str, data: bytes) -> None:
        if len(data) > self.max_bytes or (tenant, object_hash) in self._objects:
            return
        self._objects[(tenant, object_hash)] = data
        self._bytes += len(data)
        while self._bytes > self.max_bytes:
            _, dropped = self._objects.popitem(last=False)
            self._bytes -= len(dropped)


@dataclass(frozen=True)
class Checkout:
    """A workspace's version as one attempt found it: what its capture compares with."""

    version: WorkspaceVersion
    manifest: Manifest
    known: frozenset[str]
    """The hashes of the version's objects, files and trees: stored already."""


class WorkspaceFiles:
    """How this Hands reads and writes workspaces: through ``workspaces`` in the store, and
    a cache of objects."""

    def __init__(self, workspaces: Workspaces, cache: ObjectCache | None = None) -> None:
        self.workspaces = workspaces
        self.cache = cache or ObjectCache()
        self._writers: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    @contextlib.asynccontextmanager
    async def writing(self, session_id: str, name: str) -> AsyncIterator[None]:
        """One writing call on the workspace at a time in this process: calls on one
        workspace that land on one Hands wait for each other instead of racing for its next
        version (calls on other Hands are told apart by the store: ``WorkspaceMoved``)."""
        key = (session_id, name)
        lock = self._writers.get(key)
        if lock is None:
            lock = self._writers[key] = asyncio.Lock()
        async with lock:
            yield

    async def objects(self, tenant: str, hashes: list[str]) -> dict[str, bytes]:
        """The tenant's objects of ``hashes``, from the cache where it has them."""
        found = {h: d for h in hashes if (d := self.cache.get(tenant, h)) is not None}
        wanted = [h for h in hashes if h not in found]
        if wanted:
            read = await self.workspaces.objects(tenant, wanted)
            for h, d in read.items():
                self.cache.put(tenant, h, d)
            found.update(read)
        return found

    async def materialise(
        self, session_id: str, name: str, directory: Path, owner: int | None = None
    ) -> Checkout:
        """Write the workspace's latest version into the empty ``directory`` (its files and
        directories owned by ``owner``, when given)."""
        tenant, _ = split_key(session_id)
        version = await self.workspaces.head(session_id, name)

        async def fetch(hashes: list[str]) -> dict[str, bytes]:
            return await self.objects(tenant, hashes)

        manifest = await read_manifest(version.root, fetch)
        contents = await self.objects(tenant, sorted({e.hash for e in manifest.values()}))
        await asyncio.to_thread(_write_files, directory, manifest, contents, owner)
        _, trees = build_trees(manifest)
        known = frozenset(trees) | {e.hash for e in manifest.values()}
        return Checkout(version, manifest, known)

    async def capture(self, checkout: Checkout, directory: Path) -> WorkspaceAdvance | None:
        """What the tool left in ``directory`` as the version after ``checkout``'s, its new
        objects stored; None when it changed nothing."""
        base = checkout.version
        manifest, contents = await asyncio.to_thread(_read_files, directory)
        if manifest == checkout.manifest:
            return None
        root, trees = build_trees(manifest)
        new = {h: d for h, d in {**contents, **trees}.items() if h not in checkout.known}
        tenant, _ = split_key(base.session_id)
        absent = await self.workspaces.missing(tenant, new)
        # Those it has already are touched: no collection takes them before the commit.
        gone = await self.workspaces.put(tenant, {h: new[h] for h in absent}, touch=new)
        if gone:  # collected since ``missing`` looked: written after all
            await self.workspaces.put(tenant, {h: new[h] for h in gone})
            absent |= gone
        for h in new:
            self.cache.put(tenant, h, new[h])
        log.info(
            "workspace captured",
            extra={
                "event": "workspace_captured",
                "session_id": base.session_id,
                "workspace": base.name,
                "base": base.version,
                "files": len(manifest),
                "objects_written": len(absent),
                "bytes_written": sum(len(new[h]) for h in absent),
            },
        )
        return WorkspaceAdvance(
            base.session_id,
            base.name,
            base.version,
            root,
            len(manifest),
            sum(e.size for e in manifest.values()),
        )


@contextlib.contextmanager
def attempt_workdir(
    sandboxes: Sandboxes, spec: ToolSpec, sandbox: CallSandbox | None
) -> Iterator[Workdir | None]:
    """Where an attempt of ``spec`` works: its sandbox's directory, or, for a tool with a
    workspace and no sandbox, a scratch directory of its own; None for neither."""
    if sandbox is not None:
        yield sandbox.workdir
    elif spec.workspace is not None:
        with sandboxes.scratch(sandboxed=False) as workdir:
            yield workdir
    else:
        yield None


def _write_files(
    directory: Path, manifest: Manifest, contents: dict[str, bytes], owner: int | None
) -> None:
    made = {directory}
    for path, entry in sorted(manifest.items()):
        target = directory / path
        for parent in reversed(target.relative_to(directory).parents[:-1]):
            where = directory / parent
            if where not in made:
                where.mkdir()
                made.add(where)
                if owner is not None:
                    os.chown(where, owner, owner)
        data = contents[entry.hash]
        if entry.kind == "l":
            os.symlink(data.decode(), target)
        else:
            target.write_bytes(data)
            target.chmod(entry.mode)
        if owner is not None:
            os.lchown(target, owner, owner)


def _read_files(directory: Path) -> tuple[Manifest, dict[str, bytes]]:
    """Every file and link under ``directory`` (no link followed), and their contents by hash.
    Anything else (a socket, a pipe, a device) is no part of a version."""
    manifest: Manifest = {}
    contents: dict[str, bytes] = {}
    pending = [("", directory)]
    while pending:
        prefix, where = pending.pop()
        with os.scandir(where) as entries:
            for entry in entries:
                path = f"{prefix}{entry.name}"
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    pending.append((f"{path}/", Path(entry.path)))
                    continue
                if stat.S_ISLNK(info.st_mode):
                    data, kind = os.readlink(entry.path).encode(), "l"
                elif stat.S_ISREG(info.st_mode):
                    data = Path(entry.path).read_bytes()
                    kind = "x" if info.st_mode & stat.S_IXUSR else "f"
                else:
                    log.warning(
                        "not kept in the workspace",
                        extra={"event": "workspace_skipped", "path": path},
                    )
                    continue
                content_hash = object_hash(data)
                contents[content_hash] = data
                manifest[path] = FileEntry(kind, content_hash, len(data))  # type: ignore[arg-type]
    return manifest, contents
