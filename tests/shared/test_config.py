"""The database URLs users write, as the store's drivers take them."""

from __future__ import annotations

import pytest

from brainhands.shared.config import normalize_database_url


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
