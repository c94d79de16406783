"""The help desk example run as its docstring says: a Hands and a Brain serving its one
module, triage handing over to refunds, a session answered with the refunds agent's output,
one refund in its ledger."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from brainhands.shared.vocabulary import HOSTED_MODEL_KIND
from tests.helpers.brains import BrainHarness
from tests.helpers.processes import spawn_module
from tests.helpers.submitting import submit_input

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

MODULE = "brainhands.examples.helpdesk.agent"


async def test_the_help_desk_hands_over_and_refunds_once(
    brains: BrainHarness, tmp_path: Path
) -> None:
    ledger = tmp_path / "desk.db"
    env = brains.settings(DESK_LEDGER=str(ledger))
    hands = spawn_module(
        "brainhands", "hands", "--pool", "desk", "--tools", MODULE, env=env, log=tmp_path / "h.log"
    )
    brains.processes.append(hands)
    brains.start_brain(tasks=None, agents=MODULE, DESK_LEDGER=str(ledger))

    await submit_input(
        brains.store,
        brains.env.topology,
        session_id="desk-1",
        request_id="r1",
        input={"agent": "helpdesk", "text": "Refund order 42, please."},
        compat="v1",
    )
    answer = await brains.answer(session_id="desk-1", within=45)

    assert answer.answer == {
        "output": {"refund": "refunded order 42", "notice": "notified the buyer of order 42"},
        "turns": 4,
    }
    _, (refund, notify) = await brains.store.queries.history("desk-1")
    assert [(c.tool, c.status) for c in (refund, notify)] == [
        ("helpdesk.refund", "succeeded"),
        ("helpdesk.notify", "succeeded"),
    ]
    async with brains.client() as client:
        entries = (await client.session("desk-1")).entries
    answered = [e.body["raw"]["agent"] for e in entries if e.kind == HOSTED_MODEL_KIND]
    assert answered == ["triage", "refunds", "refunds", "refunds"]
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        rows = list(db.execute("select operation_id, order_id from refunds"))
    assert rows == [(refund.operation_id, 42)]
