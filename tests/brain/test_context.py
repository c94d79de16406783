"""An agent's context policy, in-process against real stores: a long session's prompts stay
under its budget, the summaries are committed as checkpoint entries before they are used,
and the original entries stay readable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from brainhands.brain.agent import Agent, AgentRegistry
from brainhands.brain.context import (
    CHECKPOINT,
    SUMMARY_PREFIX,
    ContextPolicy,
    build_messages,
    context_window,
    default_policy,
    estimate_tokens,
)
from brainhands.brain.models.scripted import ScriptedModel
from brainhands.client.budgets import budget_stop_of, raise_budget
from brainhands.client.views import session_view
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.store import Store
from tests.brain.agent_passes import BilledModel, run_until, says, submit, tool_call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BUDGET = 1000


def script(path: Path, *turns: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"turns": list(turns)}))
    return path


def requests(log: Path) -> list[list[dict[str, Any]]]:
    """The messages of every request a scripted model answered, in order."""
    return [json.loads(line)["messages"] for line in log.read_text().splitlines()]


def chatty(tmp_path: Path, log: Path, policy: ContextPolicy) -> AgentRegistry:
    """An agent that notes whatever it is told, with ``policy``, its requests in ``log``."""
    agents = AgentRegistry()
    model = ScriptedModel(script(tmp_path / "s.json", {"text": "noted"}), log_path=log)
    agents.add(Agent(name="chatty", system="You note errands.", model=model, context=policy))
    return agents


async def say(store: Store, agents: AgentRegistry, n: int, text: str) -> dict[str, Any]:
    """Submit ``text`` to session s1 and run Brain passes (each claiming the session, as a
    worker does) until it is answered."""
    await submit(store, "s1", f"r{n}", {"agent": "chatty", "text": text})

    async def ended() -> bool:
        return (await store.submissions.get("s1", f"r{n}")).status in ("answered", "failed")

    await run_until(store, agents, "s1", ended)
    record = await store.submissions.get("s1", f"r{n}")
    assert record.status == "answered", record.error
    assert isinstance(record.answer, dict)
    return record.answer


async def test_a_300_turn_session_stays_under_its_prompt_budget(
    store: Store, tmp_path: Path
) -> None:
    main_log, summary_log = tmp_path / "model.jsonl", tmp_path / "summary.jsonl"
    policy = ContextPolicy(
        max_prompt_tokens=BUDGET,
        summary_model=ScriptedModel(
            script(tmp_path / "summary.json", {"text": "The user sent errands; all noted."}),
            log_path=summary_log,
        ),
    )
    agents = chatty(tmp_path, main_log, policy)

    for n in range(300):
        answer = await say(store, agents, n, f"errand {n}: " + "fetch the parcel " * 10)
        assert answer["text"] == "noted"

    asked = requests(main_log)
    assert len(asked) == 300
    sizes = [estimate_tokens(messages, []) for messages in asked]
    assert max(sizes) <= BUDGET, max(sizes)
    # Each request ends with the turn's own message, after the summary of what came before.
    for n, messages in enumerate(asked):
        assert messages[-1]["content"].startswith(f"errand {n}: ")
    summaries = requests(summary_log)
    assert len(summaries) >= 20
    assert max(estimate_tokens(m, []) for m in summaries) <= BUDGET
    later = [m for m in asked if len(m) > 1 and m[1]["content"].startswith(SUMMARY_PREFIX)]
    assert len(later) > 250  # compacted from the first few turns on
    # The original entries stay readable: every user message, every answer, and the
    # checkpoints made of them.
    every = (await store.load("s1")).entries
    said = [e.body["text"] for e in every if e.kind == "user"]
    assert said == [f"errand {n}: " + "fetch the parcel " * 10 for n in range(300)]
    checkpoints = [e for e in every if e.kind == CHECKPOINT]
    assert len(checkpoints) == len(summaries)
    # A Brain reads only the context: from the latest checkpoint on, and rebuilds from
    # there what it would rebuild from every entry.
    claimed = (await store.claim_session("s1", (await store.load("s1")).session.fence + 1)).state
    assert claimed.entries[0] == checkpoints[-1]
    assert len(claimed.entries) < 30
    assert build_messages("x", claimed.entries) == build_messages("x", every)


async def test_a_compaction_function_of_the_agent_writes_the_summary(
    store: Store, tmp_path: Path
) -> None:
    seen: list[list[dict[str, Any]]] = []

    async def compact(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return f"{len(messages)} messages before"

    log = tmp_path / "model.jsonl"
    agents = chatty(
        tmp_path, log, ContextPolicy(max_prompt_tokens=300, keep_tokens=100, compact=compact)
    )
    for n in range(6):
        await say(store, agents, n, f"errand {n}: " + "x" * 200)

    asked = requests(log)
    assert seen, "never compacted"
    assert max(estimate_tokens(m, []) for m in asked) <= 300
    # The summary replaces what it summarised; the turn's own message is kept.
    last = asked[-1]
    summary = f"{SUMMARY_PREFIX}{len(seen[-1])} messages before"
    assert last[1] == {"role": "user", "content": summary}
    assert last[-1]["content"].startswith("errand 5: ")
    # The summarised messages are the older ones, never a tool result split from its call.
    assert all(m[0]["role"] != "tool" for m in seen)


async def test_a_summary_a_model_writes_counts_in_the_sessions_usage_and_the_runs_budget(
    store: Store,
) -> None:
    summarising = BilledModel(says("The user sent errands; all noted."), usage=(400, 100))

    def answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
        """Noted; but the first request of a compacted context asks for a tool (refused:
        not granted), so that its run has a next turn, where its budget is checked."""
        compacted = messages[1]["content"].startswith(SUMMARY_PREFIX)
        if compacted and messages[-1]["role"] == "user":
            return tool_call("note", "call_1")
        return {"role": "assistant", "content": "noted"}

    model = BilledModel(answer, usage=(10, 5))
    policy = ContextPolicy(max_prompt_tokens=300, keep_tokens=100, summary_model=summarising)
    agents = AgentRegistry()
    agents.add(Agent(name="chatty", system="You note errands.", model=model, context=policy))
    budget = {"tokens": 100}  # each run's: its answers bill 15 each, a summary 500

    async def stopped() -> bool:
        return budget_stop_of((await store.load("s1")).open_tasks) is not None

    for n in range(10):
        text = f"errand {n}: " + "x" * 200
        await submit(store, "s1", f"r{n}", {"agent": "chatty", "text": text, "budget": budget})

        async def ended(n: int = n) -> bool:
            status = (await store.submissions.get("s1", f"r{n}")).status
            return status in ("answered", "failed") or await stopped()

        await run_until(store, agents, "s1", ended)
        if await stopped():
            break
    else:
        raise AssertionError("no run stopped at its budget")
    # The run that compacted stopped before its second turn: its summary and its answer.
    assert len(summarising.asked) == 1
    view = session_view(await store.detail("s1"))
    stop = view.budget_exhausted
    assert stop is not None and stop.limit == "tokens"
    assert stop.used["tokens"] == 500 + 15 and stop.used["model_calls"] == 2
    checkpoints = [e for e in view.entries if e.kind == CHECKPOINT]
    assert [c.body["usage"]["tokens"] for c in checkpoints] == [500]
    answers = [e for e in view.entries if e.kind == "model"]
    assert view.usage["tokens"] == 15 * len(answers) + 500
    assert view.usage["input_tokens"] == 10 * len(answers) + 400
    assert view.usage["model_calls"] == len(answers) + 1

    await raise_budget(store, "s1", {"tokens": 1000}, None, "operator")

    async def answered() -> bool:
        return (await store.submissions.get("s1", f"r{n}")).status == "answered"

    await run_until(store, agents, "s1", answered)
    view = session_view(await store.detail("s1"))
    assert view.usage["model_calls"] == len(model.asked) + len(summarising.asked)


def test_a_policy_keeps_less_than_its_budget() -> None:
    with pytest.raises(ConfigurationError):
        ContextPolicy(max_prompt_tokens=100, keep_tokens=100)
    with pytest.raises(ConfigurationError):
        ContextPolicy(max_prompt_tokens=0)
    assert ContextPolicy(max_prompt_tokens=100).kept == 50


async def test_a_request_phase_that_raised_before_its_call_counts_no_call_resent(
    store: Store,
) -> None:
    # The phase fails (not the model: a bug, a store blip) and runs again: it is entered a
    # second time, but no holder was lost, so its one call went out once.
    raised: list[int] = []

    def answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
        if not raised:
            raised.append(1)
            raise RuntimeError("a blip before the call")
        return {"role": "assistant", "content": "noted"}

    agents = AgentRegistry()
    agents.add(Agent(name="chatty", system="s", model=BilledModel(answer, usage=(10, 2))))
    await say(store, agents, 0, "note this")
    [model] = [e.body for e in (await store.load("s1")).entries if e.kind == "model"]
    assert raised and model["request"]["resent"] == 0 and model["usage"]["model_calls"] == 1


def test_known_model_names_give_a_window_and_the_default_policy_leaves_room_to_answer() -> None:
    assert context_window("gpt-4o-mini") == 128_000
    assert context_window("openai/gpt-4.1-nano") == 1_047_576
    assert context_window("claude-sonnet-4-5") == 200_000
    assert context_window("llama3.1:8b") == 131_072
    assert context_window("scripted") is None
    policy = default_policy(128_000)
    assert (policy.max_prompt_tokens, policy.kept) == (96_000, 48_000)


def test_agents_with_no_policy_get_one_from_their_model_s_window(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    said = script(tmp_path / "s.json", {"text": "noted"})
    known = ScriptedModel(said, name="gpt-4o")
    agents = AgentRegistry()
    agents.add(Agent(name="known", system="", model=known))
    agents.add(Agent(name="unknown", system="", model=ScriptedModel(said, name="homegrown")))
    agents.add(Agent(name="default", system=""))  # the Brain's model, window set
    own = ContextPolicy(max_prompt_tokens=500)
    agents.add(Agent(name="own", system="", model=known, context=own))

    ready = agents.with_model(ScriptedModel(said, name="homegrown"), window=1_000)

    policies = {name: agent.context for name, agent in ready.agents.items()}
    assert policies["known"] == default_policy(128_000)
    assert policies["default"] == default_policy(1_000)
    assert policies["own"] is own  # an agent's own policy is kept
    assert policies["unknown"] is None
    [warned] = [r for r in caplog.records if getattr(r, "event", "") == "context_window_unknown"]
    assert (warned.agent, warned.model) == ("unknown", "homegrown")  # type: ignore[attr-defined]


async def test_an_agent_with_no_policy_stays_under_its_default_budget(
    store: Store, tmp_path: Path
) -> None:
    log = tmp_path / "model.jsonl"
    model = ScriptedModel(script(tmp_path / "s.json", {"text": "noted"}), log_path=log)
    agents = AgentRegistry()
    agents.add(Agent(name="chatty", system="You note errands."))
    agents = agents.with_model(model, window=BUDGET)

    for n in range(40):
        answer = await say(store, agents, n, f"errand {n}: " + "fetch the parcel " * 10)
        assert answer["text"] == "noted"

    sizes = [estimate_tokens(messages, []) for messages in requests(log)]
    assert max(sizes) <= BUDGET * 0.75, max(sizes)
    assert any(e.kind == CHECKPOINT for e in (await store.load("s1")).entries)
