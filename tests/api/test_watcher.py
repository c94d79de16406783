"""An event stream's wake-ups: commits first, then notes in order, a bounded backlog."""

from __future__ import annotations

import asyncio

from brainhands.api.watcher import BACKLOG, Watcher
from brainhands.shared.messages import LiveNote


def note(n: int) -> LiveNote:
    return LiveNote(session_id="s1", kind="progress", message=f"n{n}")


async def test_a_commit_goes_before_the_notes_and_counts_once() -> None:
    watcher = Watcher()
    watcher.note(note(1))
    watcher.changed()
    watcher.changed()  # two commits heard before the stream looked: one read covers both
    watcher.note(note(2))

    got = [await watcher.next() for _ in range(3)]

    assert got[0] is None
    assert [n.message for n in got[1:] if n is not None] == ["n1", "n2"]


async def test_a_waiting_stream_wakes_on_news() -> None:
    watcher = Watcher()
    waiting = asyncio.create_task(watcher.next())
    await asyncio.sleep(0)
    assert not waiting.done()
    watcher.note(note(1))
    got = await asyncio.wait_for(waiting, 1)
    assert got is not None and got.message == "n1"


async def test_a_slow_stream_keeps_the_newest_notes() -> None:
    watcher = Watcher()
    for n in range(BACKLOG + 5):
        watcher.note(note(n))
    first = await watcher.next()
    assert first is not None and first.message == "n5"
