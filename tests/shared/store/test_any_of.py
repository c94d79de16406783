"""``any_of``: a list of ids bound as one array on PostgreSQL (one statement text, prepared
once, whatever the length), as an ``IN`` list elsewhere; the same rows either way."""

from __future__ import annotations

import pytest
from sqlalchemy import bindparam, insert, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import asyncpg
from sqlalchemy.engine import Connection

from brainhands.shared.store import Store, schema
from brainhands.shared.store.any_of import any_of
from brainhands.shared.store.hot import hot, run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

_e = schema.entry
BY_SEQ = hot(
    select(_e.c.seq, _e.c.body)
    .where(_e.c.session_id == bindparam("sid"), any_of(_e.c.seq, "seqs"))
    .order_by(_e.c.seq)
)


def test_postgresql_gets_one_statement_for_every_length_and_sqlite_an_in_list() -> None:
    compiled = BY_SEQ.compiled(asyncpg.dialect(), None)
    texts = {compiled.bound({"sid": "s1", "seqs": seqs})[0] for seqs in ([1], [1, 2, 3], [])}
    assert len(texts) == 1
    assert "= ANY (" in texts.pop()
    text = str(BY_SEQ.statement.compile(dialect=sqlite.dialect()))
    assert "entry.seq IN (__[POSTCOMPILE_seqs])" in text
    assert "= 1" not in text  # a comparison already, not wrapped as a boolean value


async def test_it_matches_the_rows_of_the_listed_ids_on_each_backend(store: Store) -> None:
    await store.create_session("s1", compat="v1")
    rows = [
        {"session_id": "s1", "seq": n, "kind": "note", "body": {"n": n}, "created_at": 1.0}
        for n in range(1, 6)
    ]
    await store.backend.write(lambda conn: conn.execute(insert(_e), rows))
    for seqs in ([3], [1, 5], [2, 3, 4], [], [9]):

        def read(conn: Connection, seqs: list[int] = seqs) -> list[tuple[int, object]]:
            return [(r.seq, r.body) for r in run(conn, BY_SEQ, {"sid": "s1", "seqs": seqs})]

        assert await store.backend.read(read) == [(n, {"n": n}) for n in seqs if n <= 5]
