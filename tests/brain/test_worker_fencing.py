"""A real Brain worker frozen (SIGSTOP) past its session lease while a phase runs, then
thawed (SIGCONT), changes nothing in the store: its successor's work stands alone."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(120)]

REFUSALS = ("lease_lost", "stale")
"""How a Brain stops work on a lease it no longer holds: by its own lease clock (the
renewer finds the TTL passed), or when the store refuses its fence at the commit."""


def events(brains: BrainHarness, n: int, *names: str) -> list[dict[str, Any]]:
    """The JSON log records of Brain ``n`` whose event is one of ``names``, in order."""
    found = []
    for line in brains.log(n).splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") in names:
            found.append(record)
    return found


def redelivery_handled(brains: BrainHarness, since: float) -> bool:
    """Whether some Brain took a redelivered wake-up after ``since`` and ended its pass."""
    return any(
        e["ts"] > since and e.get("redelivered")
        for n in range(len(brains.processes))
        for e in events(brains, n, "advanced", "busy")
    )


def marks(path: Path) -> list[int]:
    return [int(pid) for pid in path.read_text().split()] if path.exists() else []


async def test_a_brain_paused_past_its_lease_writes_nothing_once_resumed(
    brains: BrainHarness, tmp_path: Path
) -> None:
    started = tmp_path / "marks"
    frozen = brains.start_brain()
    await eventually(
        lambda: bool(events(brains, 0, "consuming")), within=30, what="the first Brain"
    )
    await brains.submit("slow", {"seconds": 3, "marks": str(started)})
    await eventually(lambda: marks(started) == [frozen.pid], within=30, what="the slow phase")

    frozen.send_signal(signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        successor = brains.start_brain()
        record = await brains.answer(within=60)
        paused = time.monotonic() - paused_at
        done = await brains.store.load("s1")
    finally:
        frozen.send_signal(signal.SIGCONT)

    assert paused > brains.lease_ttl_ms / 1000
    assert record.status == "answered"
    assert marks(started) == [frozen.pid, successor.pid]  # the slow phase ran again, elsewhere
    await eventually(lambda: bool(events(brains, 0, *REFUSALS)), within=30, what="the refusal")
    [refusal] = events(brains, 0, *REFUSALS)
    assert refusal["session_id"] == "s1"
    if refusal["event"] == "lease_lost":  # the wake-up was handed back: see its pass too
        await eventually(
            lambda: redelivery_handled(brains, refusal["ts"]),
            within=30,
            what="the pass of the handed-back wake-up",
        )

    final = await brains.store.load("s1")
    log = [(step["phase"], step["pid"]) for step in final.documents["log"].body]
    assert log == [("first", frozen.pid), ("slow", successor.pid), ("last", successor.pid)]
    assert record.answer == {"log": final.documents["log"].body}
    notes = [e.body for e in final.entries if e.kind == "note"]
    assert notes == [{"phase": "slow", "pid": successor.pid}]
    assert final.session.version == done.session.version
    assert final.entries == done.entries
