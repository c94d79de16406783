from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from brainhands.shared.config import normalize_database_url
from brainhands.shared.store import Store
from tests.helpers.brains import BrainHarness, brain_deployment
from tests.helpers.object_stores import BUCKET, s3_in_environment, s3_server
from tests.helpers.rabbit import delete_leftovers
from tests.helpers.services import ENV, service_url
from tests.helpers.stores import StoreTarget, drop_pg_schema


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


_namespaces: set[str] = set()


def new_namespace() -> str:
    """A unique prefix for queue names and Redis keys, so tests never share state."""
    name = f"t{uuid.uuid4().hex[:12]}"
    _namespaces.add(name)
    return name


@pytest.fixture
def namespace() -> str:
    """The test's own ``new_namespace()``."""
    return new_namespace()


@pytest.fixture(scope="session", autouse=True)
def broker_leftovers() -> Iterator[None]:
    """Once every test ran: delete what worker processes declared under the tests'
    namespaces on a local RabbitMQ, so runs do not pile up queues on a shared broker."""
    yield
    url = os.environ.get(ENV["rabbitmq"])
    if url:
        delete_leftovers(url, _namespaces)


@pytest.fixture(params=["sqlite", "postgres"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreTarget]:
    """Where a store for one test lives: a fresh SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield StoreTarget(f"sqlite+aiosqlite:///{tmp_path / 'store.db'}", None)
        return
    url = normalize_database_url(request.getfixturevalue("postgres_url"))
    schema = f"t{uuid.uuid4().hex[:12]}"
    yield StoreTarget(url, schema)
    drop_pg_schema(url, schema)


@pytest.fixture
async def store(store_target: StoreTarget) -> AsyncIterator[Store]:
    """A migrated, empty store on each backend."""
    opened = await Store.open(store_target.url, upgrade=True, db_schema=store_target.schema)
    yield opened
    await opened.close()


@pytest.fixture
async def brains(
    postgres_url: str, rabbitmq_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[BrainHarness]:
    """Brain worker processes on PostgreSQL, started and killed as a test says."""
    async with brain_deployment(
        postgres_url, rabbitmq_url, redis_url, namespace, tmp_path
    ) as harness:
        yield harness


@pytest.fixture
async def other_brains(
    postgres_url: str, rabbitmq_url: str, redis_url: str, tmp_path: Path
) -> AsyncIterator[BrainHarness]:
    """A second deployment beside ``brains``: a store, a namespace and log files of its own."""
    logs = tmp_path / "other"
    logs.mkdir()
    async with brain_deployment(
        postgres_url, rabbitmq_url, redis_url, new_namespace(), logs
    ) as harness:
        yield harness


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An S3 server on loopback (``tests.helpers.object_stores``), with ``AWS_*`` set to
    reach it for this process and the ones it starts."""
    log = tmp_path_factory.mktemp("s3") / "server.log"
    with s3_server(log) as endpoint, s3_in_environment(endpoint):
        yield endpoint


@pytest.fixture
def s3_objects(s3_endpoint: str) -> str:
    """A ``BRAINHANDS_WORKSPACE_OBJECTS`` URL of the test's own, in the S3 server's bucket."""
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"
