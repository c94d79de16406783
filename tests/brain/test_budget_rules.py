"""The budget's rules as pure functions: what a model answer spent (read from OpenAI's and
Anthropic's ``usage``), when a run has reached its budget, and what a raise changes."""

from __future__ import annotations

import dataclasses

import pytest

from brainhands.brain.budget import Budget, Price, Spend, Usage, response_usage, resumed
from brainhands.brain.models.anthropic import parse_message
from brainhands.brain.models.openai import parse_chat_completion
from brainhands.brain.task import ReceivedSignal, TaskView, WaitSignal
from brainhands.shared.errors import InvalidRequest
from brainhands.shared.vocabulary import BUDGET_SIGNAL, BUDGET_STOP, budget_stop_ref
from tests.helpers.chat_server import completion, message, text


def test_usage_is_read_from_both_protocols_and_priced() -> None:
    openai = parse_chat_completion(completion({"role": "assistant", "content": "hi"}, usage=(7, 3)))
    cached = message(text("hi"))
    cached["usage"] = {
        "input_tokens": 5,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 20,
        "output_tokens": 9,
    }
    anthropic = parse_message(cached)
    price = Price(input=3.0, output=15.0)

    assert response_usage(openai, price) == Usage(7, 3, (7 * 3.0 + 3 * 15.0) / 1e6, 1, 0)
    assert response_usage(anthropic, None) == Usage(125, 9, 0.0, 1, 0)  # cached input counts
    silent = completion({"role": "assistant", "content": "x"})
    del silent["usage"]  # a server that reports none: no tokens a budget can count
    assert response_usage(parse_chat_completion(silent), price) == Usage(model_calls=1)


def test_usage_adds_and_writes_out_every_field() -> None:
    one = Usage(1, 2, 0.5, 1, 3, 1)
    assert one + Usage(10, 20, 0.25, 2, 30, 0) == Usage(11, 22, 0.75, 3, 33, 1)
    names = {f.name for f in dataclasses.fields(Usage)}
    assert one.to_json() == {**{n: getattr(one, n) for n in names}, "tokens": 3}
    assert Usage.from_json(one.to_json()) == one


def test_a_run_reaches_tokens_cost_and_seconds_once_spent_and_tool_calls_before_going_past() -> (
    None
):
    spend = Spend.begin(Budget(tokens=300, tool_calls=3, seconds=60), None, now=1000.0)
    assert spend.reached(1000.0) is None
    spent = spend.charged(Usage(input_tokens=180, output_tokens=119, tool_calls=2))
    assert spent.reached(1000.0) is None
    assert spent.reached(1000.0, dispatching=1) is None  # exactly 3 calls may run
    assert spent.reached(1000.0, dispatching=2) == "tool_calls"
    assert spent.reached(1060.0) == "seconds"
    assert spent.charged(Usage(output_tokens=1)).reached(1000.0) == "tokens"
    priced = Spend.begin(Budget(cost=0.5), None, now=0.0).charged(Usage(cost=0.5))
    assert priced.reached(0.0) == "cost"


def test_a_submission_lowers_the_agents_limits_and_never_lifts_them() -> None:
    spend = Spend.begin(Budget(tokens=300), {"tokens": 1000, "tool_calls": 2}, now=0.0)
    assert spend.limits == {"tokens": 300, "tool_calls": 2}
    with pytest.raises(InvalidRequest, match="non-negative"):
        Spend.begin(None, {"tokens": -1}, now=0.0)
    with pytest.raises(InvalidRequest, match="not \\['turns'\\]"):
        Spend.begin(None, {"turns": 3}, now=0.0)


def test_a_stop_records_why_and_a_raise_sets_the_limits_it_names() -> None:
    spend = Spend.begin(Budget(tokens=100, tool_calls=5), None, now=0.0).charged(
        Usage(input_tokens=100)
    )
    wait = spend.stop("tokens", then="resume", state={"turn": 2}, now=5.0)
    assert (wait.name, wait.then, wait.timeout) == (BUDGET_SIGNAL, "resume", None)
    assert wait.state[BUDGET_STOP]["limit"] == "tokens"
    assert wait.state[BUDGET_STOP]["used"]["tokens"] == 100
    carried = Spend.from_json(wait.state["spend"], agent=None, now=99.0)
    assert carried == spend  # what the stop committed is what resumes

    raise_ = ReceivedSignal(BUDGET_SIGNAL, {"budget": {"tokens": 500}}, "r1")
    raised = carried.raised(raise_)
    assert raised.limits == {"tokens": 500, "tool_calls": 5}
    assert raised.reached(5.0) is None
    assert carried.raised(ReceivedSignal(BUDGET_SIGNAL, "nonsense", "r2")) == carried


def test_a_raise_lifts_only_the_stop_it_names() -> None:
    spend = Spend.begin(Budget(tokens=100), None, now=0.0).charged(Usage(input_tokens=100))
    wait = spend.stop("tokens", then="resume", state={"turn": 2}, now=5.0)

    def received(payload: object) -> TaskView:
        signal = ReceivedSignal(BUDGET_SIGNAL, payload, "r1")
        return TaskView(
            "t1", "agent.session", 3, "s1", None, {}, wait.state, "resume", 1, [], signal
        )

    mine = {"budget": {"tokens": 500}, "stop": budget_stop_ref("t1", 5.0)}
    assert resumed(received(mine), spend, then="resume") == spend.raised(
        ReceivedSignal(BUDGET_SIGNAL, mine, "r1")
    )
    # Sent for an earlier stop of this task, for another task's, or naming none: used up,
    # and the same stop again.
    for stop in (budget_stop_ref("t1", 4.0), budget_stop_ref("t0", 5.0), None):
        stale = resumed(received({"budget": {"tokens": 500}, "stop": stop}), spend, then="resume")
        assert isinstance(stale, WaitSignal)
        assert (stale.name, stale.then, stale.state) == (BUDGET_SIGNAL, "resume", wait.state)
