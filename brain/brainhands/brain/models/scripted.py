"""A model that answers from a script: deterministic demos and tests, no network.

The script is a JSON file::

    {"turns": [
        {"tool_calls": [{"name": "search", "arguments": {"q": "rabbits"}}]},
        {"fail": "transient", "text": "Rabbits are lagomorphs."}
    ]}

A turn answers with ``text``, ``tool_calls`` (each ``{"name", "arguments"}``) or both.
The turn to answer is read from the request alone, never from the model's own state, so a
Brain that restarts and asks again gets the same answer: turn *n* answers a conversation that
holds *n* assistant messages. Past the end of the script the last turn repeats if it is a text
turn (the agent is done); otherwise the script is exhausted.

``"fail": "transient"`` makes a turn raise ``TransientModelError`` the first time it is
requested; the retry gets the turn's answer. With a ``log_path`` the turns that have failed are
remembered in ``<log_path>.failed``, so a restarted process does not fail them again; without
one they are remembered by this instance only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from brainhands.brain.models.base import (
    Json,
    ModelError,
    ModelResponse,
    TextSink,
    TransientModelError,
)
from brainhands.brain.models.openai import parse_chat_completion
from brainhands.shared.errors import ConfigurationError

__all__ = ["ScriptedModel"]


class ScriptedModel:
    """Deterministic answers from a JSON script (see the module docstring for its format).

    With ``log_path`` set, each request is appended to it as one JSON line,
    ``{"turn": n, "messages": [...], "tools": [names]}`` with sorted keys, so equal requests
    produce byte-identical lines.
    """

    def __init__(
        self,
        script_path: str | Path,
        *,
        log_path: str | Path | None = None,
        name: str = "scripted",
    ) -> None:
        self._turns = _load_script(Path(script_path))
        self._log_path = Path(log_path) if log_path is not None else None
        self._name = name
        self._failed: set[int] = set()

    @property
    def name(self) -> str:
        """The name given at construction (``"scripted"`` by default)."""
        return self._name

    async def complete(
        self, messages: list[Json], tools: list[Json], *, on_text: TextSink | None = None
    ) -> ModelResponse:
        """Answer with the turn numbered by the assistant messages in ``messages`` (its text
        handed to ``on_text`` in one piece)."""
        turn = sum(1 for message in messages if message.get("role") == "assistant")
        self._log_request(turn, messages, tools)
        if turn < len(self._turns):
            script = self._turns[turn]
            if script.get("fail") == "transient" and self._fail_once(turn):
                raise TransientModelError(f"scripted transient failure at turn {turn}")
        elif not self._turns[-1].get("tool_calls"):
            script = self._turns[-1]  # the agent is done: it keeps saying its last word
        else:
            raise ModelError(f"script exhausted: no turn {turn} ({len(self._turns)} scripted)")
        response = parse_chat_completion(self._raw(turn, script))
        if on_text is not None and response.text:
            on_text(response.text)
        return response

    def parse(self, raw: dict[str, Any]) -> ModelResponse:
        """Rebuild a response from its stored chat-completions form."""
        return parse_chat_completion(raw)

    async def aclose(self) -> None:
        """Nothing to close; here so callers can treat every adapter alike."""

    def _raw(self, turn: int, script: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": script.get("text")}
        calls = script.get("tool_calls") or []
        if calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{turn}_{index}",
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": json.dumps(call.get("arguments", {})),
                    },
                }
                for index, call in enumerate(calls)
            ]
        return {
            "id": f"scripted-{turn}",
            "object": "chat.completion",
            "created": 0,
            "model": self._name,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }

    def _log_request(
        self, turn: int, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> None:
        if self._log_path is None:
            return
        names = [tool.get("function", {}).get("name", tool.get("name")) for tool in tools]
        record = {"turn": turn, "messages": messages, "tools": names}
        with self._log_path.open("a", encoding="utf-8") as log:
            log.write(json.dumps(record, sort_keys=True) + "\n")

    def _fail_once(self, turn: int) -> bool:
        """Whether ``turn`` fails now: true the first time only, across restarts if logged."""
        if self._log_path is None:
            first = turn not in self._failed
            self._failed.add(turn)
            return first
        state = self._log_path.with_name(self._log_path.name + ".failed")
        failed = state.read_text(encoding="utf-8").split() if state.exists() else []
        if str(turn) in failed:
            return False
        with state.open("a", encoding="utf-8") as out:
            out.write(f"{turn}\n")
        return True


def _load_script(path: Path) -> list[dict[str, Any]]:
    try:
        script = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read model script {path}: {exc}") from exc
    turns = script.get("turns") if isinstance(script, dict) else None
    if not isinstance(turns, list) or not turns:
        raise ConfigurationError(f"model script {path}: 'turns' must be a non-empty list")
    for number, turn in enumerate(turns):
        if not isinstance(turn, dict) or not ("text" in turn or turn.get("tool_calls")):
            raise ConfigurationError(
                f"model script {path}: turn {number} needs 'text' or 'tool_calls'"
            )
        calls = turn.get("tool_calls") or []
        if not isinstance(calls, list) or not all(
            isinstance(call, dict)
            and isinstance(call.get("name"), str)
            and isinstance(call.get("arguments", {}), dict)
            for call in calls
        ):
            raise ConfigurationError(
                f"model script {path}: turn {number} tool_calls must be "
                '[{"name": str, "arguments": {...}}, ...]'
            )
        if turn.get("fail", "transient") != "transient":
            raise ConfigurationError(
                f"model script {path}: turn {number} 'fail' must be 'transient'"
            )
    return turns
