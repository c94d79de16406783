"""The service addresses users write, as the drivers take them: the store's URL, the
broker's nodes, the Redis Sentinels."""

from __future__ import annotations

from pathlib import Path

import pytest

from brainhands.shared.config import (
    CommonSettings,
    broker_node_urls,
    load_settings,
    normalize_database_url,
    parse_addresses,
)
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.startup import reach_store


@pytest.mark.parametrize(
    ("written", "taken"),
    [
        ("postgresql://u@db:5432/app", "postgresql+asyncpg://u@db:5432/app"),
        ("postgres://u@db/app", "postgresql+asyncpg://u@db/app"),
        ("sqlite:///var/brainhands.db", "sqlite+aiosqlite:///var/brainhands.db"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        # libpq's list of servers: each a host parameter, the other parameters kept after.
        (
            "postgresql://u:pw@a:5432,b:5433/app?target_session_attrs=read-write",
            "postgresql+asyncpg://u:pw@/app?host=a:5432&host=b:5433"
            "&target_session_attrs=read-write",
        ),
        ("postgresql+asyncpg://u@a,b/app", "postgresql+asyncpg://u@/app?host=a&host=b"),
    ],
)
def test_the_url_forms_users_write_are_the_drivers(written: str, taken: str) -> None:
    assert normalize_database_url(written) == taken


def test_a_url_of_another_database_is_refused_saying_what_is_taken() -> None:
    with pytest.raises(ValueError, match=r"PostgreSQL URL .* or a SQLite URL"):
        normalize_database_url("mysql://u@db/app")


def test_addresses_are_host_port_pairs_and_a_bad_one_is_named() -> None:
    assert parse_addresses("a:26379, 10.0.0.2:26380") == [("a", 26379), ("10.0.0.2", 26380)]
    with pytest.raises(ValueError, match="'b' is not host:port"):
        parse_addresses("a:1,b")


def test_invalid_sentinels_fail_at_start_up_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRAINHANDS_REDIS_SENTINELS", "s1:26379,s2")
    with pytest.raises(ConfigurationError, match="BRAINHANDS_REDIS_SENTINELS"):
        load_settings(CommonSettings)
    monkeypatch.setenv("BRAINHANDS_REDIS_SENTINELS", "s1:26379,s2:26379")
    assert load_settings(CommonSettings).sentinel_addresses == [("s1", 26379), ("s2", 26379)]


@pytest.mark.parametrize(
    ("written", "nodes"),
    [
        ("amqp://guest:guest@127.0.0.1:5672/", ["amqp://guest:guest@127.0.0.1:5672/"]),
        # A cluster: each node with the one set of credentials, virtual host and options.
        (
            "amqp://u:p%40w@mq-a:5672, mq-b:5673,[::1]:5674/prod?heartbeat=10",
            [
                "amqp://u:p%40w@mq-a:5672/prod?heartbeat=10",
                "amqp://u:p%40w@mq-b:5673/prod?heartbeat=10",
                "amqp://u:p%40w@[::1]:5674/prod?heartbeat=10",
            ],
        ),
        ("amqps://mq-a,mq-b", ["amqps://mq-a", "amqps://mq-b"]),
    ],
)
def test_a_broker_url_names_one_node_or_a_clusters_nodes(written: str, nodes: list[str]) -> None:
    assert broker_node_urls(written) == nodes


@pytest.mark.parametrize(
    ("written", "problem"),
    [
        ("redis://mq:6379", "must be an AMQP URL"),
        ("amqp://u@mq-a:5672,,mq-c:5672/", "'' is not host or host:port"),
        ("amqp://u@mq-a:5672,mq-b:99999/", "'mq-b:99999' is not host or host:port"),
    ],
)
def test_a_bad_broker_url_fails_at_start_up_naming_the_variable_and_the_node(
    monkeypatch: pytest.MonkeyPatch, written: str, problem: str
) -> None:
    monkeypatch.setenv("BRAINHANDS_RABBITMQ_URL", written)
    with pytest.raises(ConfigurationError, match=f"BRAINHANDS_RABBITMQ_URL: .*{problem}"):
        load_settings(CommonSettings)


def test_a_bad_webhook_allow_list_fails_at_start_up_naming_the_variable_and_the_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRAINHANDS_WEBHOOK_ALLOW", "10.0.0.0/8,hooks.internal")
    with pytest.raises(ConfigurationError, match=r"BRAINHANDS_WEBHOOK_ALLOW: .*'hooks\.internal'"):
        load_settings(CommonSettings)
    monkeypatch.setenv("BRAINHANDS_WEBHOOK_ALLOW", "10.0.0.0/8, hooks.internal:8443")
    allow = load_settings(CommonSettings).webhook_allow_list
    assert [str(n) for n in allow.networks] == ["10.0.0.0/8"]
    assert allow.endpoints == {("hooks.internal", 8443)}


async def test_a_bad_object_store_fails_at_start_up_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("BRAINHANDS_WORKSPACE_OBJECTS", "ftp://files.example/objects")
    with pytest.raises(ConfigurationError, match=r"BRAINHANDS_WORKSPACE_OBJECTS: .*s3://"):
        load_settings(CommonSettings)
    # A URL of a known kind that its store refuses fails as the process opens the store.
    monkeypatch.setenv("BRAINHANDS_WORKSPACE_OBJECTS", "s3://")
    settings = load_settings(CommonSettings)
    with pytest.raises(ConfigurationError, match="BRAINHANDS_WORKSPACE_OBJECTS: "):
        await reach_store(
            None,
            f"sqlite:///{tmp_path}/store.db",
            db_schema=None,
            workspace_objects=settings.workspace_objects,
        )
    monkeypatch.setenv("BRAINHANDS_WORKSPACE_OBJECTS", "")
    assert load_settings(CommonSettings).workspace_objects is None
