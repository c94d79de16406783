"""Compensation under SIGKILL: a trip booked in three steps whose third fails is undone
once, the most recent booking first, judged at the external ledger (the email service's
idempotent sends stand in for a booking service: ``tests.helpers.booking_tools``) -- with
the Brain killed right after it dispatched the first undo, and the Hands killed right after
an undo reached the ledger, before its outcome was recorded.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from brainhands.brain.compensation import EFFECTS_DOCUMENT
from brainhands.shared.store import OperationRecord, schema
from tests.helpers.cluster import CHAOS_REPORT, Cluster
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module
from tests.helpers.submitting import submit_input

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(240)]

BRAIN = ["brain", "--compat", "v1", "--tasks", "tests.helpers.booking"]
HANDS = ["hands", "--pool", "email", "--tools", "tests.helpers.booking_tools"]


def start(
    cluster: Cluster, name: str, *, victim: str | None = None, **extra: str
) -> subprocess.Popen[bytes]:
    """Worker ``name`` (brain-*, hands-*) of the booking deployment; ``victim``: the Brain
    dies after the commit that dispatches its ``victim``-th undo (``undo_victim``)."""
    argv = BRAIN if name.startswith("brain") else HANDS
    module, args = (
        ("tests.helpers.undo_victim", [victim, *argv]) if victim else ("brainhands", argv)
    )
    proc = spawn_module(
        module, *args, env=cluster.settings(**extra), log=cluster.tmp_path / f"{name}.log"
    )
    cluster.procs[name] = proc  # stopped with the deployment
    return proc


async def died(proc: subprocess.Popen[bytes], what: str) -> None:
    await eventually(lambda: proc.poll() is not None, within=60, what=what)


@pytest.mark.parametrize("kill", ["brain", "hands", "brain+hands"])
async def test_a_trip_whose_third_step_fails_is_undone_once_across_kills(
    cluster: Cluster, tmp_path: Path, kill: str
) -> None:
    marker = tmp_path / "hands-killed"
    cluster.start("sweeper")
    brain = start(cluster, "brain-1", victim="1" if "brain" in kill else None)
    hands_env = {"BOOKING_KILL_AFTER_CANCEL": str(marker)} if "hands" in kill else {}
    hands = start(cluster, "hands-1", **hands_env)
    await submit_input(
        cluster.store,
        cluster.env.topology,
        session_id="trip-1",
        request_id="r1",
        input={"kind": "trip", "input": {"trip": "trip-1", "fail": ["car"]}},
        compat="v1",
    )
    cluster.sessions.append("trip-1")

    if "brain" in kill:
        await died(brain, "the Brain to die after dispatching the first undo")
        cluster.kills["SIGKILL brain"] += 1
        start(cluster, "brain-2")
    if "hands" in kill:
        await died(hands, "the Hands to die after an undo reached the ledger")
        assert marker.exists()
        cluster.kills["SIGKILL hands"] += 1
        start(cluster, "hands-2")
    await cluster.wait_done(within=120)

    # At the ledger: two bookings (the car was sold out), each cancelled exactly once, under
    # one key each; the undo the Hands died in was sent twice under its key, kept once.
    ledger = (await cluster.email.ledger())["sends"]
    booked = {s["recipient"]: s["key"] for s in ledger if s["subject"] == "book"}
    cancels = [s for s in ledger if s["subject"] == "cancel"]
    assert sorted(booked) == ["trip-1:flight", "trip-1:hotel"]
    assert Counter(s["recipient"] for s in cancels) == Counter(booked.values())
    assert all(s["key"].endswith("/compensate") for s in cancels)
    if "hands" in kill:
        [repeated] = [s for s in cancels if s["key"] == marker.read_text()]
        assert repeated["attempts"] == 2
    # In the store: the undos ran the flight's first; the trip failed, compensated.
    undos = await undo_operations(cluster)
    assert [op.arguments["item"] for op in undos] == ["flight", "hotel"]
    assert all(op.status == "succeeded" for op in undos)
    record = await cluster.store.submissions.get("trip-1", "r1")
    assert record.status == "failed" and "car not booked" in (record.error or "")
    tasks, _ = await cluster.store.queries.history("trip-1")
    [trip] = [t for t in tasks if t.kind == "trip"]
    assert trip.status == "terminal" and trip.error["compensation"]["status"] == "compensated"
    state = await cluster.store.load("trip-1")
    assert state.documents[EFFECTS_DOCUMENT].body == {"tasks": {}, "requires_action": {}}
    CHAOS_REPORT.append(
        {
            "test": f"compensation, {kill} killed",
            "sessions": 1,
            "emails": len(ledger),
            "kills": dict(cluster.kills),
            "failed": 1,
            "invariants": "each effect undone once, the most recent first, at the ledger",
        }
    )


async def undo_operations(cluster: Cluster) -> list[OperationRecord]:
    o = schema.operation
    async with cluster.store.backend.engine.connect() as conn:
        rows = await conn.execute(select(o.c.operation_id).where(o.c.tool == "cancel_booking"))
        ids = [r.operation_id for r in rows]
    found = await cluster.store.queries.operations_by_ids(ids)
    return sorted(found.values(), key=lambda op: op.created_at)
