"""A model behind Anthropic's Messages API (``POST /v1/messages``).

The Brain speaks chat completions (see ``base``); this adapter maps each request to the
Messages shapes and each answer back:

- ``system`` messages become the request's ``system``; a ``tool`` message becomes a
  ``tool_result`` block (``tool_use_id``) in a user turn, the results of one assistant turn
  in one user turn, as the API requires; an assistant's ``tool_calls`` become ``tool_use``
  blocks carrying the call ids;
- tool schemas become ``{name, description, input_schema}``;
- the answer's ``text`` blocks are its text, its ``tool_use`` blocks its tool calls. A
  ``stop_reason`` of ``max_tokens`` (or another that means the answer stopped early) is a
  cut-off answer, retryable; ``refusal`` is final.

With ``stream=True`` the adapter asks for the answer as server-sent events, hands the text
to ``on_text`` as it comes, and puts the events back together (``assemble_events``) into
the message the server would have sent whole: that is what is returned and stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from brainhands.brain.models._http import HttpModel, post_events
from brainhands.brain.models.base import ModelError, ModelResponse, ToolCall, TransientModelError

__all__ = ["AnthropicModel", "assemble_events", "parse_message", "to_messages_request"]

API_VERSION = "2023-06-01"
_CUT_OFF = frozenset({"max_tokens", "model_context_window_exceeded", "pause_turn"})
"""Stop reasons of an answer that stopped early: acting on half an answer is never safe."""
_TRANSIENT_STREAM_ERRORS = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)
"""The ``error`` events of a stream that another attempt may not meet."""


class AnthropicModel(HttpModel):
    """A model served over the Messages API: Anthropic's, or a server compatible with it.

    ``base_url`` is the API root, ``https://api.anthropic.com`` (a trailing ``/v1`` is
    accepted too). The Messages API requires ``max_tokens``; ``extra_body`` is merged into
    every request last. One ``httpx.AsyncClient`` is created on first use and reused; close
    it with ``aclose()`` (or ``async with``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        max_tokens: int = 4096,
        temperature: float | None = None,
        extra_body: dict[str, Any] | None = None,
        stream: bool = False,
    ) -> None:
        root = base_url.rstrip("/")
        url = root + ("/messages" if root.endswith("/v1") else "/v1/messages")
        super().__init__(url, model, api_key, timeout)
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._extra_body = dict(extra_body or {})
        self._stream = stream

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelResponse:
        """One Messages call; see ``ModelAdapter.complete`` for the error contract.
        Streamed when the adapter was made with ``stream=True``; else ``on_text`` gets the
        whole text once."""
        body: dict[str, Any] = {"model": self._model, "max_tokens": self._max_tokens}
        body.update(to_messages_request(messages, tools))
        if self._temperature is not None:
            body["temperature"] = self._temperature
        if self._stream:
            body["stream"] = True
        body.update(self._extra_body)
        if not self._stream:
            return await self.complete_whole(body, on_text)
        events = []
        async for event in post_events(self.client(), self._url, body, model=self._model):
            kind = event.get("type")
            if kind == "error":
                raise _stream_error(self._model, event.get("error"))
            events.append(event)
            if on_text is not None and kind == "content_block_delta":
                delta = event.get("delta")
                if isinstance(delta, dict) and delta.get("type") == "text_delta":
                    piece = delta.get("text")
                    if isinstance(piece, str) and piece:
                        on_text(piece)
            if kind == "message_stop":
                break
        try:
            raw = assemble_events(events)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise TransientModelError(f"{self._model}: malformed stream event: {exc!r}") from exc
        return parse_message(raw)

    def parse(self, raw: dict[str, Any]) -> ModelResponse:
        return parse_message(raw)

    def headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers


def to_messages_request(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> dict[str, Any]:
    """The ``system``, ``messages`` and ``tools`` of a Messages request for a conversation
    and tool schemas in chat-completions form. Raises ``ModelError`` for a message it
    cannot carry: another attempt would send the same."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
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
    request: dict[str, Any] = {"messages": turns}
    if system:
        request["system"] = "\n\n".join(system)
    if tools:
        request["tools"] = [_tool_schema(tool) for tool in tools]
    return request


def assemble_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The Messages answer that a stream's events add up to: ``message_start``'s message,
    each content block with its text deltas joined and its tool input's JSON pieces parsed,
    and ``message_delta``'s stop reason and usage. Raises ``KeyError``, ``TypeError`` or
    ``ValueError`` for events not shaped as the API sends them."""
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    inputs: dict[int, list[str]] = {}
    for event in events:
        kind = event["type"]
        if kind == "message_start":
            message = dict(event["message"])
        elif kind == "content_block_start":
            blocks[int(event["index"])] = dict(event["content_block"])
        elif kind == "content_block_delta":
            index, delta = int(event["index"]), event["delta"]
            if delta["type"] == "text_delta":
                blocks[index]["text"] = blocks[index].get("text", "") + delta["text"]
            elif delta["type"] == "input_json_delta":
                inputs.setdefault(index, []).append(delta["partial_json"])
            # Other deltas (thinking, signatures) belong to blocks that are not ours.
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


def parse_message(raw: dict[str, Any]) -> ModelResponse:
    """Read a Messages answer into a ``ModelResponse`` whose ``raw`` is ``raw`` itself.

    Raises ``TransientModelError`` for an answer that must not drive tools: cut off,
    malformed, or a ``tool_use`` whose input is not an object; ``ModelError`` for a refusal.
    """
    content = raw.get("content")
    if not isinstance(content, list):
        raise TransientModelError("response has no content")
    stop_reason = raw.get("stop_reason")
    if stop_reason in _CUT_OFF:
        raise TransientModelError(f"response was cut off (stop_reason {stop_reason!r})")
    if stop_reason == "refusal":
        raise ModelError("the model refused to answer (stop_reason 'refusal')")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            raise TransientModelError("response content block is not an object")
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append(_parse_tool_use(block, index))
        # Other blocks (thinking, server tools) neither answer nor call a tool of ours.
    usage = raw.get("usage")
    return ModelResponse(
        raw=raw,
        text="".join(texts) or None,
        tool_calls=calls,
        usage=usage if isinstance(usage, dict) else {},
    )


def _text_blocks(content: Any) -> list[dict[str, Any]]:
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


def _tool_use(call: dict[str, Any]) -> dict[str, Any]:
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


def _tool_schema(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function", tool)
    schema: dict[str, Any] = {
        "name": function["name"],
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if function.get("description"):
        schema["description"] = function["description"]
    return schema


def _parse_tool_use(block: dict[str, Any], index: int) -> ToolCall:
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
