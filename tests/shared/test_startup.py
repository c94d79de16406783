"""Waiting for services at start-up, without any: what is worth another attempt (a pure
function), the pauses, the loop that tries, and what ``/readyz`` says meanwhile. Real
processes behind cut connections: ``test_startup_roles.py``."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import time

import aiormq.exceptions
import asyncpg
import pytest
import redis.exceptions

from brainhands.shared.config import CommonSettings, load_settings, redacted_url
from brainhands.shared.errors import (
    BrokerUnavailable,
    ConfigurationError,
    StartupFailed,
    StoreError,
    StoreUnavailable,
)
from brainhands.shared.health import HealthServer
from brainhands.shared.startup import Startup, retryable_at_startup, startup_pause

pytestmark = pytest.mark.timeout(30)


def caused(outer: BaseException, cause: BaseException) -> BaseException:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"),
        ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
        TimeoutError(),
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
        OSError(errno.EHOSTUNREACH, "No route to host"),
        OSError("Multiple exceptions: [Errno 111] ..., [Errno 99] ..."),
        asyncpg.CannotConnectNowError("the database system is starting up"),
        asyncpg.TooManyConnectionsError("sorry, too many clients already"),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379."),
        redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
        redis.exceptions.TimeoutError("Timeout connecting to server"),
        aiormq.exceptions.AMQPConnectionError(111, "Connect call failed"),
        BrokerUnavailable("cannot connect to RabbitMQ: 127.0.0.1:5672: ..."),
        caused(StoreUnavailable("store unreachable"), ConnectionResetError()),
        caused(BrokerUnavailable("cannot connect"), aiormq.exceptions.AMQPConnectionError()),
    ],
    ids=repr,
)
def test_a_service_that_is_not_there_yet_is_worth_another_attempt(exc: BaseException) -> None:
    assert retryable_at_startup(exc)


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.InvalidPasswordError('password authentication failed for user "x"'),
        asyncpg.InvalidCatalogNameError('database "nodb" does not exist'),
        caused(
            StoreError('store error: database "nodb" does not exist'),
            asyncpg.InvalidCatalogNameError(),
        ),
        ssl.SSLCertVerificationError(1, "certificate verify failed"),
        redis.exceptions.AuthenticationError("invalid username-password pair"),
        aiormq.exceptions.ProbableAuthenticationError("ACCESS_REFUSED"),
        aiormq.exceptions.ConnectionNotAllowed("NOT_ALLOWED - vhost not found"),
        # A wrapper that says "unavailable" over a cause that says "refused": the cause wins.
        caused(
            BrokerUnavailable("cannot connect"), aiormq.exceptions.ProbableAuthenticationError()
        ),
        ValueError("database URL: must be a PostgreSQL URL"),
        PermissionError(errno.EACCES, "Permission denied"),
    ],
    ids=repr,
)
def test_a_refusal_or_a_mistake_is_not(exc: BaseException) -> None:
    assert not retryable_at_startup(exc)


def test_the_pauses_double_up_to_the_cap() -> None:
    assert [startup_pause(n, cap=1.0) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert startup_pause(10_000, cap=10.0) == 10.0


def test_a_url_is_shown_without_its_password() -> None:
    assert redacted_url("amqp://guest:s3cret@h:5672/") == "amqp://guest:***@h:5672/"
    assert redacted_url("redis://:s3cret@h:6379/0") == "redis://:***@h:6379/0"
    assert redacted_url("postgresql://u@h1:5432,h2:5432/db") == "postgresql://u@h1:5432,h2:5432/db"


def test_the_deadline_settings_are_checked_at_start_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRAINHANDS_STARTUP_DEADLINE", "0")
    with pytest.raises(ConfigurationError, match="BRAINHANDS_STARTUP_DEADLINE"):
        load_settings(CommonSettings)
    monkeypatch.setenv("BRAINHANDS_STARTUP_DEADLINE", "2.5")
    monkeypatch.setenv("BRAINHANDS_STARTUP_RETRY_MAX", "soon")
    with pytest.raises(ConfigurationError, match="BRAINHANDS_STARTUP_RETRY_MAX"):
        load_settings(CommonSettings)


class Flaky:
    """An attempt that fails with ``error`` ``failures`` times, then returns "connected"."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.left, self.error, self.calls = failures, error, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.left:
            self.left -= 1
            raise self.error
        return "connected"


async def test_a_service_that_comes_back_is_reached_after_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    said: list[str | None] = []
    startup = Startup(deadline=10, retry_max=0.05, report=said.append)
    attempt = Flaky(4, ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"))
    with caplog.at_level(logging.INFO, logger="brainhands.startup"):
        got = await startup.reach("store", "postgresql://u:pw@db:5432/x", attempt)
    assert got == "connected" and attempt.calls == 5
    assert said == ["store", None]  # waiting for the store, then for nothing
    waiting = [r for r in caplog.records if getattr(r, "event", None) == "startup_waiting"]
    [line] = waiting
    assert line.levelno == logging.WARNING
    assert "waiting for store at postgresql://u:***@db:5432/x" in line.getMessage()
    assert "ConnectionResetError" in line.getMessage()
    assert "BRAINHANDS_STARTUP_DEADLINE" in line.getMessage()
    assert "pw" not in caplog.text


async def test_a_service_that_answers_at_once_is_not_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    said: list[str | None] = []
    startup = Startup(deadline=10, retry_max=0.05, report=said.append)
    with caplog.at_level(logging.INFO, logger="brainhands.startup"):
        assert await startup.reach("redis", "redis://h:6379/0", Flaky(0, OSError())) == "connected"
    assert said == [] and caplog.records == []


async def test_a_service_that_stays_away_ends_the_start_at_the_deadline() -> None:
    startup = Startup(deadline=0.5, retry_max=0.05)
    attempt = Flaky(10_000, ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"))
    began = time.monotonic()
    with pytest.raises(StartupFailed) as failed:
        await startup.reach("rabbitmq", "amqp://guest:guest@mq:5672/", attempt)
    took = time.monotonic() - began
    assert 0.5 <= took < 2.0
    assert attempt.calls > 3  # it kept trying until then
    message = str(failed.value)
    assert message.startswith("gave up waiting for rabbitmq at amqp://guest:***@mq:5672/")
    assert "within 0.5 s (BRAINHANDS_STARTUP_DEADLINE)" in message
    assert "ConnectionRefusedError" in message and "\n" not in message


async def test_an_attempt_that_hangs_is_bounded_by_the_deadline() -> None:
    async def hangs() -> str:
        await asyncio.sleep(60)
        return "never"

    startup = Startup(deadline=0.3, retry_max=0.05)
    began = time.monotonic()
    with pytest.raises(StartupFailed, match="TimeoutError"):
        await startup.reach("store", "postgresql://db/x", hangs)
    assert time.monotonic() - began < 3.0  # the deadline, and the last attempt's moment


async def test_a_refusal_ends_the_start_at_once() -> None:
    attempt = Flaky(1, asyncpg.InvalidPasswordError('password authentication failed for "u"'))
    startup = Startup(deadline=10, retry_max=0.05)
    with pytest.raises(StartupFailed) as failed:
        await startup.reach("store", "postgresql://u:pw@db/x", attempt)
    assert attempt.calls == 1
    assert str(failed.value) == (
        "store at postgresql://u:***@db/x refused this process: "
        'InvalidPasswordError: password authentication failed for "u"'
    )


async def test_readiness_says_what_a_starting_process_waits_for() -> None:
    health = HealthServer()
    assert await health.readiness() == {"ready": False, "waiting_for": "start-up"}
    health.wait_for("store")
    assert await health.readiness() == {"ready": False, "waiting_for": "store"}
    health.wait_for(None)
    assert await health.readiness() == {"ready": False, "waiting_for": "start-up"}

    async def yes() -> bool:
        return True

    async def no() -> bool:
        raise ConnectionResetError

    health.ready_when({"store": yes, "redis": no})
    assert await health.readiness() == {"ready": False, "store": True, "redis": False}
    health.ready_when({"store": yes})
    assert await health.readiness() == {"ready": True, "store": True}
