"""A relay process that freezes in the middle of its work, for the test to SIGKILL it there.

    python -m tests.helpers.relay_victim MARKER            # polls, publishes, freezes
    python -m tests.helpers.relay_victim MARKER --mid-wave # freezes halfway through a wave
    python -m tests.helpers.relay_victim MARKER --commit   # commits, freezes before publishing

Store and broker come from the ``BRAINHANDS_*`` variables. With no option the relay polls
the outbox and freezes after the broker confirmed the batch, before marking it sent: the
rows are published but still unsent in the store; the marker file receives their ids. With
``--mid-wave`` it freezes in the middle of publishing its batch: the wave's first message
went out and was confirmed, the others did not leave, none is marked sent. With
``--commit`` the process runs its relay, commits three wake-ups to session ``s2`` (fence
1, version 0) and freezes before the relay publishes them: the rows are committed, handed to
this dead relay, and never sent; the marker file receives their ids.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from brainhands.shared.config import CommonSettings, load_settings
from brainhands.shared.messages import SessionWake, encode
from brainhands.shared.relay import OutboxRelay
from brainhands.shared.runtime import open_services
from brainhands.shared.store import Draft
from brainhands.shared.store.outbox import ClaimedRows

HANDOFF = 2.0
"""Seconds the ``--commit`` victim's rows are left to its own relay."""


def freezer(marker: Path) -> Any:
    async def freeze(_first: Any, rows: list[Any]) -> None:
        ids = [r if isinstance(r, int) else r.id for r in rows]
        marker.write_text(",".join(map(str, ids)))  # noqa: ASYNC240
        time.sleep(120)  # noqa: ASYNC251 - freezes the whole process until it is killed

    return freeze


def freeze_mid_wave(broker: Any, marker: Path) -> None:
    send, sent = broker._send, 0
    first_confirmed = asyncio.Event()

    async def only_the_first_goes_out(*args: Any, **kwargs: Any) -> None:
        nonlocal sent
        sent += 1
        if sent == 1:
            await send(*args, **kwargs)
            first_confirmed.set()
            return
        if sent == 2:
            await first_confirmed.wait()
            marker.write_text("mid-wave")  # noqa: ASYNC240
            time.sleep(120)  # noqa: ASYNC251 - freezes the whole process until it is killed
        await asyncio.Event().wait()

    broker._send = only_the_first_goes_out


async def main(marker: Path, mode: str | None) -> None:
    async with open_services(load_settings(CommonSettings), name="relay-victim") as services:
        if mode != "--commit":
            if mode == "--mid-wave":
                freeze_mid_wave(services.broker, marker)
            else:
                ClaimedRows.mark_sent = freezer(marker)  # type: ignore[method-assign]
            await OutboxRelay(services.store, services.broker).drain_once()
            return
        relay = OutboxRelay(services.store, services.broker, handoff=HANDOFF)
        relay._publish = freezer(marker).__get__(relay)  # type: ignore[method-assign]
        services.store.add_commit_listener(relay.wake)
        running = asyncio.create_task(relay.run(asyncio.Event()))
        await asyncio.sleep(0.1)  # the relay runs: commits are handed to it
        draft = Draft("s2", version=0, fence=1)
        for n in range(3):
            wake = SessionWake(session_id="s2", compat="v1", reason=f"c{n}")
            draft.add_outbox(services.broker.topology.brain_queue("v1"), encode(wake))
        await services.store.commit(draft)
        await running


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None))
