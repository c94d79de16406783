"""A real loopback model server that generates: each call it accepts starts one generation,
counted (``generations``), that takes ``hold`` seconds, as a real model's does, whether or
not the caller stays to hear the end.

It speaks OpenAI's Responses API -- ``POST /v1/responses`` in the foreground (answered when
the generation ends, whole or as server-sent events) or in the background (answered at once
with the response's id, ``queued``), ``GET /v1/responses/{id}`` (``in_progress`` until the
generation ends, then the response; 404 for an id it never made), ``POST
/v1/responses/{id}/cancel`` -- and chat completions (``POST /v1/chat/completions``), so one
count judges a model that can be attached to again and one that cannot.

A generation ends as the next of ``outcomes`` says (fields of the Responses object:
``output``, ``status``, ``incomplete_details``, ``error``, ``usage``), by default with the
text ``done``; a chat completion says the text of its outcome's messages. ``errors`` are
HTTP answers given to the next POSTs instead, starting no generation.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.helpers.chat_server import Received, completion

USAGE = {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}
"""What every generation is billed, unless its outcome says otherwise."""
_ONE = re.compile(r"^/v1/responses/(?P<id>[^/]+)(?P<cancel>/cancel)?$")


def said(text: str) -> dict[str, Any]:
    """An output ``message`` item saying ``text``."""
    part = {"type": "output_text", "text": text, "annotations": []}
    return {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
            "content": [part]}  # fmt: skip


def function_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An output ``function_call`` item."""
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": json.dumps(arguments), "status": "completed"}  # fmt: skip


def reasoning(summary: str) -> dict[str, Any]:
    """An output ``reasoning`` item, as a reasoning model sends it."""
    text = {"type": "summary_text", "text": summary}
    return {"type": "reasoning", "id": "rs_1", "summary": [text]}


def texts_of(response: dict[str, Any]) -> list[str]:
    """The ``output_text`` parts of a response's messages."""
    return [part["text"] for item in response["output"] if item["type"] == "message"
            for part in item["content"] if part["type"] == "output_text"]  # fmt: skip


@dataclass
class Generation:
    response: dict[str, Any]
    """The response it ends as."""
    done_at: float
    cancelled: bool = False

    def now(self) -> dict[str, Any]:
        """The response as a look at it finds it now."""
        if self.cancelled:
            return {**self.response, "status": "cancelled", "output": []}
        if time.time() < self.done_at:
            return {**self.response, "status": "in_progress", "output": [], "usage": None}
        return self.response


class ModelServer:
    """A real HTTP model server on a loopback port; ``base_url`` is its ``/v1`` root."""

    def __init__(self, hold: float = 0.0) -> None:
        self.hold = hold
        self.outcomes: deque[dict[str, Any]] = deque()
        self.errors: deque[tuple[int, dict[str, Any]]] = deque()
        self.received: list[Received] = []
        self.made: dict[str, Generation] = {}
        self._lock = threading.Lock()

        class Handler(_Handler):
            model = self

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def generations(self) -> int:
        """Generations started: what the provider would bill."""
        return len(self.made)

    def polls(self) -> int:
        """Looks at a response by its id."""
        looks = (_ONE.match(r.path) for r in self.received)
        return sum(1 for m in looks if m is not None and not m["cancel"])

    def generate(self, body: dict[str, Any]) -> Generation:
        """Start a generation for the request ``body``: the next outcome, ``hold`` from now."""
        with self._lock:
            outcome = self.outcomes.popleft() if self.outcomes else {"output": [said("done")]}
            response_id = f"resp_{len(self.made) + 1}"
            response = {
                "id": response_id,
                "object": "response",
                "created_at": int(time.time()),
                "model": body.get("model"),
                "status": "completed",
                "background": bool(body.get("background")),
                "error": None,
                "incomplete_details": None,
                "usage": USAGE,
                **outcome,
            }
            generation = Generation(response, done_at=time.time() + self.hold)
            self.made[response_id] = generation
            return generation

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class _Handler(BaseHTTPRequestHandler):
    """Answers one request as the model server ``model`` (set by a subclass per server)."""

    protocol_version = "HTTP/1.1"
    model: ModelServer

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self.model.received.append(Received(self.path, self._headers(), body))
        one = _ONE.match(self.path)
        if one is not None and one["cancel"]:
            self._one(one["id"], cancel=True)
        elif self.model.errors:
            self._send(*self.model.errors.popleft())
        elif self.path == "/v1/responses":
            self._respond(body)
        elif self.path == "/v1/chat/completions":
            self._chat(body)
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_GET(self) -> None:
        self.model.received.append(Received(self.path, self._headers(), {}))
        one = _ONE.match(self.path)
        if one is None:
            self._send(404, {"error": {"message": f"no route {self.path}"}})
        else:
            self._one(one["id"], cancel=False)

    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def _respond(self, body: dict[str, Any]) -> None:
        generation = self.model.generate(body)
        if body.get("background"):
            self._send(200, {**generation.response, "status": "queued", "output": []})
            return
        time.sleep(max(0.0, generation.done_at - time.time()))
        if body.get("stream"):
            self._stream(generation.response)
        else:
            self._send(200, generation.response)

    def _chat(self, body: dict[str, Any]) -> None:
        generation = self.model.generate(body)
        time.sleep(max(0.0, generation.done_at - time.time()))
        usage = generation.response["usage"]
        answer = {"role": "assistant", "content": "".join(texts_of(generation.response))}
        tokens = (usage["input_tokens"], usage["output_tokens"])
        self._send(200, completion(answer, usage=tokens))

    def _one(self, response_id: str, *, cancel: bool) -> None:
        generation = self.model.made.get(response_id)
        if generation is None:
            self._send(404, {"error": {"message": f"No response with id {response_id}"}})
            return
        generation.cancelled |= cancel and generation.now()["status"] == "in_progress"
        self._send(200, generation.now())

    def _stream(self, response: dict[str, Any]) -> None:
        texts = texts_of(response)
        final = {"completed": "response.completed", "incomplete": "response.incomplete"}
        events = [{"type": "response.created", "response": {**response, "output": []}}]
        events += [{"type": "response.output_text.delta", "delta": t} for t in texts]
        events.append({"type": final.get(response["status"], "response.failed"),
                       "response": response})  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for event in events:
            line = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
            self.wfile.write(line.encode())

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except ConnectionError:
            self.close_connection = True  # the caller died waiting: it was generated

    def log_message(self, format: str, *args: Any) -> None:
        pass
