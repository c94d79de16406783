"""What a workspace of many files costs a Hands: made, written out, read back, one file changed.

A tree of ``--files`` files (default 10,000) of ``--megabytes`` MiB in all (default 100, so
about 10 KiB each, random bytes), in ``--dirs`` directories (default 100), is made a
session's workspace (``store.workspaces.create``, from the files in memory, hashed
beforehand). Then, as a tool call on a Hands runs (``hands.worker``):

* ``materialise cold``: a fresh ``WorkspaceFiles`` with an empty ``ObjectCache`` writes the
  latest version into an empty directory: every object read from the store;
* ``materialise warm``: the same ``WorkspaceFiles`` again, into another empty directory: its
  cache holds every object, so only the head version is read;
* ``capture, no change``: the directory read back as it was written (None, nothing stored);
* ``capture, one file changed``: one file's content replaced by as many new bytes, read
  back: the new objects are stored. What that wrote to the store is counted in the
  ``workspace_object`` table before and after (rows and bytes of ``data``, for the tenant);
* ``commit (record_outcome)``: that version committed with a claimed call's outcome.

The warm materialise, both captures and the commit are repeated ``--repeats`` times (default
5), each on the version the one before committed, a different file changed each time; the
table gives the median, min and max of each step's wall time and the median of this
process's CPU time (user and system, its threads' included: SQLite's work and the files'
reads and writes are in it, the PostgreSQL server's work is not). The directories are
written under ``--scratch``, whose file system counts: on ext4 a file made within minutes
of many deletions (another run's, a test suite's) costs far more than on tmpfs.

The target: a one-file change writes that file and the trees on its path (here the root and
its directory, each listing ``--dirs`` or ``--files / --dirs`` entries), never the rest of
the tree.

    .venv/bin/python -m bench.workspace [--files N] [--megabytes M] [--dirs D]
        [--repeats R] [--backend all|postgresql|sqlite] [--scratch DIR] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from sqlalchemy import func, select

from bench._services import add_service_urls, drop_schemas, new_parser, open_store, run_names
from bench._stats import machine, print_table
from brainhands.hands.workspace import ObjectCache, WorkspaceFiles
from brainhands.shared.store import Store, schema
from brainhands.shared.workspace_trees import (
    FileEntry,
    Manifest,
    build_trees,
    decode_tree,
    object_hash,
)

T = TypeVar("T")

WORKSPACE = "repo"
TENANT = "bench"
SEED = 51

STEPS = (
    "create (store.workspaces.create)",
    "materialise cold (empty cache)",
    "materialise warm (cache filled)",
    "capture, no change",
    "capture, one file changed",
    "commit (record_outcome)",
)


@dataclass
class Tree:
    """The workspace's first version, in memory."""

    manifest: Manifest
    contents: dict[str, bytes]
    paths: list[str]
    file_size: int

    @property
    def total(self) -> int:
        return sum(e.size for e in self.manifest.values())


def make_tree(files: int, total_bytes: int, dirs: int) -> Tree:
    """``files`` files of random bytes, ``total_bytes`` in all, spread over ``dirs``."""
    rng = random.Random(SEED)
    size = max(1, total_bytes // files)
    manifest: Manifest = {}
    contents: dict[str, bytes] = {}
    paths = []
    for i in range(files):
        path = f"d{i % dirs:04d}/f{i:06d}.bin"
        data = rng.randbytes(size)
        content_hash = object_hash(data)
        contents[content_hash] = data
        manifest[path] = FileEntry("f", content_hash, size)
        paths.append(path)
    return Tree(manifest, contents, paths, size)


@dataclass
class Step:
    """One step's samples: wall and CPU seconds."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


@dataclass
class Written:
    """What one capture of a one-file change wrote to the store."""

    objects: int
    bytes: int
    file_bytes: int
    tree_bytes: int
    """The tree objects on the changed file's path (its directory's and the root's)."""


@dataclass
class Measured:
    backend: str
    steps: dict[str, Step] = field(default_factory=lambda: {s: Step() for s in STEPS})
    writes: list[Written] = field(default_factory=list)
    store_bytes: int = 0
    """What the tenant's objects hold in all once the first version is made."""


async def timed(step: Step, work: Awaitable[T]) -> T:
    """``work``, awaited, its wall and CPU time added to ``step``'s (a coroutine's body runs
    only once awaited: its making is not timed)."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = await work
    step.cpu.append(time.process_time() - cpu)
    step.wall.append(time.perf_counter() - wall)
    return out


async def stored(store: Store, tenant: str) -> tuple[int, int]:
    """The tenant's objects in the store: how many, and the bytes of their ``data``."""
    o = schema.workspace_object
    query = select(func.count(), func.sum(func.length(o.c.data))).where(o.c.tenant == tenant)
    async with store.backend.engine.connect() as conn:
        count, size = (await conn.execute(query)).one()
    return int(count), int(size or 0)


def path_trees(manifest: Manifest, path: str) -> int:
    """The bytes of the tree objects on ``path``'s way down from the root of ``manifest``."""
    tree_hash, trees = build_trees(manifest)
    size = 0
    for name in path.split("/")[:-1]:
        size += len(trees[tree_hash])
        tree_hash = next(h for n, _, h, _ in decode_tree(trees[tree_hash]) if n == name)
    return size + len(trees[tree_hash])


async def run(
    store: Store, backend: str, args: argparse.Namespace, tree: Tree, scratch: Path
) -> Measured:
    """The steps on ``store``, the directories written in ``scratch`` (removed by the caller
    at the end of the run: see ``main``)."""
    out = Measured(backend)
    steps = out.steps
    session_id = f"{TENANT}/ws-{uuid.uuid4().hex[:8]}"
    rng = random.Random(SEED + 1)
    here = scratch / backend
    here.mkdir()
    await timed(
        steps[STEPS[0]],
        store.workspaces.create(session_id, WORKSPACE, tree.manifest, tree.contents),
    )
    _, out.store_bytes = await stored(store, TENANT)
    print(f"  {backend}: created ({out.store_bytes / 2**20:.1f} MiB stored)", flush=True)

    cold_dir = here / "cold"
    cold_dir.mkdir()
    files = WorkspaceFiles(store.workspaces, ObjectCache())
    await timed(steps[STEPS[1]], files.materialise(session_id, WORKSPACE, cold_dir))
    print(f"  {backend}: materialised cold", flush=True)

    # A different file each time, spread over the directories.
    changed = rng.sample(tree.paths, args.repeats)
    for n, path in enumerate(changed):
        where = here / f"warm{n}"
        where.mkdir()
        checkout = await timed(steps[STEPS[2]], files.materialise(session_id, WORKSPACE, where))
        unchanged = await timed(steps[STEPS[3]], files.capture(checkout, where))
        if unchanged is not None:
            raise RuntimeError("a capture of an unchanged directory made a version")

        new = rng.randbytes(tree.file_size)
        (where / path).write_bytes(new)
        objects_before, bytes_before = await stored(store, TENANT)
        advance = await timed(steps[STEPS[4]], files.capture(checkout, where))
        objects_after, bytes_after = await stored(store, TENANT)
        if advance is None:
            raise RuntimeError("a capture of a changed directory made no version")
        manifest = {**checkout.manifest, path: FileEntry("f", object_hash(new), len(new))}
        out.writes.append(
            Written(
                objects_after - objects_before,
                bytes_after - bytes_before,
                len(new),
                path_trees(manifest, path),
            )
        )

        operation_id = f"bench-ws-{uuid.uuid4().hex[:12]}"
        intent = {
            "session_id": session_id,
            "task_id": f"task-{n}",
            "tool": "edit",
            "pool": "default",
            "arguments": {},
        }
        await store.ledger.claim(operation_id, 1, intent=intent)
        await timed(
            steps[STEPS[5]],
            store.ledger.record_outcome(
                operation_id,
                1,
                status="succeeded",
                result={"changed": path},
                session_id=session_id,
                workspace=advance,
            ),
        )
        head = await store.workspaces.head(session_id, WORKSPACE)
        if (head.version, head.root) != (checkout.version.version + 1, advance.root):
            raise RuntimeError(f"version {head.version} is not the one committed")
    print(f"  {backend}: {args.repeats} one-file change(s) committed", flush=True)
    return out


async def bench_postgres(args: argparse.Namespace, tree: Tree, scratch: Path) -> Measured:
    _, _, db_schema = run_names("workspace")
    print(f"PostgreSQL: schema {db_schema}", flush=True)
    try:
        store = await open_store(args.database_url, db_schema)
        try:
            return await run(store, "postgresql", args, tree, scratch)
        finally:
            await store.close()
    finally:
        await drop_schemas(args.database_url, db_schema)


async def bench_sqlite(args: argparse.Namespace, tree: Tree, scratch: Path) -> Measured:
    path = scratch / "store.db"
    print(f"SQLite: {path}", flush=True)
    store = await Store.open(f"sqlite+aiosqlite:///{path}", upgrade=True)
    try:
        return await run(store, "sqlite", args, tree, scratch)
    finally:
        await store.close()


def seconds(samples: Sequence[float]) -> str:
    return f"{statistics.median(samples):.3f}" if samples else "-"


def report(results: Sequence[Measured], tree: Tree) -> None:
    rows: list[list[object]] = []
    for result in results:
        for name, step in result.steps.items():
            rows.append(
                [
                    result.backend,
                    name,
                    len(step.wall),
                    seconds(step.wall),
                    f"{min(step.wall):.3f}",
                    f"{max(step.wall):.3f}",
                    seconds(step.cpu),
                ]
            )
    headers = ["backend", "step", "n", "median s", "min s", "max s", "CPU s (median)"]
    print()
    print_table(headers, rows, align="<<>>>>>")

    rows = []
    verdicts = []
    for result in results:
        w = result.writes
        objects = statistics.median(x.objects for x in w)
        written = statistics.median(x.bytes for x in w)
        trees = statistics.median(x.tree_bytes for x in w)
        expected = tree.file_size + trees
        rows.append(
            [
                result.backend,
                len(w),
                f"{objects:.0f}",
                f"{written:,.0f}",
                f"{tree.file_size:,}",
                f"{trees:,.0f}",
                f"{written / tree.file_size:.2f}x",
                f"{written / result.store_bytes:.4%}",
            ]
        )
        met = "MET" if written <= expected * 1.05 else "NOT MET"
        verdicts.append(
            f"{result.backend}: a one-file change wrote {written:,.0f} bytes, the file "
            f"({tree.file_size:,}) and the trees on its path ({trees:,.0f}) being "
            f"{expected:,.0f}; the tree holds {result.store_bytes:,} bytes: {met}"
        )
    headers = [
        "backend",
        "n",
        "objects written",
        "bytes written",
        "changed file bytes",
        "trees on path bytes",
        "written / file",
        "written / tree",
    ]
    print()
    print("One-file change, what its capture wrote (median):")
    print_table(headers, rows, align="<>>>>>>>")
    print()
    for verdict in verdicts:
        print(verdict)


def filesystem(path: Path) -> str:
    """The type of the file system ``path`` is on, from ``/proc/self/mounts`` (Linux)."""
    best, kind = "", "file system unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            mounted = len(fields) > 2 and path.resolve().is_relative_to(fields[1])
            if mounted and len(fields[1]) >= len(best):
                best, kind = fields[1], fields[2]
    return kind


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument("--files", type=int, default=10_000, help="files in the tree")
    parser.add_argument(
        "--megabytes", type=float, default=100.0, help="MiB of the files' contents in all"
    )
    parser.add_argument("--dirs", type=int, default=100, help="directories they are spread in")
    parser.add_argument(
        "--repeats", type=int, default=5, help="one-file changes (and warm steps) measured"
    )
    parser.add_argument(
        "--scratch",
        metavar="DIR",
        default=None,
        help="where the workspaces and the SQLite store are written (default: the system's "
        "temporary directory); its file system's cost of making files is part of every "
        "materialise",
    )
    add_service_urls(parser, "postgres")
    parser.add_argument(
        "--backend",
        choices=["all", "postgresql", "sqlite"],
        default="all",
        help="which backends to measure",
    )
    args = parser.parse_args(argv)
    if min(args.files, args.dirs, args.repeats) < 1 or args.megabytes <= 0:
        parser.error("--files, --dirs, --repeats and --megabytes must be positive")
    if args.repeats > args.files:
        parser.error("--repeats changes a different file each time: at most --files")
    return args


async def main(args: argparse.Namespace) -> None:
    print(f"workspace bench on {machine()}", flush=True)
    tree = make_tree(args.files, int(args.megabytes * 2**20), args.dirs)
    print(
        f"tree: {len(tree.manifest):,} files of {tree.file_size:,} bytes "
        f"({tree.total / 2**20:.1f} MiB) in {min(args.dirs, args.files)} directories",
        flush=True,
    )
    results: list[Measured] = []
    # Every directory is removed at the end only: on ext4 a file made within a minute or
    # more of many deletions costs far more (its inode allocator skips the recently deleted
    # inodes, one by one), and the run's own deletions would slow its later steps.
    with tempfile.TemporaryDirectory(prefix="brainhands-bench-workspace-", dir=args.scratch) as tmp:
        scratch = Path(tmp)
        print(f"scratch: {scratch} ({filesystem(scratch)})", flush=True)
        if args.backend in ("all", "postgresql"):
            results.append(await bench_postgres(args, tree, scratch))
        if args.backend in ("all", "sqlite"):
            results.append(await bench_sqlite(args, tree, scratch))
    report(results, tree)
    print(f"({machine()})")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parse_args()))
