"""An agent that names no model runs on the one the Brain's ``BRAINHANDS_MODEL_*`` settings
describe, over either protocol: real Brain (and Hands) processes, a real loopback HTTP server
as the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from brainhands.brain.agent import Agent, AgentRegistry, agent_kinds
from brainhands.brain.models import ScriptedModel
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.store import Store
from brainhands.shared.store.catalog import ToolCatalog
from tests.helpers.agents import SCRIPTS
from tests.helpers.brains import BrainHarness
from tests.helpers.chat_server import (
    ChatServer,
    completion,
    message,
    redacted_thinking,
    text,
    thinking,
    tool_use,
)
from tests.helpers.processes import WORKDIR, spawn_email_hands
from tests.helpers.submitting import submit_input

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server() -> Iterator[ChatServer]:
    chat = ChatServer()
    yield chat
    chat.close()


async def ask(brains: BrainHarness) -> None:
    await submit_input(
        brains.store,
        brains.env.topology,
        session_id="s1",
        request_id="r1",
        input={"agent": "by_settings", "text": "say one"},
        compat="v1",
    )


def start_brain(brains: BrainHarness, **model: str) -> None:
    settings = {f"BRAINHANDS_MODEL_{name.upper()}": value for name, value in model.items()}
    brains.start_brain(tasks=None, agents="tests.helpers.agents", **settings)


async def test_agents_that_name_no_model_are_given_one(store: Store) -> None:
    own, given = ScriptedModel(SCRIPTS / "echoer.json"), ScriptedModel(SCRIPTS / "rogue.json")
    agents = AgentRegistry()
    agents.add(Agent(name="own", system="", model=own))
    agents.add(Agent(name="bare", system=""))
    with pytest.raises(ConfigurationError, match=r"\['bare'\] name no model"):
        agent_kinds(agents, ToolCatalog(store))

    armed = agents.with_model(given)

    assert armed.get("own").model is own and armed.get("bare").model is given
    assert agents.get("bare").model is None  # the registry loaded is left as it was
    assert agent_kinds(armed, ToolCatalog(store)).kinds


def test_a_brain_with_an_unknown_model_provider_stops_at_start_up() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRAINHANDS_")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "brainhands",
            "brain",
            "--compat",
            "v1",
            "--agents",
            "tests.helpers.agents",
        ],
        cwd=WORKDIR,
        env={**env, "BRAINHANDS_MODEL_PROVIDER": "gemini"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "BRAINHANDS_MODEL_PROVIDER" in done.stderr and "'anthropic'" in done.stderr


@pytest.mark.integration
async def test_an_agent_without_a_model_uses_the_settings_model(
    brains: BrainHarness, server: ChatServer
) -> None:
    server.rejected.add("parallel_tool_calls")  # as some servers do: told not to send it
    server.reply(200, completion({"role": "assistant", "content": "one"}))
    await brains.declare_tools()
    start_brain(
        brains,
        base_url=server.base_url,
        name="settings-model",
        api_key="sk-set",
        temperature="0.25",
        extra_body='{"parallel_tool_calls": null, "seed": 7}',
    )
    await ask(brains)

    record = await brains.answer(within=60)

    assert record.status == "answered"
    assert record.answer == {"text": "one", "turns": 1}
    [request] = server.received
    assert request.path == "/v1/chat/completions"  # the default provider: openai
    assert request.headers["authorization"] == "Bearer sk-set"
    assert request.body["model"] == "settings-model"
    assert [t["function"]["name"] for t in request.body["tools"]] == ["echo"]
    assert "parallel_tool_calls" not in request.body and "max_tokens" not in request.body
    assert request.body["temperature"] == 0.25 and request.body["seed"] == 7


@pytest.mark.integration
async def test_a_tool_turn_over_the_messages_api(brains: BrainHarness, server: ChatServer) -> None:
    answer = message(
        thinking("Echo it with the tool.", "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"),
        redacted_thinking("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"),
        text("Echoing."),
        tool_use("toolu_1", "echo", {"text": "one"}),
        stop_reason="tool_use",
    )
    server.reply(200, answer)
    server.reply(200, message(text("Echoed one.")))
    thinks = {"type": "enabled", "budget_tokens": 2048}
    start_brain(
        brains,
        provider="anthropic",
        base_url=server.root_url,
        name="claude",
        api_key="sk-ant",
        max_tokens="16000",
        extra_body=json.dumps({"thinking": thinks}),
    )
    hands = spawn_email_hands(env=brains.settings(), log=brains.tmp_path / "hands.log")
    brains.processes.append(hands)
    await ask(brains)

    record = await brains.answer(within=60)

    assert record.status == "answered"
    assert record.answer == {"text": "Echoed one.", "turns": 2}
    first, second = server.received
    assert first.path == second.path == "/v1/messages"
    assert first.body["max_tokens"] == second.body["max_tokens"] == 16000
    assert first.body["thinking"] == second.body["thinking"] == thinks
    assert first.headers["x-api-key"] == "sk-ant"
    assert first.body["system"] == "You repeat things."
    assert [t["name"] for t in first.body["tools"]] == ["echo"]
    assert "input_schema" in first.body["tools"][0]
    replayed, results = second.body["messages"][1:]
    # Read back from the session's stored entries: the thinking blocks verbatim, in order.
    assert replayed == {"role": "assistant", "content": answer["content"]}
    [result] = results["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    assert json.loads(result["content"]) == {"status": "succeeded", "result": {"echo": "one"}}
    state = await brains.store.load("s1")
    assert [e.kind for e in state.entries] == ["user", "model", "tool_result", "model"]
    assert state.entries[1].body["raw"] == answer  # the answer as returned, saved before the call
    assert state.entries[1].body["message"] == replayed  # what replays it, read from the store
