from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.helpers.services import service_url


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with service_url("postgres") as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with service_url("redis") as url:
        yield url


@pytest.fixture(scope="session")
def rabbitmq_url() -> Iterator[str]:
    with service_url("rabbitmq") as url:
        yield url


@pytest.fixture
def namespace() -> str:
    """A unique prefix for queue names and Redis keys, so tests never share state."""
    return f"t{uuid.uuid4().hex[:12]}"
