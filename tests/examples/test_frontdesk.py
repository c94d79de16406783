"""The front desk example run as its docstring says: a Hands and a Brain serving its one
module, AgentScope's ReAct loop booking the room and telling the guest, a session answered
with the reply's text, one booking in its ledger."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from tests.helpers.brains import BrainHarness
from tests.helpers.processes import spawn_module
from tests.helpers.submitting import submit_input

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

MODULE = "brainhands.examples.frontdesk.agent"


async def test_the_front_desk_books_once_and_tells_the_guest(
    brains: BrainHarness, tmp_path: Path
) -> None:
    ledger = tmp_path / "frontdesk.db"
    env = brains.settings(FRONTDESK_LEDGER=str(ledger))
    hands = spawn_module(
        "brainhands",
        "hands",
        "--pool",
        "frontdesk",
        "--tools",
        MODULE,
        env=env,
        log=tmp_path / "h.log",
    )
    brains.processes.append(hands)
    brains.start_brain(tasks=None, agents=MODULE, FRONTDESK_LEDGER=str(ledger))

    await submit_input(
        brains.store,
        brains.env.topology,
        session_id="desk-1",
        request_id="r1",
        input={"agent": "frontdesk", "text": "Two nights for Ada Lovelace, please."},
        compat="v1",
    )
    answer = await brains.answer(session_id="desk-1", within=45)

    assert answer.answer == {
        "output": "booked 2 nights for Ada Lovelace and told Ada Lovelace",
        "turns": 3,
    }
    _, (book, notify) = await brains.store.queries.history("desk-1")
    assert [(c.tool, c.status) for c in (book, notify)] == [
        ("frontdesk.book_room", "succeeded"),
        ("frontdesk.notify_guest", "succeeded"),
    ]
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        rows = list(db.execute("select operation_id, guest, nights from bookings"))
    assert rows == [(book.operation_id, "Ada Lovelace", 2)]
