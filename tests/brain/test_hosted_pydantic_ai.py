"""A Pydantic AI agent hosted on brainhands (``tests.helpers.hosted_agent``), run by real
Brain and Hands processes: its answer is the framework's validated output, its every tool
call a durable call under its policy, proven at the tools' own ledgers, under kills too."""

from __future__ import annotations

import json

import pytest

from brainhands import ALL
from tests.helpers import hosted_agent
from tests.helpers.brains import BrainHarness
from tests.helpers.hosted_runs import (
    HostedApp,
    contexts_around_a_kill,
    decide_two_calls,
    died,
    sent,
    waited_for_declarations,
)
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

AGENT = "tests.helpers.hosted_agent"


APP = HostedApp(AGENT, agent="books", pool="books")


async def test_a_run_answers_with_the_validated_output(hosted_deployment: BrainHarness) -> None:
    brains = hosted_deployment
    APP.start_brain(brains)
    await APP.submit(brains, "plain")
    # No Hands has declared the tools yet: the calls wait for them, the answer kept.
    await eventually(lambda: waited_for_declarations(brains), within=20, what="a wait")
    APP.start_hands(brains)

    answer = await brains.answer(within=45)

    assert answer.status == "answered"
    # The first output failed validation: Pydantic AI asked again, and validated the second.
    assert answer.status == "answered"
    output = answer.answer["output"]
    assert (output["summary"], answer.answer["turns"]) == ("plain", 3)
    # What the run was handed back: both tools' returns, then the output's validation error,
    # after which the model gave the output that validated.
    returns, [invalid] = output["seen"][:2], output["seen"][2:]
    assert returns == ['record: "recorded apple"', 'transfer: "transferred 5"']
    assert invalid.startswith("retry final_result:") and "Field required" in invalid
    [(record_op, recorded)] = hosted_agent.effects("record")
    [(transfer_op, transferred)] = hosted_agent.effects("transfer")
    assert (recorded, transferred) == ("apple", "5")
    _, calls = await brains.store.queries.history("s1")
    assert {(c.tool, c.status, c.operation_id) for c in calls} == {
        ("books.record", "succeeded", record_op),
        ("books.transfer", "succeeded", transfer_op),
    }
    async with brains.client() as client:
        assert (await client.session("s1")).usage["model_calls"] == 3
    # Declared as the Brain's agents are, so the API takes submissions for it.
    assert await brains.store.declarations.agents("v1") == {"books"}
    # Three requests, each sent once: the kill-free run asks nothing twice.
    assert len(sent(brains)) == 3


@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_a_model_retry_reaches_the_model_and_a_next_submission_is_a_run_of_its_own(
    hosted_deployment: BrainHarness,
) -> None:
    brains = hosted_deployment
    APP.start_hands(brains)
    APP.start_brain(brains)

    answer = await APP.ask(brains, "retry")
    # The session's next submission is a run of its own, its journal its own entries.
    await APP.submit(brains, "approve", request="r2")
    async with brains.client() as client:
        await eventually(
            lambda: client.pending_approvals("s1"), within=30, what="the second run's calls"
        )
        await client.deny("s1", ALL, reason="not today")
    second = await brains.answer(request_id="r2", within=30)

    assert answer.answer["output"]["seen"] == [
        'retry record: "name the item"',
        'record: "recorded pear"',
    ]
    # The call that asked for a retry made no effect; the one after it made one.
    assert [what for _, what in hosted_agent.effects("record")] == ["pear"]
    assert [json.loads(s.split(": ", 1)[1])["status"] for s in second.answer["output"]["seen"]] == [
        "denied",
        "denied",
    ]


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

    assert answer.status == "answered"
    [transfer, record] = answer.answer["output"]["seen"]
    # The agent read the unsafe call's outcome as uncertain, and the query call's result.
    assert transfer.startswith("transfer: ") and '"status": "uncertain"' in transfer
    assert record == 'record: "recorded apple"'
    assert len(hosted_agent.effects("transfer")) == 1  # never run again
    assert [what for _, what in hosted_agent.effects("record")] == ["apple"]  # asked, not re-run
    _, calls = await brains.store.queries.history("s1")
    assert sorted((c.tool, c.status) for c in calls) == [
        ("books.record", "succeeded"),
        ("books.transfer", "uncertain"),
    ]


@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_the_context_rebuilt_after_a_brain_kill_equals_the_context_without_it(
    hosted_deployment: BrainHarness,
) -> None:
    with_kill, without_kill = await contexts_around_a_kill(APP, hosted_deployment, "plain")

    # The first request was sent again after the kill, with the same context.
    assert with_kill[0] == with_kill[1]
    assert list(dict.fromkeys(with_kill)) == without_kill


async def test_an_approval_is_decided_once_and_a_denial_reaches_the_agent(
    hosted_deployment: BrainHarness,
) -> None:
    seen = await decide_two_calls(APP, hosted_deployment)

    assert seen.counted == [False, True]  # one of the racing approvals counted
    assert (seen.approved.tool, seen.approved.agent) == ("books.pay", "books")
    assert [what for _, what in hosted_agent.effects("pay")] == ["7"]  # once; 8 never ran
    paid, refused = seen.answer.answer["output"]["seen"]
    assert paid == 'pay: "paid 7"'
    assert refused.startswith("pay: ") and '"status": "denied"' in refused
    assert "too much" in refused


@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_a_run_over_its_tool_call_budget_dispatches_nothing_until_raised(
    hosted_deployment: BrainHarness,
) -> None:
    brains = hosted_deployment
    APP.start_hands(brains)
    APP.start_brain(brains)
    await APP.submit(brains, "plain", budget={"tool_calls": 1})

    async with brains.client() as client:

        async def stopped() -> bool:
            return (await client.session("s1")).budget_exhausted is not None

        await eventually(stopped, within=30, what="the stop at the budget")
        stop = (await client.session("s1")).budget_exhausted
        assert stop is not None and stop.budget == {"tool_calls": 1}
        assert hosted_agent.effects("record") == []  # its two calls wait, unsent
        await client.raise_budget("s1", tool_calls=2)
        record = await client.wait("s1", "r1", timeout=45)

    assert record.status == "answered", record.error
    assert [what for _, what in hosted_agent.effects("record")] == ["apple"]
    assert len(sent(brains)) == 3  # the answer held at the stop was not asked again
