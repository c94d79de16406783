"""How a workspace's version is written down: content-addressed objects, as git keeps them.

A version is its root tree's hash. A tree object lists one directory's entries, each a name,
a kind (``f`` a file, ``x`` an executable file, ``l`` a symbolic link, ``d`` a directory)
and the hash of its object: a file's content, a link's target, a directory's tree. An
object's hash is the SHA-256 of its bytes, so equal contents are stored once, and a change to
one file writes that file and the trees on its path, never the rest of the tree.

A version is read as a manifest: every file's path (``/``-separated, relative), kind, hash
and size. Directories are the paths' parents: an empty directory is not kept.
"""

from __future__ import annotations

import hashlib
import io
import json
import stat
import tarfile
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Literal

FileKind = Literal["f", "x", "l"]
"""A regular file, an executable one, a symbolic link (its content is its target)."""

EMPTY_TREE = b'{"entries":[]}'


def object_hash(data: bytes) -> str:
    """The hash an object is stored under."""
    return hashlib.sha256(data).hexdigest()


EMPTY_ROOT = object_hash(EMPTY_TREE)
"""The root of a workspace with no file: every workspace's version 0."""


class BadTree(ValueError):
    """A tree object, a path or an archive that no workspace may hold."""


@dataclass(frozen=True)
class FileEntry:
    """One file of a version."""

    kind: FileKind
    hash: str
    size: int

    @property
    def mode(self) -> int:
        """The permission bits it is written with."""
        return 0o755 if self.kind == "x" else 0o644


Manifest = dict[str, FileEntry]
"""Every file of a version, by path."""


def check_name(name: str) -> str:
    """``name`` when it may name an entry of a directory, else ``BadTree``."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise BadTree(f"{name!r} cannot name a file of a workspace")
    return name


def check_path(path: str) -> str:
    """``path`` when it may name a file of a workspace (relative, no ``.`` or ``..``)."""
    for part in path.split("/"):
        check_name(part)
    return path


def encode_tree(entries: Iterable[tuple[str, str, str, int]]) -> bytes:
    """A tree object of ``(name, kind, hash, size)`` entries, in one canonical form."""
    listed = sorted(entries)
    return json.dumps({"entries": [list(e) for e in listed]}, separators=(",", ":")).encode()


def decode_tree(data: bytes) -> list[tuple[str, str, str, int]]:
    """The entries of a tree object; ``BadTree`` if it is none."""
    try:
        entries = json.loads(data)["entries"]
        decoded = [(check_name(n), str(k), str(h), int(s)) for n, k, h, s in entries]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadTree(f"not a tree object: {exc}") from None
    for _, kind, _, _ in decoded:
        if kind not in ("f", "x", "l", "d"):
            raise BadTree(f"not a tree object: an entry of kind {kind!r}")
    return decoded


def build_trees(manifest: Manifest) -> tuple[str, dict[str, bytes]]:
    """The root hash of ``manifest`` and its tree objects by hash; ``BadTree`` for a bad
    path, or one that is both a file and a directory."""
    directories: dict[str, dict[str, tuple[str, str, int]]] = {"": {}}
    for path, entry in manifest.items():
        parts = check_path(path).split("/")
        for depth in range(1, len(parts)):
            directory = "/".join(parts[:depth])
            if directory in manifest:
                raise BadTree(f"{directory!r} is a file and a directory")
            directories.setdefault(directory, {})
        directories["/".join(parts[:-1])][parts[-1]] = (entry.kind, entry.hash, entry.size)
    objects: dict[str, bytes] = {}
    root = EMPTY_ROOT
    # The deepest first: each tree's hash goes into its parent's entries.
    for directory in sorted(directories, key=lambda d: d.count("/") + 1 if d else 0)[::-1]:
        entries = directories[directory]
        data = encode_tree((name, *entry) for name, entry in entries.items())
        tree_hash = object_hash(data)
        objects[tree_hash] = data
        if directory:
            parent, _, name = directory.rpartition("/")
            directories[parent][name] = ("d", tree_hash, sum(e[2] for e in entries.values()))
        else:
            root = tree_hash
    return root, objects


Fetch = Callable[[list[str]], Awaitable[dict[str, bytes]]]
"""Reads objects by hash (all of them, or ``KeyError``)."""


async def read_manifest(root: str, fetch: Fetch) -> Manifest:
    """The manifest of the version whose root is ``root``, reading its trees a level at a
    time through ``fetch``."""
    manifest: Manifest = {}
    level = {"": root}
    while level:
        found = await fetch(sorted(set(level.values())))
        below: dict[str, str] = {}
        for directory, tree_hash in level.items():
            for name, kind, child, size in decode_tree(found[tree_hash]):
                path = f"{directory}/{name}" if directory else name
                if kind == "d":
                    below[path] = child
                else:
                    manifest[path] = FileEntry(kind, child, size)  # type: ignore[arg-type]
        level = below
    return manifest


def changed_paths(before: Manifest, after: Manifest) -> dict[str, str]:
    """What changed from ``before`` to ``after``: each path ``added``, ``removed`` or
    ``changed``, in path order."""
    out = {}
    for path in sorted(before.keys() | after.keys()):
        if path not in after:
            out[path] = "removed"
        elif path not in before:
            out[path] = "added"
        elif before[path] != after[path]:
            out[path] = "changed"
    return out


def from_tarball(data: bytes) -> tuple[Manifest, dict[str, bytes]]:
    """The files of a tar archive (compressed or not) as a manifest and their contents by
    hash; ``BadTree`` for an archive that is none, or holds a path outside itself or a
    device. Directories are taken from the paths; hard links become copies."""
    manifest: Manifest = {}
    contents: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            members = archive.getmembers()
            for member in members:
                path = member.name.removeprefix("./").rstrip("/")
                if member.isdir() or path in ("", "."):
                    continue
                check_path(path)
                if member.issym():
                    content, kind = member.linkname.encode(), "l"
                elif member.isfile() or member.islnk():
                    extracted = archive.extractfile(member)
                    assert extracted is not None
                    content = extracted.read()
                    kind = "x" if member.mode & stat.S_IXUSR else "f"
                else:
                    raise BadTree(f"{path!r} is neither a file, a directory nor a link")
                content_hash = object_hash(content)
                contents[content_hash] = content
                manifest[path] = FileEntry(kind, content_hash, len(content))  # type: ignore[arg-type]
    except (tarfile.TarError, EOFError, KeyError) as exc:
        raise BadTree(f"not a tar archive this can read: {exc}") from None
    return manifest, contents


def to_tarball(manifest: Manifest, contents: dict[str, bytes]) -> bytes:
    """A gzipped tar archive of a version's files (``contents``: each file's by hash)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for path, entry in sorted(manifest.items()):
            content = contents[entry.hash]
            info = tarfile.TarInfo(path)
            if entry.kind == "l":
                info.type, info.linkname = tarfile.SYMTYPE, content.decode()
                archive.addfile(info)
            else:
                info.size, info.mode = len(content), entry.mode
                archive.addfile(info, io.BytesIO(content))
    return out.getvalue()
