"""The agent loop end to end: a scripted model, a Brain process, Hands processes, and the
email service as the judge of effects; Brains and Hands killed at the worst moments."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from brainhands.brain.decide import TOOL_KIND
from brainhands.shared.messages import ToolResult
from tests.helpers.agent_run import AgentRun, agent_run
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]
__all__ = ["agent_run"]  # the fixture


def assert_each_email_once(ledger: dict[str, object], *, safe: int, unsafe: int) -> None:
    sends = ledger["sends"]
    assert isinstance(sends, list) and len(sends) == safe
    assert len(ledger["unsafe_sends"]) == unsafe  # type: ignore[arg-type]


async def test_parallel_calls_then_one_more_then_the_answer(agent_run: AgentRun) -> None:
    agent_run.start_brain()
    agent_run.start_hands()
    agent_run.start_hands()

    record = await agent_run.ask("errand")

    assert record.status == "answered"
    assert record.answer == {"text": "All three emails are out.", "turns": 3}
    assert_each_email_once(await agent_run.email.ledger(), safe=3, unsafe=0)
    assert agent_run.turns_asked() == [0, 1, 2]  # each question asked once
    # Each turn's look for follow-ups found none: routine, so not logged.
    assert '"signal_received"' not in agent_run.brains.log(0)
    second = json.loads(agent_run.requests()[1])["messages"]
    tool_messages = [m for m in second if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_0_0", "call_0_1"]
    assert all(json.loads(m["content"])["status"] == "succeeded" for m in tool_messages)
    state = await agent_run.brains.store.load("s1")
    assert [e.kind for e in state.entries] == [
        "user",
        "model",
        "tool_result",
        "tool_result",
        "model",
        "tool_result",
        "model",
    ]


async def test_a_result_for_a_call_already_applied_costs_no_pass(agent_run: AgentRun) -> None:
    brains = agent_run.brains
    agent_run.start_brain()
    agent_run.start_hands()
    await eventually(lambda: '"consuming"' in brains.log(0), what="the Brain")
    assert (await agent_run.ask("errand")).status == "answered"
    tasks, _ = await brains.store.queries.history("s1")
    call = next(t for t in tasks if t.kind == TOOL_KIND)
    assert call.status == "terminal" and call.operation_id
    queue = brains.env.topology.results_queue("v1")

    def result(operation_id: str, task_id: str) -> ToolResult:
        return ToolResult(
            operation_id=operation_id,
            session_id="s1",
            task_id=task_id,
            compat="v1",
            status="succeeded",
        )

    def passes(n: int) -> int:
        return brains.log(n).count('"event": "advanced"')

    def skipped(n: int, operation_id: str) -> int:
        return sum(
            '"already_applied"' in line and operation_id in line
            for line in brains.log(n).splitlines()
        )

    # The Brain that applied the result remembers it. (Results that waited for the lease
    # while a pass applied them are skipped too: let those land before counting.)
    await asyncio.sleep(1.0)
    before, seen = passes(0), skipped(0, call.operation_id)
    await brains.env.broker.publish(result(call.operation_id, call.id), queue)
    await eventually(
        lambda: skipped(0, call.operation_id) == seen + 1, what="the duplicate to be skipped"
    )
    assert passes(0) == before
    # A Brain that never saw the session gets a pass: it reads the session anyway.
    brains.processes[0].send_signal(signal.SIGTERM)
    brains.processes[0].wait()
    fresh = len(brains.processes)
    agent_run.start_brain()
    await eventually(lambda: '"consuming"' in brains.log(fresh), what="the new Brain")
    await brains.env.broker.publish(result(call.operation_id, call.id), queue)
    await eventually(lambda: passes(fresh) == 1, what="a pass for an unknown session")
    # Now it knows the session, and the call is not waiting in it: it asks the store.
    other = next(t for t in tasks if t.kind == TOOL_KIND and t.id != call.id)
    await brains.env.broker.publish(result(other.operation_id or "", other.id), queue)
    await eventually(lambda: skipped(fresh, other.operation_id or "") == 1, what="the store")
    # A result whose task is not settled in the store gets a pass.
    await brains.env.broker.publish(result("op-unknown", "no-such-task"), queue)
    await eventually(lambda: passes(fresh) == 2, what="a pass for an unsettled call")
    assert skipped(fresh, "op-unknown") == 0


@pytest.mark.chaos
@pytest.mark.parametrize(
    ("rule", "asked"),
    [
        ("before-entry:model", [0, 0, 1, 2]),  # killed after asking, before the answer was saved
        ("after-entry:model", [0, 1, 2]),  # the raw response was committed: never asked again
        ("after-entry:tool_result", [0, 1, 2]),  # results applied, then the Brain died
    ],
)
async def test_a_brain_killed_mid_turn_is_replaced_without_asking_or_sending_twice(
    agent_run: AgentRun, rule: str, asked: list[int]
) -> None:
    victim = agent_run.start_brain(die_rule=rule)
    agent_run.start_hands()
    await agent_run.submit("errand")
    await eventually(lambda: victim.poll() is not None, within=60, what=f"the kill at {rule}")
    agent_run.start_brain()

    record = await agent_run.brains.answer(within=90)

    assert record.status == "answered", record.error
    assert agent_run.turns_asked() == asked
    assert_each_email_once(await agent_run.email.ledger(), safe=3, unsafe=0)
    if rule == "before-entry:model":
        first, again = agent_run.requests()[:2]
        assert first == again  # the question asked again is the very same request


@pytest.mark.chaos
async def test_a_hands_worker_killed_mid_tool_sends_nothing_twice(agent_run: AgentRun) -> None:
    agent_run.start_brain()
    hands = agent_run.start_hands()
    await agent_run.submit("errand")
    await eventually(lambda: agent_run.service_has_sends(1), within=60, what="a first send")
    hands.send_signal(signal.SIGKILL)  # mid-call: the tools pause after the send
    hands.wait()
    agent_run.start_hands()

    record = await agent_run.brains.answer(within=90)

    assert record.status == "answered", record.error
    assert agent_run.turns_asked() == [0, 1, 2]
    assert_each_email_once(await agent_run.email.ledger(), safe=3, unsafe=0)


@pytest.mark.chaos
async def test_the_context_rebuilt_after_a_restart_is_byte_for_byte_the_same(
    agent_run: AgentRun, tmp_path: Path
) -> None:
    calm_log, chaos_log = tmp_path / "calm.jsonl", tmp_path / "chaos.jsonl"
    agent_run.start_hands()
    calm = agent_run.start_brain(TEST_MODEL_LOG=str(calm_log))
    await agent_run.submit("echoer", session_id="calm")
    await agent_run.brains.answer(session_id="calm", within=60)
    calm.send_signal(signal.SIGTERM)
    calm.wait()

    victim = agent_run.start_brain(
        die_rule="after-entry:tool_result", TEST_MODEL_LOG=str(chaos_log)
    )
    await agent_run.submit("echoer", session_id="chaos")
    await eventually(lambda: victim.poll() is not None, within=60, what="the kill")
    agent_run.start_brain(TEST_MODEL_LOG=str(chaos_log))
    await agent_run.brains.answer(session_id="chaos", within=60)

    calm_requests = calm_log.read_text().splitlines()
    assert len(calm_requests) == 3
    assert chaos_log.read_text().splitlines() == calm_requests


async def test_a_tool_the_agent_was_not_granted_is_refused_visibly_and_never_sent(
    agent_run: AgentRun,
) -> None:
    agent_run.start_brain()
    agent_run.start_hands()
    await agent_run.submit("rogue")

    record = await agent_run.brains.answer(within=60)

    assert record.answer == {"text": "I was not allowed to do that.", "turns": 2}
    second = json.loads(agent_run.requests()[1])["messages"]
    [refused, sent] = [json.loads(m["content"]) for m in second if m["role"] == "tool"]
    assert refused == {
        "status": "refused",
        "error": "tool 'crash_worker' is not granted to agent 'rogue'",
    }
    assert sent["status"] == "succeeded"
    ops = (await agent_run.brains.store.status())["operations"]
    assert ops == 1  # only the granted call reached Hands (and no worker was crashed)


async def test_a_brain_that_cannot_import_the_hands_runs_tools_from_their_declarations(
    agent_run: AgentRun,
) -> None:
    """No tool module and no ``brainhands.hands`` in the Brain's process: the pool's Hands
    declared the tools, and the Brain routes the calls and shows the model their schemas."""
    agent_run.brains.start_brain(
        tasks=None, agents="tests.helpers.agents", without_hands=True, **agent_run.extra
    )
    agent_run.start_hands()

    record = await agent_run.ask("errand")

    assert record.status == "answered", record.error
    assert record.answer == {"text": "All three emails are out.", "turns": 3}
    assert_each_email_once(await agent_run.email.ledger(), safe=3, unsafe=0)
    first = json.loads(agent_run.requests()[0])
    assert first["tools"] == ["send_safe", "send_query", "send_unsafe"]
    assert "brainhands.hands" not in agent_run.brains.log(0)  # nothing tried to import it


async def test_a_granted_tool_no_pool_declared_is_left_out_and_refused_visibly(
    agent_run: AgentRun,
) -> None:
    brains = agent_run.brains
    agent_run.start_brain(BRAINHANDS_TOOL_DECLARATION_GRACE="2")
    agent_run.start_hands()
    hands_log = brains.tmp_path / "hands1.log"
    await eventually(lambda: '"consuming"' in hands_log.read_text(), what="the Hands")
    await agent_run.submit("hopeful")

    record = await brains.answer(within=60)

    assert record.answer == {"text": "One of my tools is not there.", "turns": 2}
    first, second = (json.loads(line) for line in agent_run.requests())
    assert first["tools"] == ["send_safe"]  # what the model is shown: declared tools only
    [refused, sent] = [json.loads(m["content"]) for m in second["messages"] if m["role"] == "tool"]
    assert refused == {
        "status": "refused",
        "error": "tool 'shred_files' is not declared by any Hands pool",
    }
    assert sent["status"] == "succeeded"
    assert (await brains.store.status())["operations"] == 1
    assert '"undeclared_tools"' in brains.log(0)  # the wait for its Hands is in the log


async def test_task_tool_arguments_its_model_rejects_are_refused_visibly_and_start_no_task(
    agent_run: AgentRun,
) -> None:
    agent_run.start_brain(tasks="tests.helpers.kinds")
    await agent_run.submit("delegator")

    record = await agent_run.brains.answer(within=60)

    assert record.answer == {"text": "Delegated what I could.", "turns": 2}
    second = json.loads(agent_run.requests()[1])["messages"]
    [refused, ran] = [json.loads(m["content"]) for m in second if m["role"] == "tool"]
    assert refused["status"] == "refused"
    assert refused["error"].startswith("invalid arguments for 'delegate': n: Input should be")
    assert ran == {"status": "succeeded", "result": 20}
    tasks, _ = await agent_run.brains.store.queries.history("s1")
    assert [t.input for t in tasks if t.kind == "child"] == [{"n": 2}]


async def test_an_unsafe_call_whose_response_is_lost_reaches_the_model_as_uncertain(
    agent_run: AgentRun,
) -> None:
    # The tool is written the ordinary way with urllib: the lost response raises
    # RemoteDisconnected (an OSError) after the service took the payment.
    await agent_run.email.set_faults(drop_next=1)
    agent_run.start_brain()
    agent_run.start_hands()

    record = await agent_run.ask("payer")

    assert record.status == "answered" and record.answer["turns"] == 2
    second = json.loads(agent_run.requests()[1])["messages"]
    [result] = [json.loads(m["content"]) for m in second if m["role"] == "tool"]
    assert result["status"] == "uncertain"
    assert result["error"]["type"] == "RemoteDisconnected"
    ledger = await agent_run.email.ledger()
    assert ledger["unsafe_calls"] == 1 and len(ledger["unsafe_sends"]) == 1  # never sent again
