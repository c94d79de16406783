"""The graph bookkeeper example run as its docstring says: a Hands and a Brain serving its
one module, a session answered with the graph's last message, one sale in its ledger."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from tests.helpers.brains import BrainHarness
from tests.helpers.processes import spawn_module
from tests.helpers.submitting import submit_input

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

MODULE = "brainhands.examples.graph_bookkeeper.graph"


async def test_the_graph_bookkeeper_records_the_sale_once_and_answers(
    brains: BrainHarness, tmp_path: Path
) -> None:
    ledger = tmp_path / "books.db"
    env = brains.settings(BOOKS_LEDGER=str(ledger))
    hands = spawn_module(
        "brainhands", "hands", "--pool", "books", "--tools", MODULE, env=env, log=tmp_path / "h.log"
    )
    brains.processes.append(hands)
    brains.start_brain(tasks=None, agents=MODULE, BOOKS_LEDGER=str(ledger))

    await submit_input(
        brains.store,
        brains.env.topology,
        session_id="books-1",
        request_id="r1",
        input={"agent": "graph-bookkeeper", "text": "Ann bought tea for 4."},
        compat="v1",
    )
    answer = await brains.answer(session_id="books-1", within=45)

    assert answer.answer == {"output": "sold tea for 4; invoiced ann for 4", "turns": 0}
    _, (sale, invoice) = await brains.store.queries.history("books-1")
    assert [(c.tool, c.status) for c in (sale, invoice)] == [
        ("graph-bookkeeper.record_sale", "succeeded"),
        ("graph-bookkeeper.send_invoice", "succeeded"),
    ]
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        rows = list(db.execute("select operation_id, item, amount from sales"))
    assert rows == [(sale.operation_id, "tea", 4)]
