"""A model behind OpenAI's Responses API (``POST /v1/responses``), answering in the
foreground or working in the background.

The Brain speaks chat completions (see ``base``); this adapter maps each request to the
Responses shapes and each answer back:

- ``system`` and ``developer`` messages become the request's ``instructions``; user and
  assistant text become input messages; an assistant's ``tool_calls`` become
  ``function_call`` items (``call_id``, ``name``, ``arguments``), a ``tool`` message a
  ``function_call_output``; tool schemas become flat ``function`` tools, not ``strict``
  (the Brain's schemas are not written for strict mode);
- the answer's ``output`` items are read in order: the ``output_text`` of its ``message``
  items is its text, its ``function_call`` items its tool calls (by ``call_id``), a
  ``refusal`` an error; the answer replays as those items, verbatim, reasoning included
  (its message's ``content`` is their list, read back by ``to_responses_request``);
- its ``status``: ``completed`` is an answer; ``incomplete`` at ``max_output_tokens`` an
  answer ``cut_off`` at its limit, final; ``incomplete`` for another reason (a content
  filter) and ``cancelled`` are retryable; ``failed`` is retryable for a server error or a
  rate limit, an error otherwise.

``ResponsesModel`` answers in the foreground: one POST, answered whole, or streamed
(``stream=True``: the text goes to ``on_text`` as it comes, and the response the final
event carries whole is what is returned and stored). ``BackgroundResponsesModel`` is a
``BackgroundModel``: ``begin`` posts the request with ``background: true`` (and ``store:
true``, which background requires) and returns the response's id at once; ``attach`` polls
``GET /responses/{id}`` until it ends. The response runs at the provider whatever becomes
of the process that asked for it, so a Brain that takes a session over from one that died
attaches to it by the id its predecessor committed, and the answer is paid once
(``brain.model_calls``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from brainhands.brain.models._http import HttpModel, get_json, idempotency, post_json
from brainhands.brain.models.base import (
    Json,
    ModelError,
    ModelResponse,
    TextSink,
    ToolCall,
    TransientModelError,
    count_tokens,
)
from brainhands.brain.models.openai import read_tool_call

__all__ = [
    "BackgroundResponsesModel",
    "ResponsesModel",
    "parse_response",
    "to_responses_request",
]

_AT_LIMIT = "max_output_tokens"
"""The ``incomplete_details.reason`` of an answer that stopped at its output-token limit."""
_RUNNING = frozenset({"queued", "in_progress"})
"""Statuses of a background response that has not ended."""
_TRANSIENT_CODES = frozenset({"server_error", "rate_limit_exceeded", "vector_store_timeout"})
"""Error codes of a failed response (or stream) that another attempt may not meet."""
_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
"""Stream events that carry the whole response, ended."""


class ResponsesModel(HttpModel):
    """A model served over the Responses API, in the foreground (options: see
    ``HttpModel``; ``max_tokens`` is sent as ``max_output_tokens``).

    ``base_url`` is the API root, ``https://api.openai.com/v1``. With tools, each request
    asks for ``parallel_tool_calls``; ``extra_body`` adds what else the API takes
    (``{"reasoning": {"effort": "high"}}``, ``{"store": false}``).
    """

    max_tokens_field = "max_output_tokens"

    @staticmethod
    def endpoint(root: str) -> str:
        return root + "/responses"

    def request_body(self, messages: list[Json], tools: list[Json]) -> Json:
        body: Json = {"model": self._model, **to_responses_request(messages, tools)}
        if self._stream:
            body["stream"] = True
        return body

    async def read_stream(self, events: AsyncIterator[Json], on_text: TextSink | None) -> Json:
        async for event in events:
            kind = event.get("type")
            if kind == "response.output_text.delta" and on_text is not None:
                delta = event.get("delta")
                if isinstance(delta, str) and delta:
                    on_text(delta)
            elif kind in _FINAL_EVENTS:
                response = event.get("response")
                if not isinstance(response, dict):
                    raise TransientModelError(f"{self._model}: {kind} carries no response")
                return response
            elif kind == "error":
                raise _failure(event.get("code"), event.get("message"), "the stream failed")
        raise TransientModelError(f"{self._model}: the stream ended before the answer did")

    def parse(self, raw: Json) -> ModelResponse:
        return parse_response(raw)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}


class BackgroundResponsesModel(ResponsesModel):
    """A model served over the Responses API whose calls run in the background
    (``BackgroundModel``); ``complete`` still answers in the foreground (a compaction's
    summary asks that way).

    ``attach`` polls every ``poll_interval`` seconds, each poll bounded by ``timeout``;
    a poll that fails (the provider unreachable a while) is tried again at the next. A
    response still running ``max_wait`` seconds after ``attach`` began is cancelled and
    counts as a transient failure. Its text reaches ``on_text`` whole, once it has ended
    (``stream`` is for ``complete``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        poll_interval: float = 1.0,
        max_wait: float = 3600.0,
        **options: Any,
    ) -> None:
        super().__init__(base_url, model, api_key, **options)
        self._poll_interval = poll_interval
        self._max_wait = max_wait

    async def begin(self, messages: list[Json], tools: list[Json], *, request_id: str) -> str:
        body = {**self.body(messages, tools), "background": True, "store": True}
        body.pop("stream", None)
        raw = await post_json(
            self.client(), self._url, body, model=self._model, headers=idempotency(request_id)
        )
        response_id = raw.get("id")
        if not isinstance(response_id, str) or not response_id:
            raise TransientModelError(f"{self._model}: the background response has no id")
        return response_id

    async def attach(self, response_id: str, *, on_text: TextSink | None = None) -> ModelResponse:
        url = f"{self._url}/{response_id}"
        deadline = time.monotonic() + self._max_wait
        while True:
            try:
                raw = await get_json(self.client(), url, model=self._model)
            except TransientModelError:
                raw = {"status": "in_progress"}  # not heard this time: asked again below
                if time.monotonic() >= deadline:
                    raise
            if raw is None:
                raise TransientModelError(f"{self._model}: response {response_id} is gone")
            if raw.get("status") not in _RUNNING:
                response = self.parse(raw)
                if on_text is not None and response.text:
                    on_text(response.text)
                return response
            if time.monotonic() >= deadline:
                await self._cancel(response_id)
                raise TransientModelError(
                    f"{self._model}: response {response_id} still running after {self._max_wait}s"
                )
            await asyncio.sleep(self._poll_interval)

    async def _cancel(self, response_id: str) -> None:
        """Ask the provider to stop a response no one waits for any more (best effort: it
        may have ended meanwhile, or the provider be out of reach)."""
        with contextlib.suppress(ModelError):
            url = f"{self._url}/{response_id}/cancel"
            await post_json(self.client(), url, {}, model=self._model)


def to_responses_request(messages: list[Json], tools: list[Json]) -> Json:
    """The ``instructions``, ``input`` and ``tools`` of a Responses request for a
    conversation and tool schemas in chat-completions form. Raises ``ModelError`` for a
    message it cannot carry: another attempt would send the same."""
    instructions: list[str] = []
    items: list[Json] = []
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role in ("system", "developer"):
            instructions.append(_text_of(content))
        elif role == "user":
            items.append({"role": "user", "content": _user_content(content)})
        elif role == "assistant":
            items += _assistant_items(content, message.get("tool_calls") or [])
        elif role == "tool":
            output = content if isinstance(content, str) else json.dumps(content)
            call_id = message["tool_call_id"]
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
        else:
            raise ModelError(f"cannot send a {role!r} message to the Responses API")
    request: Json = {"input": items}
    if instructions:
        request["instructions"] = "\n\n".join(instructions)
    if tools:
        request.update(
            tools=[_function_tool(tool) for tool in tools],
            tool_choice="auto",
            parallel_tool_calls=True,
        )
    return request


def parse_response(raw: Json) -> ModelResponse:
    """Read a Responses answer (a ``response`` object that has ended) into a
    ``ModelResponse`` whose ``raw`` is ``raw`` itself.

    An answer that stopped at ``max_output_tokens`` is returned ``cut_off``, its unfinished
    ``function_call`` items left unread (and out of the message that replays it). Raises
    ``TransientModelError`` for an answer that must not drive tools and that another
    attempt may fix (failed for a server error or a rate limit, cancelled, incomplete for
    another reason, not ended, malformed, arguments that are not a JSON object), and
    ``ModelError`` for one it will not (failed otherwise, a refusal)."""
    status = raw.get("status")
    if status == "failed":
        error = raw.get("error")
        error = error if isinstance(error, dict) else {}
        raise _failure(error.get("code"), error.get("message"), "the response failed")
    cut_off = None
    if status == "incomplete":
        details = raw.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        if reason != _AT_LIMIT:
            raise TransientModelError(f"response is incomplete (reason {reason!r})")
        cut_off = reason
    elif status != "completed":
        raise TransientModelError(f"response has not completed (status {status!r})")
    output = raw.get("output")
    if not isinstance(output, list):
        raise TransientModelError("response has no output")
    texts: list[str] = []
    calls: list[ToolCall] = []
    replay: list[Json] = []
    for index, item in enumerate(output):
        if not isinstance(item, dict):
            raise TransientModelError("response output item is not an object")
        if item.get("type") == "function_call":
            if cut_off:
                continue
            calls.append(_function_call(item, index))
        elif item.get("type") == "message":
            texts += _message_texts(item)
        # Other items (reasoning, the provider's own tools) answer nothing of ours, but
        # are the model's: the next request carries them back.
        replay.append(item)
    usage = raw.get("usage")
    return ModelResponse(
        raw=raw,
        text="".join(texts) or None,
        tool_calls=calls,
        usage=usage if isinstance(usage, dict) else {},
        tokens=count_tokens(usage, ("input_tokens",), "output_tokens"),
        message={"role": "assistant", "content": replay},
        cut_off=cut_off,
    )


def _failure(code: Any, message: Any, what: str) -> ModelError:
    """The adapter's error for a failed response or stream, by the provider's ``code``."""
    text = f"{what}: {code or 'error'}" + (f": {message}" if message else "")
    return TransientModelError(text) if code in _TRANSIENT_CODES else ModelError(text)


def _message_texts(item: Json) -> list[str]:
    texts = []
    for part in item.get("content") or []:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "output_text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal":
            raise ModelError(f"the model refused to answer: {part.get('refusal')}")
    return texts


def _function_call(item: Json, index: int) -> ToolCall:
    """A ``function_call`` item as a tool call, read as chat completions' are."""
    function = {"name": item.get("name"), "arguments": item.get("arguments")}
    return read_tool_call({"id": item.get("call_id"), "function": function}, index)


def _text_of(content: Any) -> str:
    """The text of a system message: a string, or chat-completions text parts."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _user_content(content: Any) -> Any:
    """User content as Responses input: a string as it is, chat-completions parts as input
    parts (text and image URLs mapped, others as they are)."""
    if not isinstance(content, list):
        return content or ""
    parts = []
    for part in content:
        if part.get("type") == "text":
            parts.append({"type": "input_text", "text": part.get("text", "")})
        elif part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            parts.append({"type": "input_image", "image_url": url})
        else:
            parts.append(part)
    return parts


def _assistant_items(content: Any, calls: list[Json]) -> list[Json]:
    """An assistant message as input items: its text as a message, the output items this
    adapter replays as they came, its ``tool_calls`` as ``function_call`` items."""
    items: list[Json] = []
    if isinstance(content, str) and content:
        items.append({"role": "assistant", "content": content})
    elif isinstance(content, list):
        for part in content:
            if part.get("type") == "text":  # a chat-completions part
                if part.get("text"):
                    items.append({"role": "assistant", "content": part["text"]})
            else:
                items.append(part)
    for call in calls:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments or {})
        item = {"type": "function_call", "call_id": call["id"], "name": function.get("name")}
        items.append({**item, "arguments": arguments})
    return items


def _function_tool(tool: Json) -> Json:
    """A chat-completions tool schema as a Responses ``function`` tool."""
    function = tool.get("function", tool)
    schema: Json = {
        "type": "function",
        "name": function["name"],
        "parameters": function.get("parameters") or {"type": "object", "properties": {}},
        "strict": False,
    }
    if function.get("description"):
        schema["description"] = function["description"]
    return schema
