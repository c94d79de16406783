"""A real loopback HTTP server for the HTTP model adapters: it records each request and
answers from a queue of replies, so one server speaks whichever protocol the test's replies
do (``completion`` builds a chat-completions answer, ``message`` an Anthropic Messages one).
Like some real servers, it can be told to refuse requests carrying a field it does not know
(``rejected``)."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    events: list[bytes] | None = None
    """Sent instead of ``body`` as server-sent events, ``delay`` apart, then the connection
    is closed."""


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ChatServer:
    """A real HTTP server answering POSTs from a queue of replies.

    ``root_url`` is its root, ``base_url`` the ``/v1`` under it (chat completions' base URL).
    A request whose body has a field named in ``rejected`` is answered 400, as a server
    that does not know the field answers, without taking a reply from the queue.
    """

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self.rejected: set[str] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(length))
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.received.append(Received(self.path, headers, body))
                unknown = sorted(server.rejected & body.keys())
                said = f"Unrecognized request argument supplied: {', '.join(unknown)}"
                error = {"error": {"message": said, "type": "invalid_request_error"}}
                reply = (
                    Reply(400, json.dumps(error).encode()) if unknown else server.replies.popleft()
                )
                if reply.events is not None:
                    self._stream(reply)
                    return
                time.sleep(reply.delay)
                try:
                    self.send_response(reply.status)
                    headers = {"Content-Type": "application/json", **reply.headers}
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except ConnectionError:
                    self.close_connection = True  # the client gave up waiting (timeout test)

            def _stream(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    for event in reply.events or []:
                        self.wfile.write(event)
                        self.wfile.flush()
                        time.sleep(reply.delay)
                except ConnectionError:
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.root_url = f"http://127.0.0.1:{self._httpd.server_port}"
        self.base_url = f"{self.root_url}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def reply(self, status: int, body: Any, **kwargs: Any) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.replies.append(Reply(status, raw, **kwargs))

    def stream(
        self, chunks: list[dict[str, Any]], *, delay: float = 0.0, done: bool = True
    ) -> None:
        """Answer the next request with ``chunks`` as server-sent events, ``delay`` seconds
        apart, then ``data: [DONE]`` (unless ``done`` is false: the stream just stops)."""
        events = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks]
        if done:
            events.append(b"data: [DONE]\n\n")
        self.replies.append(Reply(200, b"", delay=delay, events=events))

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def completion(
    message: dict[str, Any], finish_reason: str = "stop", *, usage: tuple[int, int] = (12, 5)
) -> dict[str, Any]:
    """A chat-completions answer carrying ``message``, reporting ``usage`` (prompt and
    completion tokens) as billed for it."""
    prompt, completion_tokens = usage
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        },
    }


def message(*content: dict[str, Any], stop_reason: str = "end_turn") -> dict[str, Any]:
    """An Anthropic Messages answer carrying the ``content`` blocks."""
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "test-model",
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 5},
    }


def text(value: str) -> dict[str, Any]:
    """A ``text`` content block."""
    return {"type": "text", "text": value}


def tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A ``tool_use`` content block."""
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def thinking(thought: str, signature: str) -> dict[str, Any]:
    """A ``thinking`` content block (extended thinking), signed as the API signs it."""
    return {"type": "thinking", "thinking": thought, "signature": signature}


def redacted_thinking(data: str) -> dict[str, Any]:
    """A ``redacted_thinking`` content block: thinking the API returns encrypted."""
    return {"type": "redacted_thinking", "data": data}


def chunks_of(message: dict[str, Any], *, pieces: int = 3) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects a streaming server sends for ``message``: its
    content in ``pieces`` parts, each tool call's arguments in two, then the finish reason,
    then the usage."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "test-model",
            "choices": [choice],
        }

    out = [chunk({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    size = max(1, -(-len(content) // pieces))
    out += [chunk({"content": content[i : i + size]}) for i in range(0, len(content), size)]
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        head = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": arguments[:half]},
        }
        tail = {"index": index, "function": {"arguments": arguments[half:]}}
        out += [chunk({"tool_calls": [head]}), chunk({"tool_calls": [tail]})]
    out.append(chunk({}, "tool_calls" if message.get("tool_calls") else "stop"))
    usage = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    out.append({**chunk({}), "choices": [], "usage": usage})
    return out


def events_of(message: dict[str, Any], *, pieces: int = 3) -> list[dict[str, Any]]:
    """The events an Anthropic Messages server streams for ``message`` (made by
    ``message()``): each text and thinking block in ``pieces`` parts (a thinking block's
    signature after them), a redacted thinking block whole, each tool input's JSON in two, a
    ``ping`` among them, then the stop reason and the output usage, then ``message_stop``."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**message["usage"], "output_tokens": 1}
    out: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(message["content"]):
        if block["type"] in ("text", "thinking"):
            kind = block["type"]
            opened, whole = {"type": kind, kind: ""}, block[kind]
            size = max(1, -(-len(whole) // pieces))
            deltas = [{"type": f"{kind}_delta", kind: whole[i : i + size]}
                      for i in range(0, len(whole), size)]  # fmt: skip
            if kind == "thinking":
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif block["type"] == "redacted_thinking":
            opened, deltas = block, []
        else:
            opened, arguments = {**block, "input": {}}, json.dumps(block["input"])
            half = len(arguments) // 2
            deltas = [{"type": "input_json_delta", "partial_json": part}
                      for part in (arguments[:half], arguments[half:])]  # fmt: skip
        out.append({"type": "content_block_start", "index": index, "content_block": opened})
        out += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        out.append({"type": "content_block_stop", "index": index})
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": message["usage"]["output_tokens"]}
    out += [{"type": "message_delta", "delta": stop, "usage": usage}, {"type": "message_stop"}]
    return out
