"""Tools that work in a session's workspace, served by real ``brainhands hands`` processes:
each success is the workspace's next version, committed with its outcome; a failure, a
reader or a killed worker leaves no change; any Hands continues from the store; calls on
one workspace are serialised by its version."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brainhands.shared.workspace_trees import read_manifest
from tests.helpers.harness import HandsHarness, pool_on_postgres
from tests.helpers.polling import eventually

TOOLS = ("--tools", "tests.helpers.workspace_tools")
SESSION = "s1"  # the harness's jobs' session

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(90),
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="needs bubblewrap: apt install bubblewrap"
    ),
]


@pytest.fixture
async def hands(
    request: pytest.FixtureRequest,
    postgres_url: str,
    rabbitmq_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
) -> AsyncIterator[HandsHarness]:
    """A pool's Hands on PostgreSQL; with ``indirect`` "in an object store", the workspace
    objects' bytes in an S3 object store (``BRAINHANDS_WORKSPACE_OBJECTS``)."""
    outside = None
    if getattr(request, "param", None) == "in an object store":
        outside = request.getfixturevalue("s3_objects")
    async with pool_on_postgres(
        postgres_url,
        rabbitmq_url,
        redis_url,
        namespace,
        tmp_path,
        pool="workspace",
        tools=TOOLS[1],
        workspace_objects=outside,
    ) as harness:
        yield harness


async def files(hands: HandsHarness, version: int | None = None) -> dict[str, bytes]:
    """The workspace's files at ``version`` (the latest: None), read from the store."""
    spaces = hands.store.workspaces
    at = (
        await spaces.head(SESSION, "repo")
        if version is None
        else await spaces.version(SESSION, "repo", version)
    )

    async def fetch(hashes: list[str]) -> dict[str, bytes]:
        return await spaces.objects("default", hashes)

    manifest = await read_manifest(at.root, fetch)
    contents = await fetch([e.hash for e in manifest.values()])
    return {path: contents[e.hash] for path, e in manifest.items()}


@pytest.mark.parametrize("hands", ["in rows", "in an object store"], indirect=True)
async def test_each_success_is_the_next_version_and_another_hands_continues_from_it(
    hands: HandsHarness,
) -> None:
    first = hands.start_worker()
    for line in ("one", "two"):
        job = hands.job("append_line", {"path": "notes/a.txt", "line": line})
        await hands.publish(job)
        assert (await hands.outcome(job.operation_id)).status == "succeeded"
    failing = hands.job("write_then_fail", {"path": "junk.txt", "line": "junk"})
    reading = hands.job("read_text", {"path": "notes/a.txt", "line": ""})
    for job in (failing, reading):
        await hands.publish(job)
    assert (await hands.outcome(failing.operation_id)).status == "failed"
    assert (await hands.outcome(reading.operation_id)).result == {"text": "one\ntwo\n"}
    first.kill()
    first.wait()

    hands.start_worker()  # a Hands that never saw the workspace
    sandboxed = hands.job(
        "shell_in_repo", {"script": "cat notes/a.txt | wc -l; echo three >> notes/a.txt"}
    )
    await hands.publish(sandboxed)
    done = await hands.outcome(sandboxed.operation_id)
    assert done.result == {"status": 0, "stdout": "2\n"}

    versions = await hands.store.workspaces.versions(SESSION, "repo")
    assert [v.version for v in versions] == [1, 2, 3]
    assert versions[2].operation_id == sandboxed.operation_id
    assert await files(hands) == {"notes/a.txt": b"one\ntwo\nthree\n"}
    assert await files(hands, 1) == {"notes/a.txt": b"one\n"}


async def test_a_hands_killed_mid_call_leaves_no_change_and_the_next_attempt_starts_clean(
    hands: HandsHarness, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    victim = hands.start_worker(TEST_MARKS=str(marks))
    job = hands.job("half_write", {"path": "config.toml", "line": "whole"})
    await hands.publish(job)
    await eventually(
        lambda: (marks / job.operation_id).exists(), within=30, what="the half-written file"
    )
    victim.kill()
    victim.wait()
    assert await hands.store.workspaces.versions(SESSION, "repo") == []

    hands.start_worker(TEST_MARKS=str(marks))
    done = await hands.outcome(job.operation_id, within=60)
    assert (done.status, done.result) == ("succeeded", {"attempt": 2})
    assert await files(hands) == {"config.toml": b"whole"}
    assert len(await hands.store.workspaces.versions(SESSION, "repo")) == 1


async def test_calls_on_one_workspace_across_hands_are_serialised_by_its_version(
    hands: HandsHarness,
) -> None:
    workers = [hands.start_worker(concurrency=1) for _ in range(2)]
    for worker in workers:  # both take jobs, one at a time: they race for each version
        await eventually(
            lambda w=worker: '"consuming"' in hands.log(w), within=30, what="a worker to consume"
        )
    jobs = [hands.job("append_line", {"path": "log", "line": f"line {i}"}) for i in range(8)]
    await asyncio.gather(*(hands.publish(job) for job in jobs))

    for job in jobs:
        assert (await hands.outcome(job.operation_id, within=60)).status == "succeeded"
    versions = await hands.store.workspaces.versions(SESSION, "repo")
    assert [v.version for v in versions] == list(range(1, 9))
    assert sorted(v.operation_id or "" for v in versions) == sorted(j.operation_id for j in jobs)
    lines = (await files(hands))["log"].decode().splitlines()
    assert sorted(lines) == sorted(f"line {i}" for i in range(8))
    # Each call ran on its predecessor's version: its answer counts the lines before it.
    answers = sorted([(await hands.ledger.get(j.operation_id)).result["lines"] for j in jobs])
    assert answers == list(range(1, 9))
    assert all('"workspace_captured"' in hands.log(w) for w in workers)  # both took turns
