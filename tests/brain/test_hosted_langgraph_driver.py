"""The LangGraph driver, pass by pass against a journal it is handed (no services: what
the hosted session would commit between passes is kept in memory here)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, StateGraph

from brainhands.brain.hosted.driver import Answered, Stepped, Stop, WantsTools
from brainhands.brain.hosted.journal import Journal, ToolRequest
from brainhands.brain.hosted.langgraph import LangGraphDriver
from brainhands.shared.hosted import HostedAgent, returned
from tests.helpers import hosted_graph
from tests.helpers import ledgers as ledger_files


@pytest.fixture(autouse=True)
def ledgers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger_files, "LEDGERS", tmp_path)


def model_runs(tmp_path: Path) -> list[Any]:
    return [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]


def steps(records: list[dict[str, Any]]) -> list[int]:
    """The super-steps whose checkpoints ``records`` hold."""
    return [r["step"] for r in records if "step" in r]


class Session:
    """What the hosted session commits between passes: each pass's checkpoints."""

    def __init__(self, prompt: str = "plain") -> None:
        self.prompt = prompt
        self.driver = LangGraphDriver(hosted_graph.hosted)
        self.committed: list[dict[str, Any]] = []
        self.outcomes: dict[str, dict[str, Any]] = {}

    async def step(self) -> tuple[Stop, Journal]:
        journal = Journal([], dict(self.outcomes), list(self.committed))
        stop = await self.driver.run(self.prompt, journal)
        self.committed += journal.fresh_checkpoints
        return stop, journal


async def test_a_pass_runs_one_step_of_the_graphs_nodes_with_the_tool_steps_around_it(
    tmp_path: Path,
) -> None:
    session = Session()

    stop, first = await session.step()
    # The model's step, then the tools' step, which wants its calls: none of them ran, and
    # the tools' step checkpoints nothing yet.
    assert stop == WantsTools(
        (
            ToolRequest("call-0-0", "ledger.record", {"item": "apple"}, False),
            ToolRequest("call-0-1", "ledger.transfer", {"amount": 5}, False),
        )
    )
    assert steps(first.fresh_checkpoints) == [-1, 0, 1]  # the input, the start, the model
    assert ledger_files.effects("record") == ledger_files.effects("transfer") == []
    session.outcomes["call-0-0"] = {"status": "succeeded", "result": returned("recorded apple")}
    session.outcomes["call-0-1"] = {"status": "uncertain", "error": "cut short"}

    stop, second = await session.step()

    # The tools' step, answered from the outcomes, and the model's step after it.
    assert isinstance(stop, Answered)
    assert json.loads(stop.output)["seen"] == [
        "record: recorded apple",
        'transfer: {"status": "uncertain", "error": "cut short"} (error)',
    ]
    assert steps(second.fresh_checkpoints) == [2, 3]
    # Every pass began at the last committed checkpoint: the model ran once per its step.
    assert len(model_runs(tmp_path)) == 2
    parent = {r["step"]: r["parent"] for r in session.committed if "step" in r}
    ids = {r["step"]: r["id"] for r in session.committed if "step" in r}
    assert [parent[s] == ids[s - 1] for s in (0, 1, 2, 3)] == [True] * 4


async def test_a_pass_decodes_only_the_checkpoints_it_resumes_from() -> None:
    session = Session()
    stop, _ = await session.step()
    for call in stop.requests if isinstance(stop, WantsTools) else ():
        session.outcomes[call.call_id] = {"status": "succeeded", "result": returned("done")}
    # The checkpoints before the last, spoiled: a pass that decoded them would fail.
    *older, last = [r for r in session.committed if "checkpoint" in r]
    for record in older:
        record["checkpoint"] = record["metadata"] = ["msgpack", base64.b64encode(b"\xc1").decode()]

    stop, second = await session.step()

    assert isinstance(stop, Answered)
    assert steps(second.fresh_checkpoints) == [2, 3]
    assert next(r for r in second.fresh_checkpoints if "step" in r)["parent"] == last["id"]


async def test_each_pass_applies_outcomes_runs_the_model_and_wants_the_next_calls(
    tmp_path: Path,
) -> None:
    session = Session("chaos")  # a call, then another, then the answer
    stop, _ = await session.step()
    [call] = stop.requests if isinstance(stop, WantsTools) else ()
    session.outcomes[call.call_id] = {"status": "succeeded", "result": returned("transferred")}

    stop, second = await session.step()

    # The tools' step, the model's second step, and the tools' step it leads to.
    assert stop == WantsTools((ToolRequest("call-1-0", "ledger.record", {"item": "apple"}, False),))
    assert steps(second.fresh_checkpoints) == [2, 3]
    session.outcomes["call-1-0"] = {"status": "succeeded", "result": returned("recorded")}
    stop, third = await session.step()
    assert isinstance(stop, Answered)
    assert steps(third.fresh_checkpoints) == [4, 5]
    assert len(model_runs(tmp_path)) == 3


def says(text: str) -> Callable[[hosted_graph.State], dict[str, list[AIMessage]]]:
    """A node of the graph's own: not a tool call, run in the Brain."""

    def node(state: hosted_graph.State) -> dict[str, list[AIMessage]]:
        return {"messages": [AIMessage(text)]}

    return node


async def test_a_pass_runs_one_step_of_the_graphs_own_nodes() -> None:
    builder = StateGraph(hosted_graph.State)
    builder.add_node("first", says("first"))
    builder.add_node("second", says("second"))
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    session = Session()
    session.driver = LangGraphDriver(HostedAgent("steps", "langgraph", builder.compile()))

    first, one = await session.step()
    second, two = await session.step()

    assert (first, steps(one.fresh_checkpoints)) == (Stepped(), [-1, 0, 1])
    assert isinstance(second, Answered) and steps(two.fresh_checkpoints) == [2]
    assert second.output == "second"


async def test_a_pass_whose_checkpoints_were_lost_runs_its_node_again(tmp_path: Path) -> None:
    session = Session()
    await session.step()
    session.committed.clear()  # its commit never happened (a Brain killed)

    stop, again = await session.step()

    assert isinstance(stop, WantsTools)
    assert steps(again.fresh_checkpoints) == [-1, 0, 1]
    runs = model_runs(tmp_path)
    assert len(runs) == 2 and runs[0] == runs[1]  # the model node ran again, on the same input


async def test_an_interrupt_waits_for_a_decision_and_resumes_with_it() -> None:
    approved, denied = Session("approve"), Session("approve")
    asks = []
    for session in (approved, denied):
        stop, paused = await session.step()
        [ask] = stop.requests if isinstance(stop, WantsTools) else ()
        assert (ask.tool, ask.arguments, ask.approval, ask.resume) == (
            "ledger.interrupt",
            {"value": {"transfer": 7}},
            True,
            True,
        )
        assert steps(paused.fresh_checkpoints) == [-1, 0]  # paused in the model's step
        asks.append(ask.call_id)
    approved.outcomes[asks[0]] = {"status": "succeeded", "result": {}}
    denied.outcomes[asks[1]] = {"status": "denied", "error": "denied by ana: too much"}

    # Resumed, the model's step runs again, and the tools' step after it wants its call.
    stop, resumed = await approved.step()
    refused, _ = await denied.step()

    assert stop == WantsTools((ToolRequest("call-0-0", "ledger.transfer", {"amount": 7}, False),))
    assert steps(resumed.fresh_checkpoints) == [1]  # the model step, resumed
    assert isinstance(refused, Answered)
    assert json.loads(refused.output)["seen"] == ["denied: denied by ana: too much"]
