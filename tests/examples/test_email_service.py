"""The example email service as a real subprocess over real HTTP, and its async client.

The service is the external ledger other tests use to prove an email went out once, so its
own idempotency, fault injection and bookkeeping are checked here first.
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from brainhands.examples.notify.email_client import (
    EmailClient,
    EmailRejected,
    EmailServiceUnavailable,
)
from tests.helpers.processes import spawn_module

pytestmark = pytest.mark.timeout(15)

MODULE = "brainhands.examples.notify.email_service"
# No proxy from the environment may sit between a test and a service on 127.0.0.1.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Service:
    """One running email service process."""

    url: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    """Start services as subprocesses (default ledger ``tmp_path/ledger.db``); kills them all."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*flags: str, db: Path | None = None) -> Service:
        run = tmp_path / f"run{len(procs)}"
        run.mkdir()
        port_file, log = run / "port", run / "log"
        proc = spawn_module(
            MODULE,
            *("--port", "0", "--db", str(db or tmp_path / "ledger.db")),
            *("--port-file", str(port_file), *flags),
            log=log,
        )
        procs.append(proc)
        deadline = time.monotonic() + 10
        while not port_file.exists():
            if proc.poll() is not None:
                raise AssertionError(f"service exited {proc.returncode}: {log.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError("service never wrote its port file")
            time.sleep(0.01)
        port = int(port_file.read_text())
        return Service(f"http://127.0.0.1:{port}", port, proc, log)

    yield start
    for proc in procs:
        stop(proc)


@pytest.fixture
def service(start_service: Callable[..., Service]) -> Service:
    return start_service()


def call(service: Service, path: str, payload: Any = None, *, raw: bytes | None = None) -> Any:
    """One request; returns ``(status, json_body)``. POST when there is a body."""
    data = raw if raw is not None else None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        service.url + path, data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with OPENER.open(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def email(key: str, to: str = "ada@example.com") -> dict[str, str]:
    return {"key": key, "to": to, "subject": f"notice {key}", "body": "hello"}


def test_starts_listening_and_reports_health(service: Service) -> None:
    assert call(service, "/health") == (200, {"ok": True})
    deadline = time.monotonic() + 5
    while f"listening on 127.0.0.1:{service.port}" not in service.log.read_text():
        assert time.monotonic() < deadline, service.log.read_text()
        time.sleep(0.01)


def test_same_key_twice_stores_one_email_with_one_receipt(service: Service) -> None:
    status, first = call(service, "/send", email("k1"))
    assert status == 200 and first["duplicate"] is False
    assert first["receipt"].startswith("rcpt-")
    assert call(service, "/send", email("k1")) == (
        200,
        {"receipt": first["receipt"], "duplicate": True},
    )
    _, ledger = call(service, "/ledger")
    assert ledger["sends"] == [
        {
            "key": "k1",
            "recipient": "ada@example.com",
            "subject": "notice k1",
            "receipt": first["receipt"],
            "attempts": 2,
        }
    ]
    assert ledger["calls"] == 2


def test_unsafe_send_twice_stores_two_emails(service: Service) -> None:
    _, one = call(service, "/send-unsafe", email("u1"))
    _, two = call(service, "/send-unsafe", email("u1"))
    assert one["receipt"] != two["receipt"]
    assert one["duplicate"] is two["duplicate"] is False
    _, ledger = call(service, "/ledger")
    assert [(row["key"], row["receipt"]) for row in ledger["unsafe_sends"]] == [
        ("u1", one["receipt"]),
        ("u1", two["receipt"]),
    ]
    assert ledger["sends"] == [] and ledger["unsafe_calls"] == 2 and ledger["calls"] == 0
    assert call(service, "/sent/u1") == (200, {"sent": False, "unsafe_count": 2})


def test_sent_reports_receipt_and_counts(service: Service) -> None:
    key = "order 7/notice"  # a space and a slash must survive the URL
    assert call(service, "/sent/order%207%2Fnotice") == (200, {"sent": False, "unsafe_count": 0})
    _, sent = call(service, "/send", email(key))
    call(service, "/send", email(key))
    call(service, "/send-unsafe", email(key))
    assert call(service, "/sent/order%207%2Fnotice") == (
        200,
        {"sent": True, "receipt": sent["receipt"], "count": 1, "attempts": 2, "unsafe_count": 1},
    )


def test_fail_next_answers_503_and_stores_nothing(service: Service) -> None:
    status, faults = call(service, "/faults", {"fail_next": 2})
    assert status == 200 and faults["fail_next"] == 2
    assert call(service, "/send", email("f1")) == (503, {"error": "try again"})
    assert call(service, "/send-unsafe", email("f2")) == (503, {"error": "try again"})
    _, ledger = call(service, "/ledger")
    assert ledger["sends"] == [] and ledger["unsafe_sends"] == []
    assert ledger["calls"] == 1 and ledger["unsafe_calls"] == 1  # the failures are logged
    status, sent = call(service, "/send", email("f1"))  # the faults are used up
    assert status == 200 and sent["duplicate"] is False
    assert call(service, "/faults")[1]["fail_next"] == 0


def test_drop_next_stores_the_email_but_loses_the_receipt(service: Service) -> None:
    call(service, "/faults", {"drop_next": 1})
    with pytest.raises(http.client.RemoteDisconnected):
        call(service, "/send", email("d1"))
    _, sent = call(service, "/sent/d1")
    assert sent["sent"] is True and sent["receipt"].startswith("rcpt-")
    # A retry with the same key recovers the lost receipt without a second email.
    assert call(service, "/send", email("d1")) == (
        200,
        {"receipt": sent["receipt"], "duplicate": True},
    )
    assert len(call(service, "/ledger")[1]["sends"]) == 1
    assert "Traceback" not in service.log.read_text()  # dropping is quiet, not a crash


def test_dropped_unsafe_send_retried_is_a_double_send(service: Service) -> None:
    call(service, "/faults", {"drop_next": 1})
    with pytest.raises(http.client.RemoteDisconnected):
        call(service, "/send-unsafe", email("u1"))
    assert call(service, "/send", email("x"))[0] == 200
    call(service, "/send-unsafe", email("u1"))
    assert call(service, "/sent/u1")[1]["unsafe_count"] == 2


def test_key_faults_hit_only_listed_keys_once_per_entry(service: Service) -> None:
    call(service, "/faults", {"fail_keys": ["a", "a"], "drop_keys": ["b"]})
    assert call(service, "/send", email("other"))[0] == 200
    assert call(service, "/send", email("a"))[0] == 503
    assert call(service, "/send", email("a"))[0] == 503
    assert call(service, "/send", email("a"))[0] == 200
    with pytest.raises(http.client.RemoteDisconnected):
        call(service, "/send", email("b"))
    assert call(service, "/send", email("b"))[1]["duplicate"] is True
    status, faults = call(service, "/faults", {"reset": True, "delay": 0.01})
    assert status == 200 and faults == {
        "delay": 0.01,
        "fail_next": 0,
        "drop_next": 0,
        "fail_keys": [],
        "drop_keys": [],
        "fail_first": False,
        "drop_first": False,
    }


def test_delay_slows_every_send(service: Service) -> None:
    call(service, "/faults", {"delay": 0.3})
    started = time.monotonic()
    assert call(service, "/send", email("slow"))[0] == 200
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    assert call(service, "/health")[0] == 200
    assert time.monotonic() - started < 0.3  # only sends are slowed


def test_bad_requests_are_rejected_and_store_nothing(service: Service) -> None:
    status, answer = call(service, "/send", raw=b"{not json")
    assert status == 400 and "invalid JSON" in answer["error"]
    assert call(service, "/send", [1, 2])[0] == 400
    assert call(service, "/send", {"key": "k", "to": "a@b", "subject": "s"})[0] == 400
    assert call(service, "/send", {**email("k"), "subject": 3})[0] == 400
    status, answer = call(service, "/send", email(""))
    assert status == 400 and "must not be empty" in answer["error"]
    assert call(service, "/faults", {"fail_nxt": 1})[0] == 400
    assert call(service, "/faults", {"delay": -1})[0] == 400
    assert call(service, "/faults", {"fail_next": True})[0] == 400
    assert call(service, "/nowhere")[0] == 404
    assert call(service, "/nowhere", {})[0] == 404
    assert call(service, "/ledger") == (
        200,
        {"sends": [], "unsafe_sends": [], "calls": 0, "unsafe_calls": 0},
    )


def test_cli_flags_fail_then_drop_then_answer_duplicate(
    start_service: Callable[..., Service],
) -> None:
    service = start_service("--fail-first", "--drop-first")
    for key in ("n1", "n2"):  # per key, not just once
        assert call(service, "/send", email(key)) == (503, {"error": "try again"})
        with pytest.raises(http.client.RemoteDisconnected):
            call(service, "/send", email(key))
        status, answer = call(service, "/send", email(key))
        assert status == 200 and answer["duplicate"] is True
        assert call(service, "/sent/" + key)[1]["receipt"] == answer["receipt"]


def test_cli_delay(start_service: Callable[..., Service]) -> None:
    service = start_service("--delay", "0.25")
    assert call(service, "/faults")[1]["delay"] == 0.25
    started = time.monotonic()
    call(service, "/send", email("k"))
    assert time.monotonic() - started >= 0.25


def test_ledger_survives_a_restart(start_service: Callable[..., Service]) -> None:
    first = start_service()
    _, sent = call(first, "/send", email("k"))
    stop(first.proc)
    assert first.proc.returncode == 0  # SIGTERM is a clean stop
    second = start_service()
    assert call(second, "/send", email("k"))[1] == {"receipt": sent["receipt"], "duplicate": True}


def test_concurrent_sends_of_one_key_store_one_email(service: Service) -> None:
    call(service, "/faults", {"delay": 0.05})
    answers: list[Any] = []
    threads = [
        threading.Thread(target=lambda: answers.append(call(service, "/send", email("race"))))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({answer[1]["receipt"] for answer in answers}) == 1
    assert sorted(answer[1]["duplicate"] for answer in answers) == [False] + [True] * 7
    assert call(service, "/ledger")[1]["sends"][0]["attempts"] == 8


def test_sigterm_mid_delay_exits_cleanly(service: Service) -> None:
    call(service, "/faults", {"delay": 2})
    errors: list[BaseException] = []

    def send() -> None:
        try:
            call(service, "/send", email("late"))
        except OSError as exc:
            errors.append(exc)

    pending = threading.Thread(target=send)
    pending.start()
    time.sleep(0.2)
    service.proc.send_signal(signal.SIGTERM)
    assert service.proc.wait(timeout=5) == 0
    pending.join()
    assert len(errors) == 1  # the caller saw the connection go, not a receipt
    assert "Traceback" not in service.log.read_text()


# The async client, against the same real service.


async def test_client_send_is_idempotent_and_lookup_finds_it(service: Service) -> None:
    client = EmailClient(service.url)
    assert await client.lookup("c1") is None
    receipt = await client.send("c1", "ada@example.com", "hi", "body")
    assert receipt.startswith("rcpt-")
    assert await client.send("c1", "ada@example.com", "hi", "body") == receipt
    assert await client.lookup("c1") == receipt
    ledger = await client.ledger()
    assert [(s["key"], s["attempts"]) for s in ledger["sends"]] == [("c1", 2)]


async def test_client_send_unsafe_sends_twice(service: Service) -> None:
    client = EmailClient(service.url + "/")
    one = await client.send_unsafe("c1", "ada@example.com", "hi", "body")
    two = await client.send_unsafe("c1", "ada@example.com", "hi", "body")
    assert one != two
    assert len((await client.ledger())["unsafe_sends"]) == 2
    assert await client.lookup("c1") is None


async def test_client_dropped_receipt_is_unavailable_yet_the_email_was_sent(
    service: Service,
) -> None:
    client = EmailClient(service.url)
    await client.set_faults(drop_next=1)
    with pytest.raises(EmailServiceUnavailable, match="POST"):
        await client.send("c1", "ada@example.com", "hi", "body")
    receipt = await client.lookup("c1")
    assert receipt is not None
    assert await client.send("c1", "ada@example.com", "hi", "body") == receipt


async def test_client_503_is_unavailable_and_nothing_was_sent(service: Service) -> None:
    client = EmailClient(service.url)
    faults = await client.set_faults(fail_next=1)
    assert faults["fail_next"] == 1
    with pytest.raises(EmailServiceUnavailable, match="503"):
        await client.send("c1", "ada@example.com", "hi", "body")
    assert await client.lookup("c1") is None


async def test_client_bad_request_is_rejected(service: Service) -> None:
    with pytest.raises(EmailRejected, match="400"):
        await EmailClient(service.url).send("", "ada@example.com", "hi", "body")
    with pytest.raises(EmailRejected, match="400"):
        await EmailClient(service.url).set_faults(nonsense=1)


async def test_client_of_a_stopped_service_is_unavailable(service: Service) -> None:
    stop(service.proc)
    with pytest.raises(EmailServiceUnavailable):
        await EmailClient(service.url).send("c1", "ada@example.com", "hi", "body")


async def test_client_timeout_is_unavailable(service: Service) -> None:
    await EmailClient(service.url).set_faults(delay=1)
    with pytest.raises(EmailServiceUnavailable):
        await EmailClient(service.url, timeout=0.2).send("c1", "ada@example.com", "hi", "body")
