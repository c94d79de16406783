"""A model behind Anthropic's Messages API (``POST /v1/messages``).

The Brain speaks chat completions (see ``base``); this adapter maps each request to the
Messages shapes and each answer back:

- ``system`` messages become the request's ``system``; a ``tool`` message becomes a
  ``tool_result`` block (``tool_use_id``) in a user turn, the results of one assistant turn
  in one user turn, as the API requires; an assistant's ``tool_calls`` become ``tool_use``
  blocks carrying the call ids;
- tool schemas become ``{name, description, input_schema}``;
- the answer's ``text`` blocks are its text, its ``tool_use`` blocks its tool calls. A
  ``stop_reason`` of ``max_tokens`` is an answer ``cut_off`` at its limit, final;
  ``pause_turn`` (an answer stopped midway) is retryable; ``refusal`` is an error;
- the answer replays as its content blocks (its message's ``content`` is that list, read
  back by ``to_messages_request``): text as text, the others as they came, ``thinking``
  and ``redacted_thinking`` included, which the API requires back verbatim in the next
  request of a turn that used tools.

With ``stream=True`` the adapter puts the events back together (``assemble_events``) into
the message the server would have sent whole: that is what is returned and stored.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from brainhands.brain.models._http import HttpModel
from brainhands.brain.models.base import (
    Json,
    ModelError,
    ModelResponse,
    TextSink,
    ToolCall,
    TransientModelError,
    count_tokens,
)

_INPUT_COUNTS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
"""The counts of a Messages ``usage`` that add up to the prompt's tokens: the cached parts
are reported beside ``input_tokens``, not in it."""

__all__ = ["AnthropicModel", "assemble_events", "parse_message", "to_messages_request"]

API_VERSION = "2023-06-01"
_AT_LIMIT = frozenset({"max_tokens", "model_context_window_exceeded"})
"""Stop reasons of an answer that stopped at a token limit (``cut_off``): its own, or the
context window's."""
_STOPPED_EARLY = frozenset({"pause_turn"})
"""Stop reasons of an answer that paused midway: acting on half an answer is never safe."""
_JOINED_DELTAS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "signature_delta": "signature",
}
"""A streamed delta's type -> the string field it carries, and extends in its block."""
_TRANSIENT_STREAM_ERRORS = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)
"""The ``error`` events of a stream that another attempt may not meet."""


class AnthropicModel(HttpModel):
    """A model served over the Messages API: Anthropic's, or a server compatible with it
    (options: see ``HttpModel``).

    ``base_url`` is the API root, ``https://api.anthropic.com`` (a trailing ``/v1`` is
    accepted too). The Messages API requires ``max_tokens``: 4096 unless given. Extended
    thinking is asked for through ``extra_body`` (``{"thinking": {"type": "enabled",
    "budget_tokens": N}}``, N below ``max_tokens``); its blocks are replayed as they came.
    """

    default_max_tokens = 4096

    @staticmethod
    def endpoint(root: str) -> str:
        return root + ("/messages" if root.endswith("/v1") else "/v1/messages")

    def request_body(self, messages: list[Json], tools: list[Json]) -> Json:
        body: Json = {"model": self._model, **to_messages_request(messages, tools)}
        if self._stream:
            body["stream"] = True
        return body

    async def read_stream(self, events: AsyncIterator[Json], on_text: TextSink | None) -> Json:
        seen = []
        async for event in events:
            kind = event.get("type")
            if kind == "error":
                raise _stream_error(self._model, event.get("error"))
            seen.append(event)
            if on_text is not None and kind == "content_block_delta":
                delta = event.get("delta")
                if isinstance(delta, dict) and delta.get("type") == "text_delta":
                    piece = delta.get("text")
                    if isinstance(piece, str) and piece:
                        on_text(piece)
            if kind == "message_stop":
                break
        try:
            return assemble_events(seen)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise TransientModelError(f"{self._model}: malformed stream event: {exc!r}") from exc

    def parse(self, raw: Json) -> ModelResponse:
        return parse_message(raw)

    def headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers


def to_messages_request(messages: list[Json], tools: list[Json]) -> Json:
    """The ``system``, ``messages`` and ``tools`` of a Messages request for a conversation
    and tool schemas in chat-completions form. Raises ``ModelError`` for a message it
    cannot carry: another attempt would send the same."""
    system: list[str] = []
    turns: list[Json] = []

    def add(role: str, blocks: list[Json]) -> None:
        # The API alternates user and assistant turns: consecutive ones of a role merge.
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        elif blocks:
            turns.append({"role": role, "content": blocks})

    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.extend(block["text"] for block in _text_blocks(content))
        elif role == "user":
            add("user", _text_blocks(content))
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            add("assistant", _text_blocks(content) + [_tool_use(call) for call in calls])
        elif role == "tool":
            result = content if isinstance(content, str) else json.dumps(content)
            block = {"type": "tool_result", "tool_use_id": message["tool_call_id"]}
            add("user", [{**block, "content": result}])
        else:
            raise ModelError(f"cannot send a {role!r} message to the Messages API")
    request: Json = {"messages": turns}
    if system:
        request["system"] = "\n\n".join(system)
    if tools:
        request["tools"] = [_tool_schema(tool) for tool in tools]
    return request


def assemble_events(events: list[Json]) -> Json:
    """The Messages answer that a stream's events add up to: ``message_start``'s message,
    each content block with its text, thinking and signature deltas joined, its citations
    gathered and its tool input's JSON pieces parsed, and ``message_delta``'s stop reason and
    usage. Raises ``KeyError``, ``TypeError`` or ``ValueError`` for events not shaped as the
    API sends them."""
    message: Json | None = None
    blocks: dict[int, Json] = {}
    inputs: dict[int, list[str]] = {}
    for event in events:
        kind = event["type"]
        if kind == "message_start":
            message = dict(event["message"])
        elif kind == "content_block_start":
            blocks[int(event["index"])] = dict(event["content_block"])
        elif kind == "content_block_delta":
            index, delta = int(event["index"]), event["delta"]
            joined = _JOINED_DELTAS.get(delta["type"])
            if joined is not None:
                blocks[index][joined] = blocks[index].get(joined, "") + delta[joined]
            elif delta["type"] == "input_json_delta":
                inputs.setdefault(index, []).append(delta["partial_json"])
            elif delta["type"] == "citations_delta":
                blocks[index].setdefault("citations", []).append(delta["citation"])
        elif kind == "message_delta":
            if message is None:
                raise ValueError("message_delta before message_start")
            message.update(event["delta"])
            message["usage"] = {**(message.get("usage") or {}), **(event.get("usage") or {})}
    if message is None:
        raise ValueError("the stream had no message_start")
    for index, pieces in inputs.items():
        joined = "".join(pieces)
        blocks[index]["input"] = json.loads(joined) if joined.strip() else {}
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def _stream_error(model: str, error: Any) -> ModelError:
    """The adapter's error for an ``error`` event in the middle of a stream."""
    kind = error.get("type") if isinstance(error, dict) else None
    said = error.get("message") if isinstance(error, dict) else None
    text = f"{model}: the stream failed: {kind or 'error'}" + (f": {said}" if said else "")
    return TransientModelError(text) if kind in _TRANSIENT_STREAM_ERRORS else ModelError(text)


def parse_message(raw: Json) -> ModelResponse:
    """Read a Messages answer into a ``ModelResponse`` whose ``raw`` is ``raw`` itself.

    An answer that stopped at a token limit is returned ``cut_off``, its unfinished
    ``tool_use`` blocks left unread (and out of the message that replays it). Raises
    ``TransientModelError`` for an answer that must not drive tools: paused midway,
    malformed, or a ``tool_use`` whose input is not an object; ``ModelError`` for a refusal.
    """
    content = raw.get("content")
    if not isinstance(content, list):
        raise TransientModelError("response has no content")
    stop_reason = raw.get("stop_reason")
    if stop_reason in _STOPPED_EARLY:
        raise TransientModelError(f"response was cut off (stop_reason {stop_reason!r})")
    if stop_reason == "refusal":
        raise ModelError("the model refused to answer (stop_reason 'refusal')")
    cut_off = stop_reason if stop_reason in _AT_LIMIT else None
    texts: list[str] = []
    calls: list[ToolCall] = []
    replay: list[Json] = []
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            raise TransientModelError("response content block is not an object")
        if block.get("type") == "tool_use":
            if cut_off:
                continue
            calls.append(_parse_tool_use(block, index))
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        # Other blocks (thinking, server tools) neither answer nor call a tool of ours,
        # but are the model's: the next request carries them back.
        replay.append(block)
    usage = raw.get("usage")
    return ModelResponse(
        raw=raw,
        text="".join(texts) or None,
        tool_calls=calls,
        usage=usage if isinstance(usage, dict) else {},
        tokens=count_tokens(usage, _INPUT_COUNTS, "output_tokens"),
        message={"role": "assistant", "content": replay},
        cut_off=cut_off,
    )


def _text_blocks(content: Any) -> list[Json]:
    """Content (a string, or chat-completions parts) as Messages blocks; the API refuses
    empty text blocks, so none is made."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [
            {"type": "text", "text": part["text"]} if part.get("type") == "text" else part
            for part in content
            if part.get("type") != "text" or part.get("text")
        ]
    raise ModelError(f"cannot send message content of type {type(content).__name__}")


def _tool_use(call: Json) -> Json:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            raise ModelError(f"tool call {call.get('id')!r} arguments are not JSON") from exc
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ModelError(f"tool call {call.get('id')!r} arguments are not a JSON object")
    return {"type": "tool_use", "id": call["id"], "name": function["name"], "input": arguments}


def _tool_schema(tool: Json) -> Json:
    function = tool.get("function", tool)
    schema: Json = {
        "name": function["name"],
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if function.get("description"):
        schema["description"] = function["description"]
    return schema


def _parse_tool_use(block: Json, index: int) -> ToolCall:
    name, arguments = block.get("name"), block.get("input", {})
    if not isinstance(name, str) or not name:
        raise TransientModelError("tool_use block has no name")
    if not isinstance(arguments, dict):
        raise TransientModelError("tool_use input is not a JSON object")
    call_id = block.get("id")
    # Results are matched by id; a server that sends none still gets a stable one.
    if not isinstance(call_id, str) or not call_id:
        call_id = f"toolu_{index}"
    return ToolCall(id=call_id, name=name, arguments=arguments)
