"""Compaction is a durable step: a Brain SIGKILLed in the middle of it (the summary asked,
not yet committed) or right after it (the checkpoint committed, the smaller prompt not yet
sent) changes nothing the model sees. Real Brain processes; the scripted models' own logs
of the requests they answered are the judge, compared with an uninterrupted run's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from brainhands.brain.context import CHECKPOINT, estimate_tokens
from tests.brain.context_agents import BUDGET
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(240)]

TEXTS = [f"errand {n}: " + "fetch the parcel and sign for it " * 8 for n in range(8)]


def requests(log: Path) -> list[list[dict[str, Any]]]:
    return [json.loads(line)["messages"] for line in log.read_text().splitlines()]


async def converse(
    brains: BrainHarness, session_id: str, logs: str, die_rule: str | None = None
) -> subprocess.Popen[bytes] | None:
    """Say ``TEXTS`` to ``session_id`` one after another, each once the last is answered,
    with a Brain whose models log to ``logs``; with ``die_rule``, that Brain kills itself
    there and a plain one takes over. Returns the Brain that died, if one did."""
    tmp = brains.tmp_path
    env = {
        "TEST_CONTEXT_DIR": str(tmp),
        "TEST_MODEL_LOG": str(tmp / f"{logs}.jsonl"),
        "TEST_SUMMARY_LOG": str(tmp / f"{logs}-summary.jsonl"),
    }
    agents = "tests.brain.context_agents"
    first = brains.start_brain(tasks=None, agents=agents, die_rule=die_rule, **env)
    victim, current = (first if die_rule else None), first

    async def answered(request_id: str) -> bool:
        nonlocal current
        record = await brains.store.submissions.get(session_id, request_id)
        if record.status not in ("queued", "running"):
            assert record.status == "answered", record.error
            return True
        if current.poll() is not None:  # the victim died: a Brain that does not takes over
            assert current is victim, brains.log(len(brains.processes) - 1)
            current = brains.start_brain(tasks=None, agents=agents, **env)
        return False

    async with brains.client() as client:
        for n, text in enumerate(TEXTS):
            await client.submit(session_id, text, agent="compacting", request_id=f"r{n}")
            await eventually(lambda r=f"r{n}": answered(r), within=90, what=f"r{n} answered")
    current.kill()
    current.wait()
    return victim


@pytest.mark.parametrize("rule", ["before-entry:checkpoint", "after-entry:checkpoint"])
async def test_a_kill_in_compaction_changes_nothing_the_model_sees(
    brains: BrainHarness, rule: str
) -> None:
    tmp = brains.tmp_path
    (tmp / "main.json").write_text(json.dumps({"turns": [{"text": "noted"}]}))
    (tmp / "summary.json").write_text(json.dumps({"turns": [{"text": "Errands so far."}]}))

    await converse(brains, "calm", "calm")
    victim = await converse(brains, "killed", "killed", die_rule=rule)

    assert victim is not None and victim.returncode == 9  # it died at the rule, by itself
    calm, killed = requests(tmp / "calm.jsonl"), requests(tmp / "killed.jsonl")
    assert killed == calm
    assert len(calm) == len(TEXTS)
    assert max(estimate_tokens(m, []) for m in calm) <= BUDGET
    summaries = requests(tmp / "calm-summary.jsonl")
    asked_again = requests(tmp / "killed-summary.jsonl")
    assert summaries, "the run never compacted"
    # Killed before the summary was committed, it is asked again (and only it); killed
    # after, never again.
    extra = 1 if rule.startswith("before") else 0
    assert len(asked_again) == len(summaries) + extra
    assert asked_again[0] == summaries[0]
    # The same checkpoints, and the entries they summarise still there to read.
    entries = {s: (await brains.store.load(s)).entries for s in ("calm", "killed")}
    # A model entry names its request by its task's id, which is the session's own; and a
    # request phase entered again after the kill counts its call resent, as it may have gone
    # out (here the model's log shows it had not: that is the count's known excess).
    bodies = {s: [(e.kind, as_seen(e.body)) for e in entries[s]] for s in entries}
    assert bodies["killed"] == bodies["calm"]
    resent = {
        s: sum(e.body["usage"]["resent"] for e in entries[s] if e.kind == "model") for s in entries
    }
    assert resent["calm"] == 0 and resent["killed"] <= 1
    assert sum(kind == CHECKPOINT for kind, _ in bodies["calm"]) == len(summaries)
    assert [b["text"] for k, b in bodies["killed"] if k == "user"] == TEXTS


def as_seen(body: Any) -> Any:
    """An entry's body but its request's record and usage (what the model is not shown)."""
    if not isinstance(body, dict):
        return body
    return {k: v for k, v in body.items() if k not in ("request", "usage")}
