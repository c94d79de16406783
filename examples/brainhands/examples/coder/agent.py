"""The coder agent and its model, a script that reads the tools' results: run the tests;
when they fail, rewrite the faulty file; when they pass, answer with the diffs of the
edits made."""

from __future__ import annotations

import json
from typing import Any

from brainhands.brain.agent import Agent, AgentRegistry
from brainhands.brain.models.base import Json, ModelResponse, TextSink
from brainhands.brain.models.openai import parse_chat_completion
from brainhands.examples.coder.project import FAULTY, FIXED


class CoderScript:
    """Decides each turn from the conversation alone (a Brain that restarts and asks again
    gets the same answer): the last tool result says what comes next."""

    name = "coder-script"

    async def complete(
        self, messages: list[Json], tools: list[Json], *, on_text: TextSink | None = None
    ) -> ModelResponse:
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        results = [_result(m) for m in messages if m.get("role") == "tool"]
        last = results[-1] if results else None
        if last is None or "diff" in last:
            message = _call(turn, "run_tests", {})
        elif not last.get("passed"):
            message = _call(turn, "write_file", {"path": FAULTY, "content": FIXED})
        else:
            diffs = "".join(r["diff"] for r in results if "diff" in r)
            message = {"role": "assistant", "content": f"The tests pass. What I changed:\n{diffs}"}
        response = self.parse(_completion(turn, message))
        if on_text is not None and response.text:
            on_text(response.text)
        return response

    def parse(self, raw: Json) -> ModelResponse:
        return parse_chat_completion(raw)

    async def aclose(self) -> None:
        """Nothing to close."""


def _result(message: Json) -> dict[str, Any]:
    said = json.loads(message["content"])
    result = said.get("result")
    return result if isinstance(result, dict) else {"passed": False, "error": said}


def _call(turn: int, name: str, arguments: dict[str, Any]) -> Json:
    call = {
        "id": f"call_{turn}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _completion(turn: int, message: Json) -> Json:
    return {
        "id": f"coder-{turn}",
        "object": "chat.completion",
        "created": 0,
        "model": CoderScript.name,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


agents = AgentRegistry()
agents.add(
    Agent(
        name="coder",
        model=CoderScript(),
        system="You fix Python projects: run the tests, edit what fails, until they pass.",
        tools=("run_tests", "write_file"),
        max_turns=12,
    )
)
