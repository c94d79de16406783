"""An event stream's wake-ups: closing and commits first, then notes in order, then pings; a
bounded backlog; one timer pinging every open stream."""

from __future__ import annotations

import asyncio

from brainhands.api.keys import Principal
from brainhands.api.watcher import BACKLOG, Watcher, Watchers
from brainhands.shared.messages import LiveNote


def note(n: int) -> LiveNote:
    return LiveNote(session_id="s1", kind="progress", message=f"n{n}")


def message(news: object) -> str:
    assert isinstance(news, LiveNote), news
    return news.message


async def test_a_commit_goes_before_the_notes_and_counts_once() -> None:
    watcher = Watcher()
    watcher.ping()
    watcher.note(note(1))
    watcher.changed()
    watcher.changed()  # two commits heard before the stream looked: one read covers both
    watcher.note(note(2))

    got = [await watcher.next() for _ in range(4)]

    assert got[0] == "changed"
    assert [message(n) for n in got[1:3]] == ["n1", "n2"]
    assert got[3] == "ping"


async def test_closing_goes_before_anything_else_and_stays() -> None:
    watcher = Watcher()
    watcher.changed()
    watcher.note(note(1))
    watcher.close()
    assert [await watcher.next(), await watcher.next()] == ["closed", "closed"]


async def test_a_waiting_stream_wakes_on_news() -> None:
    watcher = Watcher()
    waiting = asyncio.create_task(watcher.next())
    await asyncio.sleep(0)
    assert not waiting.done()
    watcher.note(note(1))
    assert message(await asyncio.wait_for(waiting, 1)) == "n1"


async def test_a_slow_stream_keeps_the_newest_notes() -> None:
    watcher = Watcher()
    for n in range(BACKLOG + 5):
        watcher.note(note(n))
    assert message(await watcher.next()) == "n5"


async def test_every_open_stream_is_pinged_by_one_timer_and_closed_at_shutdown() -> None:
    watchers = Watchers(period=0.05)
    with watchers.open() as first, watchers.open() as second:
        assert await asyncio.wait_for(first.next(), 1) == "ping"
        assert await asyncio.wait_for(second.next(), 1) == "ping"
        [pinger] = watchers._timers  # no credential check without a way to check
        watchers.close()
        assert [await first.next(), await second.next()] == ["closed", "closed"]
        with watchers.open() as late:  # a stream opening during shutdown ends at once
            assert await late.next() == "closed"
    await asyncio.sleep(0)
    assert pinger.cancelled() and not watchers._timers  # no timer with no stream open


async def test_a_stream_ends_once_the_credential_it_was_opened_with_does() -> None:
    revoked: set[str] = set()

    async def valid(who: Principal) -> bool:
        return who.key_id not in revoked

    watchers = Watchers(period=60, valid=valid, check=0.02)
    alice = Principal("k1", "acme", "alice", frozenset({"read"}))
    bob = Principal("k2", "acme", "bob", frozenset({"read"}))
    with watchers.open(alice) as kept, watchers.open(bob) as ended, watchers.open() as dev:
        revoked.add("k2")
        assert await asyncio.wait_for(ended.next(), 1) == "closed"
        await asyncio.sleep(0.1)  # several checks later, the others still run
        kept.changed()
        dev.changed()
        assert [await kept.next(), await dev.next()] == ["changed", "changed"]
