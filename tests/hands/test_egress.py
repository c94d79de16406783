"""A sandbox's way out: the hosts its tool declares, through its proxy, and nothing else.

The rules are checked as functions; the proxy in real bubblewrap sandboxes, against a
server on the host's loopback that counts what reaches it.
"""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from brainhands.hands.egress import allows
from brainhands.hands.sandbox import Sandboxes
from brainhands.shared.tools import Sandbox, host_rule

SANDBOXES = Sandboxes()
PYTHON = "/usr/bin/python3"
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt install bubblewrap"
)


def test_a_host_is_let_through_on_the_ports_its_declaration_names() -> None:
    declared = ("pypi.org", "*.pythonhosted.org", "git.example.com:2222")

    assert allows(declared, "pypi.org", 443) and allows(declared, "PyPI.org.", 80)
    assert not allows(declared, "pypi.org", 22)  # a name alone is the web's ports
    assert not allows(declared, "evil-pypi.org", 443) and not allows(declared, "org", 443)
    assert allows(declared, "files.pythonhosted.org", 443)
    assert allows(declared, "a.b.pythonhosted.org", 80)
    assert not allows(declared, "pythonhosted.org", 443)  # '*.' is the names under it
    assert not allows(declared, "xpythonhosted.org", 443)
    assert allows(declared, "git.example.com", 2222)
    assert not allows(declared, "git.example.com", 443)
    assert not allows((), "pypi.org", 443)


def test_a_declared_host_must_be_a_name_or_address_with_at_most_a_port() -> None:
    assert host_rule("PyPI.org") == ("pypi.org", ())
    assert host_rule("10.0.0.7:8080") == ("10.0.0.7", (8080,))
    assert Sandbox(hosts=("PyPI.org",)).hosts == ("pypi.org",)
    for bad, said in [
        ("https://pypi.org", "a port is a number"),
        ("pypi.org:", "a port is a number"),
        ("pypi.org:70000", "a port is a number"),
        ("*", "not a host a sandbox may reach"),
        ("*.", "not a host a sandbox may reach"),
        ("py pi.org", "not a host a sandbox may reach"),
        ("-pypi.org", "not a host a sandbox may reach"),
    ]:
        with pytest.raises(ValueError, match=said):
            Sandbox(hosts=(bad,))


REACH = """
import json, socket, urllib.request
port, out = {port}, {{}}
out["declared"] = urllib.request.urlopen(f"http://localhost:{{port}}/hello").read().decode()
tunnel = socket.create_connection(("127.0.0.1", 3128))
tunnel.sendall(f"CONNECT localhost:{{port}} HTTP/1.1\\r\\n\\r\\n".encode())
out["connect"] = tunnel.recv(100).decode().split("\\r\\n")[0]
tunnel.sendall(b"ping\\n")
out["echo"] = tunnel.recv(100).decode()
try:
    urllib.request.urlopen(f"http://127.0.0.1:{{port}}/other")
except urllib.error.HTTPError as exc:
    out["undeclared"] = [exc.code, json.load(exc)["error"]]
try:
    socket.create_connection(("127.0.0.1", port), timeout=2)
except OSError as exc:
    out["direct"] = type(exc).__name__
print(json.dumps(out))
"""


@needs_bwrap
@pytest.mark.timeout(30)
async def test_a_sandbox_reaches_its_declared_host_through_its_proxy_and_nothing_else() -> None:
    arrived: list[str] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.readline()
        arrived.append(first.decode().strip())
        if first.startswith(b"GET"):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\nhello, sandbox")
        else:
            writer.write(b"echo " + first)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        with SANDBOXES.scratch() as workdir:
            done = await SANDBOXES.run(
                [PYTHON, "-c", REACH.format(port=port)],
                workdir,
                Sandbox(hosts=(f"localhost:{port}",)),
            )

    assert done.ok, done.stderr.decode()
    said = json.loads(done.stdout)
    assert said["declared"] == "hello, sandbox"
    assert said["connect"] == "HTTP/1.1 200 Connection established"
    assert said["echo"] == "echo ping\n"
    # The same server by another name is not what the tool declared.
    assert said["undeclared"] == [
        403,
        f"127.0.0.1:{port} is not among the hosts this tool declares",
    ]
    assert said["direct"] == "ConnectionRefusedError"  # no route out but the proxy
    assert done.refused == (f"127.0.0.1:{port}",)
    # What reached the host: the declared request, without the proxy's absolute form, and
    # the tunnel's bytes; nothing of the refused request or the direct connection.
    assert arrived == ["GET /hello HTTP/1.1", "ping"]


@needs_bwrap
@pytest.mark.timeout(30)
async def test_a_sandbox_that_declares_no_host_has_no_proxy() -> None:
    code = "import socket; socket.create_connection(('127.0.0.1', 3128), timeout=2)"
    with SANDBOXES.scratch() as workdir:
        done = await SANDBOXES.run([PYTHON, "-c", code], workdir, Sandbox())

    assert done.status == 1 and b"ConnectionRefusedError" in done.stderr
    assert await SANDBOXES.why_not(hosts=True) is None  # the start-up check passes here
