"""A tiny external email service: the ledger that shows whether an email went out once or twice.

It stands in for a third-party API, so it imports nothing from brainhands and needs only the
standard library. Each email is committed to its own SQLite file before the answer goes out,
so tests can ask it what really happened. ``POST /send`` is idempotent by key,
``POST /send-unsafe`` is not; ``/faults`` injects delays, 503s and lost receipts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import sqlite3
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote

SCHEMA = """
CREATE TABLE IF NOT EXISTS sends (key TEXT PRIMARY KEY, recipient TEXT, subject TEXT,
    body TEXT, receipt TEXT, first_at REAL, attempts INTEGER DEFAULT 1);
CREATE TABLE IF NOT EXISTS unsafe_sends (id INTEGER PRIMARY KEY, key TEXT, recipient TEXT,
    subject TEXT, body TEXT, receipt TEXT, at REAL);
CREATE TABLE IF NOT EXISTS calls (id INTEGER PRIMARY KEY, key TEXT, at REAL, outcome TEXT,
    endpoint TEXT NOT NULL DEFAULT 'send');
"""
SEND_FIELDS = ("key", "to", "subject", "body")


@dataclass
class Faults:
    """Misbehaviour injected into both send endpoints.

    ``fail`` answers 503, storing nothing; ``drop`` commits the email, then closes the
    connection with no response. ``*_next`` counts down over any key; each ``*_keys`` entry is
    used up by one send of that key; ``fail_first`` hits each key's first attempt and
    ``drop_first`` the one that first stores it (both: 503, stored-but-dropped, duplicate).
    """

    delay: float = 0.0
    fail_next: int = 0
    drop_next: int = 0
    fail_keys: list[str] = field(default_factory=list)
    drop_keys: list[str] = field(default_factory=list)
    fail_first: bool = False
    drop_first: bool = False

    def update(self, changes: dict[str, Any]) -> None:
        """Apply a ``POST /faults`` body; ``{"reset": true}`` first turns everything off."""
        # Check every field before changing any: a typo in a test must fail loudly (400).
        bad = sorted(name for name, value in changes.items() if not _fault_ok(name, value))
        if bad:
            raise ValueError(f"unknown or invalid fault fields: {bad}")
        if changes.get("reset"):
            vars(self).update(vars(Faults()))
        for name, value in changes.items():
            if name != "reset":
                setattr(self, name, list(value) if isinstance(value, list) else value)

    def take(self, kind: str, key: str, first: bool) -> bool:
        """Whether fault ``kind`` ("fail"/"drop") hits this send; uses up what matched."""
        keys: list[str] = getattr(self, f"{kind}_keys")
        if key in keys:
            keys.remove(key)
            return True
        left: int = getattr(self, f"{kind}_next")
        if left > 0:
            setattr(self, f"{kind}_next", left - 1)
            return True
        return first and bool(getattr(self, f"{kind}_first"))


def _fault_ok(name: str, value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    if name == "delay":
        return number
    if name in ("fail_next", "drop_next"):
        return number and isinstance(value, int)
    if name in ("fail_keys", "drop_keys"):
        return isinstance(value, list) and all(isinstance(k, str) for k in value)
    return name in ("fail_first", "drop_first", "reset") and isinstance(value, bool)


@dataclass
class Outcome:
    """What one send call did; ``receipt`` is None when a fault failed it (503)."""

    receipt: str | None
    duplicate: bool = False
    drop: bool = False


class Ledger:
    """The SQLite ledger and the fault state behind one lock.

    The lock makes "look the key up, then insert" atomic across the server's threads and uses
    each fault up exactly once; at this size, serialising sends costs nothing.
    """

    def __init__(self, path: Path, faults: Faults) -> None:
        self.faults = faults
        self.lock = threading.Lock()
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        # FULL: an email we answered for must still be in the ledger after a power cut.
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)

    def send(self, msg: dict[str, str], *, unsafe: bool) -> Outcome:
        """Log one send call and store its email, unless a fault fails it."""
        key, now, endpoint = msg["key"], time.time(), "send-unsafe" if unsafe else "send"
        with self.lock, self.db:  # the connection commits, or rolls back on an error
            self.db.execute("BEGIN IMMEDIATE")
            tried = self.db.execute(
                "SELECT 1 FROM calls WHERE key = ? AND endpoint = ?", (key, endpoint)
            ).fetchone()
            failed = self.faults.take("fail", key, first=tried is None)
            out = Outcome(None) if failed else self._store(msg, now, unsafe)
            outcome = "failed" if out.receipt is None else "duplicate" if out.duplicate else "sent"
            self.db.execute(
                "INSERT INTO calls (key, at, outcome, endpoint) VALUES (?, ?, ?, ?)",
                (key, now, outcome + ("-dropped" if out.drop else ""), endpoint),
            )
        return out

    def _store(self, msg: dict[str, str], now: float, unsafe: bool) -> Outcome:
        key, table = msg["key"], "unsafe_sends" if unsafe else "sends"
        row = self.db.execute(f"SELECT receipt FROM {table} WHERE key = ?", (key,)).fetchone()
        if row is not None and not unsafe:
            self.db.execute("UPDATE sends SET attempts = attempts + 1 WHERE key = ?", (key,))
            return Outcome(row[0], duplicate=True, drop=self.faults.take("drop", key, False))
        receipt = f"rcpt-{secrets.token_hex(8)}"
        columns = "key, recipient, subject, body, receipt, " + ("at" if unsafe else "first_at")
        self.db.execute(
            f"INSERT INTO {table} ({columns}) VALUES (?, ?, ?, ?, ?, ?)",
            (key, msg["to"], msg["subject"], msg["body"], receipt, now),
        )
        return Outcome(receipt, drop=self.faults.take("drop", key, first=row is None))

    def faults_now(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply fault ``changes`` (none, for a read) and return all current faults."""
        with self.lock:
            self.faults.update(changes)
            return asdict(self.faults)

    def sent(self, key: str) -> dict[str, Any]:
        """The ``GET /sent/<key>`` answer."""
        with self.lock:
            found = self.db.execute("SELECT receipt, attempts FROM sends WHERE key = ?", (key,))
            row = found.fetchone()
            unsafe = self.db.execute("SELECT COUNT(*) FROM unsafe_sends WHERE key = ?", (key,))
            answer: dict[str, Any] = {"sent": row is not None, "unsafe_count": unsafe.fetchone()[0]}
        if row is not None:
            answer.update(receipt=row[0], count=1, attempts=row[1])
        return answer

    def dump(self) -> dict[str, Any]:
        """The whole ledger, for test assertions."""
        with self.lock:
            sends = self._rows("SELECT key, recipient, subject, receipt, attempts FROM sends")
            unsafe = self._rows("SELECT id, key, recipient, subject, receipt FROM unsafe_sends")
            calls = dict(self.db.execute("SELECT endpoint, COUNT(*) FROM calls GROUP BY endpoint"))
        return {
            "sends": sends,
            "unsafe_sends": unsafe,
            "calls": calls.get("send", 0),
            "unsafe_calls": calls.get("send-unsafe", 0),
        }

    def _rows(self, query: str) -> list[dict[str, Any]]:
        cursor = self.db.execute(query + " ORDER BY rowid")
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor]


class EmailServer(ThreadingHTTPServer):
    """The HTTP server, carrying the ledger its handlers share."""

    daemon_threads = True
    # Many workers send at once; the default backlog of 5 refuses connections under a burst.
    request_queue_size = 256

    def __init__(self, port: int, ledger: Ledger, host: str = "127.0.0.1") -> None:
        super().__init__((host, port), Handler)
        self.ledger = ledger

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-delay is normal here; only real bugs deserve a traceback.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    """Routes the endpoints; HTTP/1.0, so each connection carries exactly one request."""

    @property
    def ledger(self) -> Ledger:
        """The ledger of the server this request arrived at."""
        return cast(EmailServer, self.server).ledger

    def do_GET(self) -> None:
        """``/health``, ``/ledger``, ``/faults`` and ``/sent/<key>``."""
        if self.path == "/health":
            self._reply(200, {"ok": True})
        elif self.path == "/ledger":
            self._reply(200, self.ledger.dump())
        elif self.path == "/faults":
            self._reply(200, self.ledger.faults_now({}))
        elif self.path.startswith("/sent/") and len(self.path) > len("/sent/"):
            self._reply(200, self.ledger.sent(unquote(self.path.removeprefix("/sent/"))))
        else:
            self._reply(404, {"error": f"no such endpoint: GET {self.path}"})

    def do_POST(self) -> None:
        """``/send``, ``/send-unsafe`` and ``/faults``."""
        if self.path not in ("/send", "/send-unsafe", "/faults"):
            self._reply(404, {"error": f"no such endpoint: POST {self.path}"})
            return
        try:
            body = self._read_json()
            if self.path == "/faults":
                self._reply(200, self.ledger.faults_now(body))
                return
            if not all(isinstance(body.get(f), str) for f in SEND_FIELDS):
                raise ValueError(f"{', '.join(SEND_FIELDS)} must all be strings")
            if not body["key"] or not body["to"]:
                raise ValueError("key and to must not be empty")
        except ValueError as exc:
            self._reply(400, {"error": str(exc)})
            return
        time.sleep(self.ledger.faults.delay)  # unlocked: a slow send must not stall others
        out = self.ledger.send(body, unsafe=self.path == "/send-unsafe")
        if out.receipt is None:
            self._reply(503, {"error": "try again"})
        elif out.drop:
            # The email is committed; now lose the receipt in flight: no status line, no body.
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        else:
            self._reply(200, {"receipt": out.receipt, "duplicate": out.duplicate})

    def _read_json(self) -> dict[str, Any]:
        length = max(0, int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"invalid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ValueError("body must be a JSON object")
        return body

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: the ledger is the record, and test output needs no access log."""


def main(argv: list[str] | None = None) -> None:
    """Parse flags, open the ledger and serve until SIGTERM or Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: all)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--db", type=Path, required=True, help="SQLite ledger file")
    parser.add_argument("--port-file", type=Path, help="write the chosen port here")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each send")
    parser.add_argument("--fail-first", action="store_true", help="503 on each key's 1st try")
    parser.add_argument("--drop-first", action="store_true", help="drop each key's 1st receipt")
    args = parser.parse_args(argv)
    faults = Faults(delay=args.delay, fail_first=args.fail_first, drop_first=args.drop_first)
    server = EmailServer(args.port, Ledger(args.db, faults), host=args.host)
    port = server.server_address[1]
    if args.port_file:
        # Write then rename, so a reader polling for the file never sees it half-written.
        tmp = args.port_file.with_name(args.port_file.name + ".tmp")
        tmp.write_text(f"{port}\n")
        os.replace(tmp, args.port_file)
    print(f"listening on {args.host}:{port}", flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop cleanly, like Ctrl-C
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    server.server_close()
    server.ledger.db.close()


if __name__ == "__main__":
    main()
