"""The webhook transport connects to the address it checked, resolving the host once: a
name that answers differently the next time (DNS rebinding) cannot move the connection."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from brainhands.brain.webhook_transport import PinnedTransport
from brainhands.shared.destinations import AllowList, parse_allow_list
from brainhands.shared.errors import RefusedDestination
from tests.helpers.receivers import Receiver


class Rebinding:
    """A DNS server an attacker runs: its first answer, then another for every later one."""

    def __init__(self, first: str, later: str) -> None:
        self.answers = [first, later]
        self.asked = 0

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked += 1
        return [self.answers[min(self.asked, 2) - 1]]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def client(allow: AllowList, resolve: Rebinding) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=PinnedTransport(allow, resolve=resolve), timeout=5)


async def test_the_post_goes_to_the_checked_address_with_the_hosts_name(
    receiver: Receiver,
) -> None:
    # The name resolves nowhere for the system: only the pinned address reaches the receiver.
    dns = Rebinding("127.0.0.1", "10.0.0.1")
    url = f"http://hooks.example.test:{receiver.port}/hook"
    async with client(parse_allow_list(f"127.0.0.1:{receiver.port}"), dns) as http:
        answer = await http.post(url, content=b"{}")
    assert answer.status_code == 200
    [(headers, body, _)] = receiver.posts
    assert headers["Host"] == f"hooks.example.test:{receiver.port}" and body == b"{}"
    assert dns.asked == 1  # resolved once, for the check: never again to connect


async def test_each_post_is_checked_again_so_a_rebound_name_is_refused(
    receiver: Receiver,
) -> None:
    dns = Rebinding("127.0.0.1", "127.0.0.2")  # the later answer is not allowed
    url = f"http://hooks.example.test:{receiver.port}/hook"
    async with client(parse_allow_list(f"127.0.0.1:{receiver.port}"), dns) as http:
        assert (await http.post(url, content=b"1")).status_code == 200
        with pytest.raises(RefusedDestination, match="loopback"):
            await http.post(url, content=b"2")
    assert [body for _, body, _ in receiver.posts] == [b"1"]


async def test_without_the_allow_list_nothing_reaches_a_loopback_receiver(
    receiver: Receiver,
) -> None:
    async with httpx.AsyncClient(transport=PinnedTransport(AllowList())) as http:
        for url in (
            receiver.url,
            f"http://localhost:{receiver.port}/",
            f"http://2130706433:{receiver.port}/",
            f"http://0x7f.1:{receiver.port}/",
            f"http://[::ffff:127.0.0.1]:{receiver.port}/",
        ):
            with pytest.raises(RefusedDestination):
                await http.post(url, content=b"{}")
    assert receiver.posts == []


def certificate(tmp_path: Path, name: str) -> Path:
    """A self-signed certificate (and its key, in the same file) for ``name``."""
    pem = tmp_path / "receiver.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}",
         "-keyout", str(pem), "-out", str(pem)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return pem


async def test_over_tls_the_certificate_is_checked_against_the_hosts_name(
    tmp_path: Path,
) -> None:
    pem = certificate(tmp_path, "hooks.example.test")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pem)
    trusting = ssl.create_default_context(cafile=str(pem))
    with Receiver(tls=server) as receiver:
        allow = parse_allow_list(f"127.0.0.1:{receiver.port}")
        transport = PinnedTransport(
            allow, resolve=Rebinding("127.0.0.1", "127.0.0.1"), verify=trusting
        )
        async with httpx.AsyncClient(transport=transport, timeout=5) as http:
            # Connected to 127.0.0.1, yet the name is what the server is asked for (SNI) and
            # what its certificate must name.
            url = f"https://hooks.example.test:{receiver.port}/hook"
            assert (await http.post(url, content=b"{}")).status_code == 200
            with pytest.raises(httpx.ConnectError, match=r"certificate|hostname"):
                await http.post(f"https://other.example.test:{receiver.port}/", content=b"{}")
        assert len(receiver.posts) == 1
