"""The coder example (``brainhands.examples.coder``) in real Brain and Hands processes, on
both store backends: it fixes its project in its workspace, testing it in a sandbox. Under
two Hands SIGKILLs (one after its test run returned, one after its edit was captured and
its contents stored, each before the outcome committed) and a Brain SIGKILL, the final
workspace is byte-identical to a run with no kill, and no version holds a half-done edit."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brainhands.examples.coder.project import FAULTY, FILES, FIXED, tarball
from brainhands.shared.tenancy import split_key
from brainhands.shared.workspace_trees import FileEntry, build_trees, object_hash, read_manifest
from tests.helpers import hosted_runs
from tests.helpers.brains import BrainHarness, brain_deployment
from tests.helpers.hosted_runs import died
from tests.helpers.stores import StoreTarget
from tests.helpers.submitting import submit_input

pytestmark = [
    pytest.mark.integration,
    pytest.mark.chaos,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="needs bubblewrap: apt install bubblewrap"
    ),
]

AGENTS, TOOLS = "brainhands.examples.coder.agent", "brainhands.examples.coder.tools"


@pytest.fixture
async def brains(
    store_target: StoreTarget,
    postgres_url: str,
    rabbitmq_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
) -> AsyncIterator[BrainHarness]:
    async with brain_deployment(
        postgres_url, rabbitmq_url, redis_url, namespace, tmp_path, target=store_target
    ) as harness:
        yield harness


def start_hands(brains: BrainHarness, *, victim: bool = False) -> subprocess.Popen[bytes]:
    return hosted_runs.start_hands(brains, "coder", TOOLS, victim=victim)


async def ask(brains: BrainHarness, session: str) -> None:
    """Give ``session`` the project, and ask the coder to fix it."""
    async with brains.client() as client:
        await client.create_workspace(session, "project", tarball=tarball())
    await submit_input(
        brains.store,
        brains.env.topology,
        session_id=session,
        request_id="r1",
        input={"agent": "coder", "text": "Fix the failing tests."},
        compat="v1",
    )


async def files_of(brains: BrainHarness, session: str, root: str) -> dict[str, bytes]:
    tenant, _ = split_key(session)
    spaces = brains.store.workspaces

    async def fetch(hashes: list[str]) -> dict[str, bytes]:
        return await spaces.objects(tenant, hashes)

    manifest = await read_manifest(root, fetch)
    contents = await fetch([e.hash for e in manifest.values()])
    return {path: contents[e.hash] for path, e in manifest.items()}


async def test_the_coder_fixes_its_project_and_kills_leave_the_same_files(
    brains: BrainHarness,
) -> None:
    # A run with no kill.
    calm_hands = start_hands(brains)
    calm_brain = brains.start_brain(tasks=None, agents=AGENTS)
    await ask(brains, "calm")
    calm = await brains.answer(session_id="calm", within=90)
    assert calm.status == "answered", calm.error
    assert "The tests pass" in calm.answer["text"] and "+    return a + b" in calm.answer["text"]
    for proc in (calm_hands, calm_brain):
        proc.kill()
        proc.wait()

    # A run under kills: the first Hands dies as the test run returns; the Brain dies right
    # after committing the tests' failed result; a Hands dies as the edit returns, its new
    # contents stored, its version not committed.
    first_victim = start_hands(brains, victim=True)
    brain = brains.start_brain(tasks=None, agents=AGENTS, die_rule="after-entry:tool_result")
    await ask(brains, "storm")
    await died(first_victim, "the death of the Hands running the tests")
    tests_rerun = start_hands(brains)
    await died(brain, "the Brain's death after the tests' result")
    tests_rerun.kill()
    tests_rerun.wait()
    edit_victim = start_hands(brains, victim=True)
    brains.start_brain(tasks=None, agents=AGENTS)
    await died(edit_victim, "the death of the Hands running the edit")
    start_hands(brains)
    storm = await brains.answer(session_id="storm", within=90)

    assert storm.status == "answered", storm.error
    assert storm.answer["text"] == calm.answer["text"]
    spaces = brains.store.workspaces
    calm_head, storm_head = (
        await spaces.head("calm", "project"),
        await spaces.head("storm", "project"),
    )
    assert storm_head.root == calm_head.root  # byte-identical trees: the same root hash
    fixed = {**FILES, FAULTY: FIXED}
    manifest = {p: FileEntry("f", object_hash(t.encode()), len(t)) for p, t in fixed.items()}
    assert storm_head.root == build_trees(manifest)[0]
    # Version 1 was given; version 2 is the edit's, committed once, whole.
    versions = await spaces.versions("storm", "project")
    assert [v.version for v in versions] == [1, 2]
    _, calls = await brains.store.queries.history("storm")
    [edit] = [c for c in calls if c.tool == "write_file"]
    assert versions[1].operation_id == edit.operation_id
    for version in versions:
        text = (await files_of(brains, "storm", version.root))[FAULTY].decode()
        assert text in (FILES[FAULTY], FIXED)
    tests = [c for c in calls if c.tool == "run_tests"]
    assert [c.status for c in tests] == ["succeeded", "succeeded"]
    assert max(c.interruptions for c in tests) == 1  # the first run, cut short once
