"""A LangGraph graph hosted on brainhands (``tests.helpers.hosted_graph``), run by real
Brain and Hands processes: its checkpoints committed in the session store with each pass,
its ToolNode's calls durable calls under their policies, proven at the tools' own ledgers,
under Brain and Hands kills too."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from brainhands.shared.errors import DecisionRefused
from brainhands.shared.store import SubmissionRecord
from tests.helpers import hosted_runs, ledgers
from tests.helpers.brains import BrainHarness, brain_deployment
from tests.helpers.polling import eventually
from tests.helpers.stores import StoreTarget
from tests.helpers.submitting import submit_input

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

AGENT = "tests.helpers.hosted_graph"


@pytest.fixture
async def deployment(
    store_target: StoreTarget,
    postgres_url: str,
    rabbitmq_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[BrainHarness]:
    """A deployment on each backend; the graph's ledgers in ``tmp_path`` (read here too)."""
    monkeypatch.setattr(ledgers, "LEDGERS", tmp_path)
    async with brain_deployment(
        postgres_url, rabbitmq_url, redis_url, namespace, tmp_path, target=store_target
    ) as harness:
        yield harness


def env(brains: BrainHarness) -> dict[str, str]:
    return {"HOSTED_LEDGERS": str(brains.tmp_path)}


def start_hands(brains: BrainHarness, victim: bool = False) -> subprocess.Popen[bytes]:
    """A Hands for the graph's pool; a ``victim`` dies as its first tool call returns."""
    return hosted_runs.start_hands(brains, "ledger", AGENT, victim=victim, **env(brains))


def start_brain(brains: BrainHarness, die_rule: str | None = None) -> subprocess.Popen[bytes]:
    return brains.start_brain(tasks=None, agents=AGENT, die_rule=die_rule, **env(brains))


async def submit(brains: BrainHarness, text: str, session: str = "s1") -> None:
    await submit_input(
        brains.store,
        brains.env.topology,
        session_id=session,
        request_id="r1",
        input={"agent": "ledger", "text": text},
        compat="v1",
    )


async def answer(brains: BrainHarness, session: str = "s1") -> dict[str, Any]:
    record: SubmissionRecord = await brains.answer(session_id=session, within=45)
    assert record.status == "answered", record.error
    output: dict[str, Any] = json.loads(record.answer["output"])
    return output


def model_runs(brains: BrainHarness) -> list[str]:
    """The inputs the model node was run with, in order (a node run again shows twice)."""
    return (brains.tmp_path / "requests.jsonl").read_text().splitlines()


async def checkpoints(brains: BrainHarness) -> list[dict[str, Any]]:
    """The committed checkpoints of the session's run: (id, parent, step) of each."""
    state = await brains.store.load("s1")
    return [
        {k: e.body[k] for k in ("id", "parent", "step")}
        for e in state.entries
        if e.kind == "hosted_checkpoint" and "step" in e.body
    ]


async def died(proc: subprocess.Popen[bytes], what: str) -> None:
    await eventually(lambda: proc.poll() is not None, within=30, what=what)
    assert proc.returncode == 9  # its own exit, at the kill point


async def test_a_graph_answers_its_tool_calls_made_on_hands_once_each(
    deployment: BrainHarness,
) -> None:
    brains = deployment
    start_hands(brains)
    start_brain(brains)
    await submit(brains, "plain")

    output = await answer(brains)

    assert output["seen"] == ["record: recorded apple", "transfer: transferred 5"]
    [(record_op, recorded)] = ledgers.effects("record")
    [(transfer_op, transferred)] = ledgers.effects("transfer")
    assert (recorded, transferred) == ("apple", "5")
    _, calls = await brains.store.queries.history("s1")
    assert {(c.tool, c.status, c.operation_id) for c in calls} == {
        ("ledger.record", "succeeded", record_op),
        ("ledger.transfer", "succeeded", transfer_op),
    }
    # One checkpoint per super-step, each after the one before (the input's is -1).
    committed = await checkpoints(brains)
    assert [c["step"] for c in committed] == [-1, 0, 1, 2, 3]
    assert [c["parent"] for c in committed[1:]] == [c["id"] for c in committed[:-1]]
    assert len(model_runs(brains)) == 2  # the model's two steps, each run once
    assert await brains.store.declarations.agents("v1") == {"ledger"}


@pytest.mark.chaos
@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_a_brain_killed_mid_graph_resumes_from_the_last_committed_checkpoint(
    deployment: BrainHarness,
) -> None:
    brains = deployment
    start_hands(brains)
    # Dies with the tools' step (answered from the outcomes) and the model's last step run,
    # before their checkpoints (the second commit that holds checkpoints, after the model's
    # first step's) are committed.
    brain = start_brain(brains, die_rule="before-entry:hosted_checkpoint#2")
    await submit(brains, "plain")
    await died(brain, "the Brain's death")
    before = await checkpoints(brains)
    start_brain(brains)

    output = await answer(brains)

    assert output["seen"] == ["record: recorded apple", "transfer: transferred 5"]
    # What was committed before the kill ends at the model's first step (1): the tools'
    # step and the model's last step were run again from it, the model with the same input.
    assert [c["step"] for c in before] == [-1, 0, 1]
    after = await checkpoints(brains)
    assert after[:3] == before and [c["step"] for c in after[3:]] == [2, 3]
    assert after[3]["parent"] == before[2]["id"]
    runs = model_runs(brains)
    assert len(runs) == 3 and runs[1] == runs[2]
    # The tools' calls were not made again: each tool made its effect once.
    assert len(ledgers.effects("record")) == len(ledgers.effects("transfer")) == 1


@pytest.mark.chaos
async def test_under_hands_kills_the_query_tool_acts_once_the_unsafe_at_most_once(
    deployment: BrainHarness,
) -> None:
    brains = deployment
    transfer_victim = start_hands(brains, victim=True)
    start_brain(brains)
    await submit(brains, "chaos")
    await died(transfer_victim, "the death of the Hands running transfer")
    # The next Hands finds transfer's started mark (uncertain), then dies running record.
    record_victim = start_hands(brains, victim=True)
    await died(record_victim, "the death of the Hands running record")
    start_hands(brains)

    output = await answer(brains)

    transfer, record = output["seen"]
    # The graph read the unsafe call's outcome as uncertain, and the query call's result.
    assert transfer.startswith("transfer: ") and '"status": "uncertain"' in transfer
    assert transfer.endswith("(error)")
    assert record == "record: recorded apple"
    assert len(ledgers.effects("transfer")) == 1  # never run again
    assert [what for _, what in ledgers.effects("record")] == ["apple"]  # asked, not re-run
    _, calls = await brains.store.queries.history("s1")
    assert sorted((c.tool, c.status) for c in calls) == [
        ("ledger.record", "succeeded"),
        ("ledger.transfer", "uncertain"),
    ]


@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_an_interrupt_is_an_approval_decided_once_and_the_graph_resumes_with_it(
    deployment: BrainHarness,
) -> None:
    brains = deployment
    start_hands(brains)
    start_brain(brains)
    await submit(brains, "approve", session="s1")
    await submit(brains, "approve", session="s2")

    async with brains.client() as ana, brains.client() as bo:

        async def both_asked() -> bool:
            return all([await ana.pending_approvals(s) for s in ("s1", "s2")])

        await eventually(both_asked, within=30, what="each session's ask")
        [yes], [no] = await ana.pending_approvals("s1"), await ana.pending_approvals("s2")
        [by_ana], [by_bo] = await asyncio.gather(
            ana.approve("s1", yes.approval_id, by="ana"),
            bo.approve("s1", yes.approval_id, by="bo"),
        )
        await ana.deny("s2", no.approval_id, by="ana", reason="too much")
        with pytest.raises(DecisionRefused, match="already denied by ana"):
            await bo.approve("s2", no.approval_id, by="bo")

    approved, denied = await answer(brains, "s1"), await answer(brains, "s2")

    assert sorted([by_ana.new, by_bo.new]) == [False, True]  # one of them counted
    assert (yes.tool, yes.agent, yes.arguments) == (
        "ledger.interrupt",
        "ledger",
        {"value": {"transfer": 7}},
    )
    assert approved["seen"] == ["transfer: transferred 7"]  # resumed, and went on
    [refusal] = denied["seen"]
    assert refusal.startswith("denied: ") and "too much" in refusal  # interrupt() returned it
    assert [what for _, what in ledgers.effects("transfer")] == ["7"]  # s1's, once
