"""An AgentScope agent hosted on brainhands (``tests.helpers.hosted_as_agent``), run by real
Brain and Hands processes: its answer is the text of AgentScope's final reply, its every
tool call a durable call under its policy, a confirmation AgentScope asks for a brainhands
approval, proven at the tools' own ledgers, under kills too. One store backend (PostgreSQL):
the Pydantic AI tests cover both."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from brainhands import PendingApproval
from brainhands.shared.errors import DecisionRefused
from tests.helpers import hosted_as_agent
from tests.helpers.brains import BrainHarness
from tests.helpers.hosted_runs import HostedApp, contexts_around_a_kill, died, sent
from tests.helpers.polling import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(90),
    pytest.mark.parametrize("store_target", ["postgres"], indirect=True),
]

APP = HostedApp("tests.helpers.hosted_as_agent", agent="till", pool="till")


def seen(answer: Any) -> list[str]:
    """What the agent said it was handed back, from its final text."""
    return list(json.loads(answer.answer["output"])["seen"])


async def test_a_run_answers_with_the_reply_its_tools_called_durably(
    hosted_deployment: BrainHarness,
) -> None:
    brains = hosted_deployment
    APP.start_hands(brains)
    APP.start_brain(brains)

    answer = await APP.ask(brains, "plain")

    assert answer.status == "answered", answer.error
    assert seen(answer) == ["record: success: recorded apple", "transfer: success: transferred 5"]
    assert answer.answer["turns"] == 2
    [(record_op, recorded)] = hosted_as_agent.effects("record")
    [(transfer_op, transferred)] = hosted_as_agent.effects("transfer")
    assert (recorded, transferred) == ("apple", "5")
    _, calls = await brains.store.queries.history("s1")
    assert {(c.tool, c.status, c.operation_id) for c in calls} == {
        ("till.record", "succeeded", record_op),
        ("till.transfer", "succeeded", transfer_op),
    }
    async with brains.client() as client:
        usage = (await client.session("s1")).usage
    assert (usage["model_calls"], usage["tokens"]) == (2, 30)  # the script's 10 + 5 a call
    assert len(sent(brains)) == 2  # each request sent once


async def test_a_confirmation_agentscope_asks_is_an_approval_decided_once(
    hosted_deployment: BrainHarness,
) -> None:
    """AgentScope asks to confirm one ``pay`` at a time (the second is held while the first
    waits): two clients approve the first at once, one of them counts; the second is denied,
    and a later approval of it refused."""
    brains = hosted_deployment
    APP.start_hands(brains)
    APP.start_brain(brains)
    await APP.submit(brains, "approve")
    async with brains.client() as ana, brains.client() as bo:

        async def waiting(amount: int) -> PendingApproval:
            async def pending() -> list[PendingApproval]:
                return [
                    a
                    for a in await ana.pending_approvals("s1")
                    if a.arguments == {"amount": amount}
                ]

            async def there() -> bool:
                return bool(await pending())

            await eventually(there, within=30, what=f"pay {amount} waiting for approval")
            [found] = await pending()
            return found

        seven = await waiting(7)
        [by_ana], [by_bo] = await asyncio.gather(
            ana.approve("s1", seven.approval_id, by="ana"),
            bo.approve("s1", seven.approval_id, by="bo"),
        )
        eight = await waiting(8)
        await ana.deny("s1", eight.approval_id, by="ana", reason="too much")
        with pytest.raises(DecisionRefused, match="already denied by ana"):
            await bo.approve("s1", eight.approval_id, by="bo")
    answer = await brains.answer(within=45)

    assert answer.status == "answered", answer.error
    assert sorted([by_ana.new, by_bo.new]) == [False, True]
    assert (seven.tool, seven.agent) == ("till.pay", "till")
    assert [what for _, what in hosted_as_agent.effects("pay")] == ["7"]  # once; 8 never ran
    # The denial is AgentScope's own, as the agent alone would read it.
    assert seen(answer) == [
        'pay: denied: <system-reminder>The execution of tool "pay" is denied by user!'
        "</system-reminder>",
        "pay: success: paid 7",
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

    assert answer.status == "answered", answer.error
    [transfer, record] = seen(answer)
    # The agent read the unsafe call's outcome as uncertain, and the query call's result.
    assert transfer.startswith("transfer: error: ") and '"status": "uncertain"' in transfer
    assert record == "record: success: recorded apple"
    assert len(hosted_as_agent.effects("transfer")) == 1  # never run again
    assert [what for _, what in hosted_as_agent.effects("record")] == ["apple"]  # not re-run
    _, calls = await brains.store.queries.history("s1")
    assert sorted((c.tool, c.status) for c in calls) == [
        ("till.record", "succeeded"),
        ("till.transfer", "uncertain"),
    ]


async def test_the_context_rebuilt_after_a_brain_kill_equals_the_context_without_it(
    hosted_deployment: BrainHarness,
) -> None:
    with_kill, without_kill = await contexts_around_a_kill(APP, hosted_deployment, "chaos")

    # The first request was sent again after the kill, with the same context (the clock
    # AgentScope injects masked: it is the time of each request).
    assert with_kill[0] == with_kill[1]
    assert list(dict.fromkeys(with_kill)) == without_kill
    assert len(without_kill) == 3
