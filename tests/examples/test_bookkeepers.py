"""The bookkeeper examples run as their docstrings say -- the Pydantic AI agent
(``bookkeeper``) and the LangGraph graph (``graph_bookkeeper``): a Hands and a Brain serving
the example's one module, a session answered, one sale in its ledger."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.brains import BrainHarness
from tests.helpers.processes import spawn_module
from tests.helpers.submitting import submit_input

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.mark.parametrize(
    ("module", "agent", "answer"),
    [
        (
            "brainhands.examples.bookkeeper.agent",
            "bookkeeper",
            # the agent's output, validated as Pydantic AI validates it
            {"output": {"sale": "sold tea for 4", "invoice": "invoiced ann for 4"}, "turns": 3},
        ),
        (
            "brainhands.examples.graph_bookkeeper.graph",
            "graph-bookkeeper",
            # the graph's last message
            {"output": "sold tea for 4; invoiced ann for 4", "turns": 0},
        ),
    ],
)
async def test_a_bookkeeper_records_the_sale_once_and_answers(
    brains: BrainHarness, tmp_path: Path, module: str, agent: str, answer: dict[str, Any]
) -> None:
    ledger = tmp_path / "books.db"
    env = brains.settings(BOOKS_LEDGER=str(ledger))
    hands = spawn_module(
        "brainhands", "hands", "--pool", "books", "--tools", module, env=env, log=tmp_path / "h.log"
    )
    brains.processes.append(hands)
    brains.start_brain(tasks=None, agents=module, BOOKS_LEDGER=str(ledger))

    await submit_input(
        brains.store,
        brains.env.topology,
        session_id="books-1",
        request_id="r1",
        input={"agent": agent, "text": "Ann bought tea for 4."},
        compat="v1",
    )
    answered = await brains.answer(session_id="books-1", within=45)

    assert answered.answer == answer
    _, (sale, invoice) = await brains.store.queries.history("books-1")
    assert [(c.tool, c.status) for c in (sale, invoice)] == [
        (f"{agent}.record_sale", "succeeded"),
        (f"{agent}.send_invoice", "succeeded"),
    ]
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        rows = list(db.execute("select operation_id, item, amount from sales"))
    assert rows == [(sale.operation_id, "tea", 4)]
