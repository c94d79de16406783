"""The tests' MCP ledger server (``tests.helpers.mcp_ledger_server``) as a configuration
entry: over stdio (the Hands starts it) or over streamable HTTP (started here)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.helpers.mcp_ledger_server import open_ledger
from tests.helpers.processes import WORKDIR, spawn_module


def stdio_entry(ledger: Path, **extra: Any) -> dict[str, Any]:
    """A stdio server entry running the ledger server on ``ledger``."""
    return {
        "command": sys.executable,
        "args": ["-m", "tests.helpers.mcp_ledger_server", str(ledger), "stdio"],
        "env": {"PYTHONPATH": str(WORKDIR)},
        **extra,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def http_server(
    ledger: Path, log: Path, *, port: int | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The ledger server over streamable HTTP on loopback (on ``port``, default a free
    one): its process and its URL (the caller waits for it to answer); killed on the way
    out."""
    port = port or free_port()
    proc = spawn_module("tests.helpers.mcp_ledger_server", str(ledger), "http", str(port), log=log)
    try:
        yield proc, f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait()


def ledger_rows(ledger: Path, table: str) -> list[tuple[Any, ...]]:
    """Every row of ``table`` of the server's ledger (none before the server made it)."""
    with contextlib.closing(open_ledger(str(ledger))) as db:
        return list(db.execute(f"select * from {table}"))


def write_config(path: Path, servers: dict[str, Any]) -> Path:
    """A ``BRAINHANDS_MCP_CONFIG`` file of ``servers``."""
    path.write_text(json.dumps({"servers": servers}))
    return path


def kill_servers_of(ledger: Path) -> None:
    """Kill every ledger server still running on ``ledger`` (one whose Hands was killed
    may outlive it until its call ends)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"tests.helpers.mcp_ledger_server" in cmdline and str(ledger).encode() in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
