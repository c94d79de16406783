"""Where the real services for tests come from.

In order: an environment variable (``BRAINHANDS_TEST_POSTGRES_URL``,
``BRAINHANDS_TEST_REDIS_URL``, ``BRAINHANDS_TEST_RABBITMQ_URL``); a testcontainers container
where a Docker engine answers; otherwise the test is skipped with a message that says what to
set -- except under ``CI=true``, where a missing service fails the run instead of skipping.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

from brainhands.examples.demo import docker_available

ENV = {
    "postgres": "BRAINHANDS_TEST_POSTGRES_URL",
    "redis": "BRAINHANDS_TEST_REDIS_URL",
    "rabbitmq": "BRAINHANDS_TEST_RABBITMQ_URL",
}


def unavailable(message: str) -> None:
    """Skip the test saying why a service it needs is missing; under ``CI=true``, fail."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def _missing(name: str) -> None:
    unavailable(
        f"{name} is not available: set {ENV[name]} to a running {name} "
        "(or run where a Docker engine can start one)"
    )


@contextlib.contextmanager
def service_url(name: str) -> Iterator[str]:
    """Yield a URL for the named service, starting a container only as a fallback."""
    url = os.environ.get(ENV[name])
    if url:
        yield url
        return
    if not docker_available():
        _missing(name)
    container: Any
    if name == "postgres":
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:16-alpine", driver=None)
        with container:
            yield container.get_connection_url()
    elif name == "redis":
        from testcontainers.redis import RedisContainer

        container = RedisContainer("redis:7-alpine")
        with container:
            host = container.get_container_host_ip()
            yield f"redis://{host}:{container.get_exposed_port(6379)}/0"
    else:
        from testcontainers.rabbitmq import RabbitMqContainer

        container = RabbitMqContainer("rabbitmq:3.13-management-alpine")
        with container:
            host = container.get_container_host_ip()
            yield f"amqp://guest:guest@{host}:{container.get_exposed_port(5672)}/"
