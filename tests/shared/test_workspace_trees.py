"""How a workspace's version is written down: trees of content-addressed objects."""

from __future__ import annotations

import io
import tarfile

import pytest

from brainhands.shared.workspace_trees import (
    EMPTY_ROOT,
    EMPTY_TREE,
    BadTree,
    FileEntry,
    Manifest,
    build_trees,
    changed_paths,
    decode_tree,
    from_tarball,
    object_hash,
    read_manifest,
    to_tarball,
)


def entry(content: bytes, kind: str = "f") -> FileEntry:
    return FileEntry(kind, object_hash(content), len(content))  # type: ignore[arg-type]


def project(files: int = 40) -> Manifest:
    manifest = {f"pkg{i % 4}/mod{i}.py": entry(f"x = {i}\n".encode()) for i in range(files)}
    manifest["README.md"] = entry(b"# p\n")
    manifest["bin/run"] = entry(b"#!/bin/sh\n", "x")
    return manifest


async def test_a_version_reads_back_as_the_manifest_it_was_built_from() -> None:
    manifest = project()
    root, trees = build_trees(manifest)

    async def fetch(hashes: list[str]) -> dict[str, bytes]:
        return {h: trees[h] for h in hashes}

    assert await read_manifest(root, fetch) == manifest
    assert build_trees(dict(reversed(manifest.items())))[0] == root  # order does not matter
    assert build_trees({}) == (EMPTY_ROOT, {EMPTY_ROOT: EMPTY_TREE})
    top = {name: (kind, size) for name, kind, _, size in decode_tree(trees[root])}
    assert top["bin"] == ("d", 10) and top["README.md"] == ("f", 4)


def test_one_changed_file_makes_new_trees_only_on_its_path() -> None:
    before = project()
    after = {**before, "pkg1/mod5.py": entry(b"x = 'changed'\n")}
    _, old_trees = build_trees(before)
    new_root, new_trees = build_trees(after)

    made = set(new_trees) - set(old_trees)
    assert len(made) == 2  # pkg1's tree and the root: pkg0, pkg2, pkg3 and bin are shared
    assert new_root in made
    assert changed_paths(before, after) == {"pkg1/mod5.py": "changed"}
    del after["README.md"]
    after["docs/a.md"] = entry(b"a")
    assert changed_paths(before, after) == {
        "README.md": "removed",
        "docs/a.md": "added",
        "pkg1/mod5.py": "changed",
    }


@pytest.mark.parametrize("path", ["../escape", "a/../../b", "/abs", "a//b", "a/./b", "a\0b", ""])
def test_a_path_outside_or_ambiguous_is_refused(path: str) -> None:
    with pytest.raises(BadTree):
        build_trees({path: entry(b"x")})


def test_a_path_that_is_a_file_and_a_directory_is_refused() -> None:
    with pytest.raises(BadTree, match="'a' is a file and a directory"):
        build_trees({"a": entry(b"x"), "a/b": entry(b"y")})


def tarball(*members: tuple[str, bytes | None, int]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size, info.mode = len(data), mode
                archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_a_tarball_becomes_a_manifest_and_back() -> None:
    data = tarball(("./src", None, 0o755), ("./src/a.py", b"a", 0o644), ("./run.sh", b"#!", 0o755))
    manifest, contents = from_tarball(data)

    assert manifest == {"src/a.py": entry(b"a"), "run.sh": entry(b"#!", "x")}
    again, _ = from_tarball(to_tarball(manifest, contents))
    assert again == manifest


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (tarball(("../etc/passwd", b"x", 0o644)), "cannot name a file"),
        (b"not a tarball", "not a tar archive"),
    ],
)
def test_a_bad_tarball_is_refused_saying_why(data: bytes, said: str) -> None:
    with pytest.raises(BadTree, match=said):
        from_tarball(data)
