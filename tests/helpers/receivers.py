"""Loopback servers a webhook can be posted to: an HTTP receiver that records each post,
and a TCP listener that answers something that is not HTTP."""

from __future__ import annotations

import socket
import socketserver
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """An HTTP receiver on 127.0.0.1 that answers 503 to the first ``failures`` posts and
    ``status`` to the rest, keeping each post's headers, body and answer (HTTPS with
    ``tls``, a server context)."""

    def __init__(
        self, failures: int = 0, status: int = 200, tls: ssl.SSLContext | None = None
    ) -> None:
        self.posts: list[tuple[dict[str, str], bytes, int]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                answer = 503 if len(receiver.posts) < failures else status
                receiver.posts.append((dict(self.headers), body, answer))
                self.send_response(answer)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/hook"

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class NotHttp:
    """A TCP listener on 127.0.0.1 that answers any connection with a line that is not an
    HTTP response (what a database or a cache port would do)."""

    def __init__(self) -> None:
        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.sendall(b"-ERR unknown command\r\n")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]

    def __enter__(self) -> NotHttp:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port
