"""A model behind the chat-completions HTTP API: OpenAI, vLLM, Ollama, llama.cpp's server.

``parse_chat_completion`` is the one reader of a chat-completions answer; every adapter whose
``raw`` has that shape (the scripted model included) rebuilds its responses with it.

With ``stream=True`` the adapter puts the chunks back together (``assemble_chunks``) into the
answer the server would have sent whole: that is what is returned and stored, so a stored
response reads the same either way.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from brainhands.brain.models._http import HttpModel
from brainhands.brain.models.base import (
    Json,
    ModelResponse,
    TextSink,
    ToolCall,
    TransientModelError,
    count_tokens,
)

__all__ = ["OpenAIChatModel", "assemble_chunks", "parse_chat_completion", "read_tool_call"]

_AT_LIMIT = "length"
"""The finish reason of an answer that stopped at its output-token limit (``cut_off``)."""
_STOPPED_EARLY = frozenset({"content_filter"})
"""Finish reasons of an answer withheld midway: acting on half an answer is never safe."""


class OpenAIChatModel(HttpModel):
    """A model served over the chat-completions API (options: see ``HttpModel``).

    With tools, each request asks for ``parallel_tool_calls``; a server that rejects the
    field is spared it by ``extra_body={"parallel_tool_calls": None}``.
    """

    @staticmethod
    def endpoint(root: str) -> str:
        return root + "/chat/completions"

    def request_body(self, messages: list[Json], tools: list[Json]) -> Json:
        body: Json = {"model": self._model, "messages": messages}
        if tools:
            body.update(tools=tools, tool_choice="auto", parallel_tool_calls=True)
        if self._stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return body

    async def read_stream(self, events: AsyncIterator[Json], on_text: TextSink | None) -> Json:
        chunks = []
        async for chunk in events:
            chunks.append(chunk)
            if on_text is not None:
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") if isinstance(choice, dict) else None
                    text = delta.get("content") if isinstance(delta, dict) else None
                    if isinstance(text, str) and text:
                        on_text(text)
        try:
            return assemble_chunks(chunks)
        except (AttributeError, TypeError) as exc:  # a chunk not shaped like one
            raise TransientModelError(f"{self._model}: malformed stream chunk: {exc}") from exc

    def parse(self, raw: Json) -> ModelResponse:
        return parse_chat_completion(raw)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}


def assemble_chunks(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat-completions answer that a stream of ``chat.completion.chunk`` objects adds
    up to: the first choice's content and tool calls (their names and argument strings
    concatenated by index), its finish reason, the usage of the last chunk that has one."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish_reason = None
    head: dict[str, Any] = {}
    usage = None
    for chunk in chunks:
        head = head or chunk
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                content.append(delta["content"])
            for piece in delta.get("tool_calls") or []:
                call = calls.setdefault(
                    piece.get("index", 0),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] = piece.get("id") or call["id"]
                function = piece.get("function") or {}
                call["function"]["name"] += function.get("name") or ""
                call["function"]["arguments"] += function.get("arguments") or ""
            finish_reason = choice.get("finish_reason") or finish_reason
    if not chunks or finish_reason is None:
        raise TransientModelError("the stream ended without a finish reason")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    raw: dict[str, Any] = {
        "id": head.get("id"),
        "object": "chat.completion",
        "created": head.get("created"),
        "model": head.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        raw["usage"] = usage
    return raw


def parse_chat_completion(raw: Json) -> ModelResponse:
    """Read a chat-completions answer into a ``ModelResponse`` whose ``raw`` is ``raw`` itself.

    An answer that stopped at its token limit (``length``) is returned ``cut_off``, its
    unfinished tool calls left unread (and out of the message that replays it). Raises
    ``TransientModelError`` for an answer that must not drive tools: no choices, withheld
    midway (``content_filter``), malformed, or tool-call arguments that are not a JSON
    object. Another attempt may well produce a usable answer, so each is worth a retry.
    """
    choices = raw.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise TransientModelError("response has no choices")
    choice = choices[0]
    finish_reason = choice.get("finish_reason")
    if finish_reason in _STOPPED_EARLY:
        raise TransientModelError(f"response was cut off (finish_reason {finish_reason!r})")
    cut_off = finish_reason if finish_reason == _AT_LIMIT else None
    message = choice.get("message")
    if not isinstance(message, dict):
        raise TransientModelError("response choice has no message")
    content = message.get("content")
    calls = [] if cut_off else message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TransientModelError("response tool_calls is not a list")
    usage = raw.get("usage")
    # Replayed as the server said it, so the next request repeats it byte for byte; but an
    # assistant message needs content or tool calls (a cut-off answer may have had neither).
    replay: Json = {"role": "assistant", "content": content if content or calls else ""}
    if calls:
        replay["tool_calls"] = calls
    return ModelResponse(
        raw=raw,
        # Ollama sends "" beside tool calls where OpenAI sends null: both mean no text.
        text=content if isinstance(content, str) and content else None,
        tool_calls=[read_tool_call(call, index) for index, call in enumerate(calls)],
        usage=usage if isinstance(usage, dict) else {},
        tokens=count_tokens(usage, ("prompt_tokens",), "completion_tokens"),
        message=replay,
        cut_off=cut_off,
    )


def read_tool_call(call: Any, index: int) -> ToolCall:
    """A chat-completions ``tool_calls`` element (the ``index``-th) as a ``ToolCall``; raises
    ``TransientModelError`` for one that cannot drive a tool (no name, arguments that are
    not a JSON object)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise TransientModelError("tool call has no function name")
    arguments = function.get("arguments")
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        arguments = {}  # llama.cpp and some vLLM parsers send nothing for a tool without inputs
    elif isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise TransientModelError("tool call arguments are not JSON") from exc
    if not isinstance(arguments, dict):
        raise TransientModelError("tool call arguments are not a JSON object")
    call_id = call.get("id")
    # Tool results are matched by id; a server that sends none still gets a stable one.
    if not isinstance(call_id, str) or not call_id:
        call_id = f"call_{index}"
    return ToolCall(id=call_id, name=function["name"], arguments=arguments)
