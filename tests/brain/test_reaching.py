"""Reaching a running agent, end to end: approvals, signals and follow-up messages, with
real Brain and Hands processes, Brains killed at the decision or down while it falls due,
and the email service's ledger as the judge of what was sent."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from brainhands.client.approvals import ALL, PendingApproval
from brainhands.shared.errors import DecisionRefused, InvalidRequest
from brainhands.shared.vocabulary import decision_signal
from tests.helpers.agent_run import AgentRun, agent_run
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(150)]
__all__ = ["agent_run"]  # the fixture


async def pending(run: AgentRun, count: int) -> list[PendingApproval]:
    """Wait until the session has ``count`` calls waiting for approval; return them."""
    async with run.brains.client() as client:

        async def there() -> bool:
            return len(await client.pending_approvals("s1")) >= count

        await eventually(there, within=60, what=f"{count} call(s) waiting for approval")
        assert await client.sessions_needing_action() == ["s1"]
        return await client.pending_approvals("s1")


async def sent_to(run: AgentRun) -> list[str]:
    """Who the email service sent to, once per send it received (a repeat would show)."""
    sends = (await run.email.ledger())["sends"]
    return sorted(s["recipient"] for s in sends for _ in range(s["attempts"]))


def tool_results(run: AgentRun, request: int) -> list[dict[str, object]]:
    """The tool results the model was shown in its request number ``request``."""
    messages = json.loads(run.requests()[request])["messages"]
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]


async def test_a_brain_killed_right_after_the_approval_commits_runs_the_call_once(
    agent_run: AgentRun,
) -> None:
    """The Brain dies right after the commit that applies the decision (the tool task and
    its job in the outbox), before it publishes the job: the next Brain sends it, once."""
    victim = agent_run.start_brain(die_rule="after-inbox:")
    agent_run.start_hands()
    await agent_run.submit("guarded")
    waiting = await pending(agent_run, 2)
    assert sorted((a.tool, a.arguments["to"], a.agent) for a in waiting) == [
        ("send_safe", "ana@example.com", "guarded"),
        ("send_safe", "bo@example.com", "guarded"),
    ]
    assert await sent_to(agent_run) == []  # nothing is dispatched before a decision

    async with agent_run.brains.client() as client:
        decided = await client.approve("s1", ALL, by="ops@example.com", reason="checked")
    assert [(d.verdict, d.by, d.new) for d in decided] == [
        ("approved", "ops@example.com", True)
    ] * 2
    assert await asyncio.to_thread(victim.wait, 30) == 9
    agent_run.start_brain()

    record = await agent_run.brains.answer(within=60)

    assert record.answer == {"text": "Done what I was allowed to.", "turns": 2}
    assert await sent_to(agent_run) == ["ana@example.com", "bo@example.com"]
    assert [r["status"] for r in tool_results(agent_run, 1)] == ["succeeded", "succeeded"]
    assert (await agent_run.brains.store.status())["operations"] == 2


async def test_a_call_over_the_condition_waits_and_runs_once_with_the_approvers_edit(
    agent_run: AgentRun,
) -> None:
    """``send_invoice`` needs approval of an amount over 100: of the model's two calls, the
    one under it is sent at once, the other waits. The approver lowers its amount; the
    Brain dies right after the commit that applies that decision (the edited call and its
    job), before publishing the job. The next Brain sends it: the email service's ledger
    shows each invoice once, the edited one with the edited amount, and the original
    never."""
    victim = agent_run.start_brain(die_rule="after-inbox:")
    agent_run.start_hands()
    await agent_run.submit("invoicer")
    [waiting] = await pending(agent_run, 1)
    assert (waiting.tool, waiting.arguments) == (
        "send_invoice",
        {"to": "bo@example.com", "amount": 500},
    )
    assert waiting.reason == "the call meets the approval condition amount > 100"

    async def under_sent() -> bool:
        return await sent_to(agent_run) == ["ana@example.com"]

    await eventually(under_sent, within=30, what="the invoice under 100 sent, unapproved")
    async with agent_run.brains.client() as client:
        with pytest.raises(InvalidRequest, match=r"amount: \"lots\" is not of type \"integer\""):
            await client.approve(
                "s1", waiting.approval_id, arguments={"to": "bo", "amount": "lots"}
            )
        assert await client.pending_approvals("s1") == [waiting]  # the bad edit lost nothing
        edit = {"to": "bo@example.com", "amount": 250}
        [decided] = await client.approve("s1", waiting.approval_id, by="ops", arguments=edit)
    assert (decided.verdict, decided.arguments, decided.new) == ("approved", edit, True)
    assert await asyncio.to_thread(victim.wait, 30) == 9
    agent_run.start_brain()

    record = await agent_run.brains.answer(within=60)

    assert record.answer == {"text": "Invoices sent.", "turns": 2}
    sends = (await agent_run.email.ledger())["sends"]
    assert sorted((s["recipient"], s["subject"], s["attempts"]) for s in sends) == [
        ("ana@example.com", "invoice 50", 1),
        ("bo@example.com", "invoice 250", 1),
    ]
    assert (await agent_run.brains.store.status())["operations"] == 2
    under, edited = tool_results(agent_run, 1)
    assert under["status"] == edited["status"] == "succeeded"
    assert edited["arguments"] == edit
    assert edited["edited"] == (
        'ops approved the call with edited arguments: it ran with {"amount": 250, "to": '
        '"bo@example.com"}, not the arguments asked for'
    )
    # The decision keeps both versions and who made it.
    [decision] = await agent_run.brains.store.inbox.of_session("s1")
    payload = decision.body["payload"]
    assert (payload["arguments"], payload["original_arguments"]) == (edit, waiting.arguments)
    assert payload["principal"] and decision.applied_at is not None


async def test_two_approvals_at_once_dispatch_once_and_a_denial_reaches_the_model(
    agent_run: AgentRun,
) -> None:
    agent_run.start_brain()
    agent_run.start_hands()
    await agent_run.submit("guarded")
    first, second = sorted(await pending(agent_run, 2), key=lambda a: a.arguments["to"])

    async with agent_run.brains.client() as ana, agent_run.brains.client() as bo:
        [by_ana], [by_bo] = await asyncio.gather(
            ana.approve("s1", first.approval_id, by="ana"),
            bo.approve("s1", first.approval_id, by="bo"),
        )
        [denied] = await ana.deny("s1", second.approval_id, by="ana", reason="bo is on leave")
        with pytest.raises(DecisionRefused, match="already denied by ana"):
            await bo.approve("s1", second.approval_id, by="bo")
        [again] = await ana.deny(
            "s1", second.approval_id, by="ana", reason="twice", decision_id=denied.decision_id
        )

    assert sorted([by_ana.new, by_bo.new]) == [False, True]  # one of them counted
    assert by_ana.by == by_bo.by  # and both were told which
    assert (again.new, again.reason) == (False, "bo is on leave")  # the same decision: once
    record = await agent_run.brains.answer(within=60)
    assert record.answer == {"text": "Done what I was allowed to.", "turns": 2}
    assert await sent_to(agent_run) == ["ana@example.com"]  # the denied call never ran
    succeeded, refused = tool_results(agent_run, 1)
    assert succeeded["status"] == "succeeded"
    assert refused == {
        "status": "denied",
        "error": "call of 'send_safe' denied by ana: bo is on leave",
    }
    assert (await agent_run.brains.store.status())["operations"] == 1
    # Who decided, when and why is kept: in the inbox and in the approval's result.
    decisions = await agent_run.brains.store.inbox.of_session("s1")
    assert {r.key for r in decisions} == {
        decision_signal(first.approval_id),
        decision_signal(second.approval_id),
    }
    assert all(r.applied_at is not None for r in decisions)


async def test_an_expiry_due_while_every_brain_is_down_is_decided_once_when_one_returns(
    agent_run: AgentRun,
) -> None:
    """``send_gated`` is declared as needing approval; the agent's calls expire after 2 s."""
    brain = agent_run.start_brain(TEST_APPROVAL_EXPIRY="2")
    agent_run.start_hands()
    await agent_run.submit("gated")
    [waiting] = await pending(agent_run, 1)
    assert waiting.expires_at is not None
    brain.kill()
    await asyncio.to_thread(brain.wait, 10)
    await asyncio.sleep(max(0.0, waiting.expires_at - time.time()) + 1.0)

    agent_run.start_brain(TEST_APPROVAL_EXPIRY="2")
    record = await agent_run.brains.answer(within=60)

    assert record.answer == {"text": "I asked.", "turns": 2}
    assert tool_results(agent_run, 1) == [
        {"status": "denied", "error": "call of 'send_gated' denied by expiry: the approval expired"}
    ]
    assert await sent_to(agent_run) == []
    [decision] = [
        r
        for r in await agent_run.brains.store.inbox.of_session("s1")
        if r.key == decision_signal(waiting.approval_id)
    ]
    assert decision.body == {"payload": None, "timed_out": True} and decision.applied_at
    async with agent_run.brains.client() as client:
        with pytest.raises(DecisionRefused, match="already denied by expiry"):
            await client.approve("s1", waiting.approval_id, by="late-reviewer")


async def test_signals_sent_before_the_wait_and_while_the_brain_is_down_arrive_once(
    brains: BrainHarness,
) -> None:
    await brains.submit("listener", {"names": ["early", "late"]})  # no Brain runs yet
    async with brains.client() as client:
        assert (await client.signal("s1", "early", {"n": 1}, signal_id="e1")).created
        assert not (await client.signal("s1", "early", {"n": 9}, signal_id="e1")).created
    brain = brains.start_brain()

    async def waits_for_late() -> bool:
        return any(t.wait_signal == "late" for t in (await brains.store.load("s1")).open_tasks)

    await eventually(waits_for_late, within=30, what="the listener to wait for 'late'")
    brain.kill()
    await asyncio.to_thread(brain.wait, 10)
    async with brains.client() as client:
        assert (await client.signal("s1", "late", {"n": 2}, signal_id="l1")).created
    brains.start_brain()

    record = await brains.answer(within=60)

    assert record.answer == [
        {"name": "early", "payload": {"n": 1}, "signal_id": "e1", "timed_out": False},
        {"name": "late", "payload": {"n": 2}, "signal_id": "l1", "timed_out": False},
    ]
    inbox = await brains.store.inbox.of_session("s1")
    assert [(r.key, r.applied_at is not None) for r in inbox] == [("e1", True), ("l1", True)]


async def test_follow_ups_sent_while_a_tool_runs_join_the_loop_in_order_and_are_answered(
    agent_run: AgentRun,
) -> None:
    brains = agent_run.brains
    agent_run.start_brain()
    agent_run.start_hands()
    await agent_run.submit("patient")

    async def sending() -> bool:
        return len(await sent_to(agent_run)) == 1  # the send is in, its pause runs on

    await eventually(sending, within=60, what="the slow send to start")
    async with brains.client() as client:
        notes = [
            await client.submit("s1", f"note {n}", agent="patient", request_id=f"note-{n}")
            for n in (1, 2, 3)
        ]
        answers = [await handle.result(timeout=60) for handle in notes]

    first = await brains.answer(within=60)
    expected = {"text": "Sent, and read your three notes.", "turns": 2}
    assert first.answer == expected and answers == [expected] * 3
    tasks, _ = await brains.store.queries.history("s1")
    assert [t.kind for t in tasks if t.parent_id is None] == ["agent.session"]  # one loop
    second = json.loads(agent_run.requests()[1])["messages"]
    assert [m["role"] for m in second] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "user",
        "user",
    ]
    assert [m["content"] for m in second[-3:]] == ["note 1", "note 2", "note 3"]
    assert await sent_to(agent_run) == ["ana@example.com"]
