"""An OpenAI Agents SDK agent hosted on brainhands (``tests.helpers.hosted_oai_agent``), run
by real Brain and Hands processes: its answer is the SDK's final output, its every tool call
a durable call under its policy, a handoff kept in the history, proven at the tools' own
ledgers, under kills too. One store backend (PostgreSQL): the Pydantic AI tests cover both."""

from __future__ import annotations

import json

import pytest

from brainhands.shared.vocabulary import HOSTED_MODEL_KIND
from tests.helpers import hosted_oai_agent
from tests.helpers.brains import BrainHarness
from tests.helpers.hosted_runs import (
    HostedApp,
    contexts_around_a_kill,
    decide_two_calls,
    died,
    sent,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(90),
    pytest.mark.parametrize("store_target", ["postgres"], indirect=True),
]

APP = HostedApp("tests.helpers.hosted_oai_agent", agent="desk", pool="desk")


async def answered_by(brains: BrainHarness, session: str = "s1") -> list[str]:
    """Which agent gave each of the session's model answers, in order."""
    async with brains.client() as client:
        entries = (await client.session(session)).entries
    return [e.body["raw"]["agent"] for e in entries if e.kind == HOSTED_MODEL_KIND]


async def test_a_run_answers_with_the_final_output_its_tools_called_durably(
    hosted_deployment: BrainHarness,
) -> None:
    brains = hosted_deployment
    APP.start_hands(brains)
    APP.start_brain(brains)

    answer = await APP.ask(brains, "plain")

    assert answer.status == "answered", answer.error
    assert answer.answer == {
        "output": {
            "summary": "plain",
            "by": "desk",
            "seen": ["record: recorded apple", "transfer: transferred 5"],
        },
        "turns": 2,
    }
    [(record_op, recorded)] = hosted_oai_agent.effects("record")
    [(transfer_op, transferred)] = hosted_oai_agent.effects("transfer")
    assert (recorded, transferred) == ("apple", "5")
    _, calls = await brains.store.queries.history("s1")
    assert {(c.tool, c.status, c.operation_id) for c in calls} == {
        ("desk.record", "succeeded", record_op),
        ("desk.transfer", "succeeded", transfer_op),
    }
    async with brains.client() as client:
        assert (await client.session("s1")).usage["model_calls"] == 2
    assert len(sent(brains)) == 2  # each request sent once
    assert hosted_oai_agent.checks() == ["plain"]  # kept, read at the second pass


async def test_a_handoff_is_kept_and_the_history_shows_which_agent_answered(
    hosted_deployment: BrainHarness,
) -> None:
    brains = hosted_deployment
    APP.start_hands(brains)
    APP.start_brain(brains)

    answer = await APP.ask(brains, "handoff")

    assert answer.status == "answered", answer.error
    output = answer.answer["output"]
    assert (output["by"], output["seen"][-1]) == ("clerk", "file: filed deed")
    assert await answered_by(brains) == ["desk", "clerk", "clerk"]
    assert [what for _, what in hosted_oai_agent.effects("file")] == ["deed"]
    # The clerk was asked with its own instructions, after the desk handed over.
    assert [instructions for instructions, _ in sent(brains)] == [
        "Keep the books.",
        "File papers.",
        "File papers.",
    ]


async def test_a_tripped_input_guardrail_fails_the_session(
    hosted_deployment: BrainHarness,
) -> None:
    brains = hosted_deployment
    APP.start_hands(brains)
    APP.start_brain(brains)

    answer = await APP.ask(brains, "forbidden")

    assert answer.status == "failed"
    assert "InputGuardrailTripwireTriggered" in json.dumps(answer.error)
    assert hosted_oai_agent.checks() == ["forbidden"]


async def test_a_needs_approval_call_is_decided_once_and_a_denial_reaches_the_agent(
    hosted_deployment: BrainHarness,
) -> None:
    seen = await decide_two_calls(APP, hosted_deployment)

    assert seen.counted == [False, True]  # one of the racing approvals counted
    assert (seen.approved.tool, seen.approved.agent) == ("desk.pay", "desk")
    assert [what for _, what in hosted_oai_agent.effects("pay")] == ["7"]  # once; 8 never ran
    paid, refused = seen.answer.answer["output"]["seen"]
    assert paid == "pay: paid 7"
    assert refused.startswith("pay: ") and '"status": "denied"' in refused
    assert "too much" in refused


@pytest.mark.chaos
async def test_under_brain_and_hands_kills_the_query_tool_acts_once_the_unsafe_at_most_once(
    hosted_deployment: BrainHarness,
) -> None:
    brains = hosted_deployment
    transfer_victim = APP.start_hands(brains, victim=True)
    # Dies right after committing the first answer with its call of ``transfer``.
    brain = APP.start_brain(brains, die_rule="after-entry:hosted_model")
    await APP.submit(brains, "chaos")
    await died(brain, "the Brain's death")
    APP.start_brain(brains)
    await died(transfer_victim, "the death of the Hands running transfer")
    # The next Hands finds transfer's started mark (uncertain), then dies running record.
    record_victim = APP.start_hands(brains, victim=True)
    await died(record_victim, "the death of the Hands running record")
    APP.start_hands(brains)

    answer = await brains.answer(within=45)

    assert answer.status == "answered", answer.error
    [transfer, record] = answer.answer["output"]["seen"]
    # The agent read the unsafe call's outcome as uncertain, and the query call's result.
    assert transfer.startswith("transfer: ") and '"status": "uncertain"' in transfer
    assert record == "record: recorded apple"
    assert len(hosted_oai_agent.effects("transfer")) == 1  # never run again
    # The guardrail's result was committed with the first answer: not run again.
    assert hosted_oai_agent.checks() == ["chaos"]
    assert [what for _, what in hosted_oai_agent.effects("record")] == ["apple"]  # not re-run
    _, calls = await brains.store.queries.history("s1")
    assert sorted((c.tool, c.status) for c in calls) == [
        ("desk.record", "succeeded"),
        ("desk.transfer", "uncertain"),
    ]


async def test_the_context_rebuilt_after_a_brain_kill_equals_the_context_without_it(
    hosted_deployment: BrainHarness,
) -> None:
    with_kill, without_kill = await contexts_around_a_kill(APP, hosted_deployment, "handoff")

    # The first request was sent again after the kill, with the same context.
    assert with_kill[0] == with_kill[1]
    assert list(dict.fromkeys(with_kill)) == without_kill
    # The guardrail ran in the pass the kill cut short, and once more: its result had not
    # been committed.
    assert hosted_oai_agent.checks() == ["handoff", "handoff", "handoff"]
