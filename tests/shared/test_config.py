"""The database URLs users write, as the store's drivers take them."""

from __future__ import annotations

import pytest

from brainhands.shared.config import (
    CommonSettings,
    load_settings,
    normalize_database_url,
    parse_addresses,
)
from brainhands.shared.errors import ConfigurationError


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
