"""Whether a parked message's work has settled since: the store's word on the parking queue,
for the operator's ``brainhands dlq``.

A parked message is never the only record of pending work: it is a trigger, and the store
holds the facts it points to (a waiting tool task, an outcome not applied, a session with
open work), which the sweeper finds again. ``judge_parked`` reads those facts, so that
purging a message whose work has settled loses nothing. It lives on the operator's side so
that messaging (``shared.parking``) never reads the store.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from brainhands.shared.broker import Broker
from brainhands.shared.messages import (
    CancelNotice,
    LiveNote,
    Message,
    SessionWake,
    ToolJob,
    ToolResult,
)
from brainhands.shared.parking import ParkedMessage, held_parked
from brainhands.shared.statuses import FINAL_OPERATION_STATUSES
from brainhands.shared.store import OperationRecord, Store, TaskRecord

logger = logging.getLogger("brainhands.broker")


@dataclass(frozen=True)
class ParkedWork:
    """What the store says about the work a parked message stands for."""

    state: Literal["settled", "pending", "unknown"]
    """``settled``: nothing waits for the message any more; ``pending``: its work is still
    open (and recorded in the store, where the sweeper finds it); ``unknown``: the store
    cannot tell (a body this build cannot read, rows not in this store)."""
    detail: str


@dataclass(frozen=True)
class PurgeFilter:
    """Which parked messages a purge removes; a message matches every criterion given."""

    settled: bool = False
    session_id: str | None = None
    message_type: str | None = None
    """A protocol message type (``tool_job``, ``wake``...) or ``unreadable``."""

    def matches(self, parked: ParkedMessage, work: ParkedWork) -> bool:
        return (
            (not self.settled or work.state == "settled")
            and (self.session_id is None or parked.session_id == self.session_id)
            and (self.message_type is None or parked.message_type == self.message_type)
        )


@dataclass(frozen=True)
class PurgeReport:
    purged: int
    kept: int
    """Messages that matched but were kept: their work is not known to be settled."""


async def judge_parked(store: Store, parked: Sequence[ParkedMessage]) -> list[ParkedWork]:
    """What the store says about the work of each of ``parked``, in two reads."""
    messages = [p.message for p in parked]
    tasks, operations = await store.rows(
        [m.task_id for m in messages if isinstance(m, ToolJob | ToolResult)],
        [m.operation_id for m in messages if isinstance(m, ToolJob | CancelNotice)],
    )
    sessions = await store.queries.sessions_with_open_work(
        [m.session_id for m in messages if isinstance(m, SessionWake)]
    )
    erased = await store.erasures.erased_among(
        [m.session_id for m in messages if isinstance(m, SessionWake | ToolJob | ToolResult)]
    )
    return [parked_work(m, tasks, operations, sessions, erased) for m in messages]


def parked_work(
    message: Message | None,
    tasks: Mapping[str, TaskRecord],
    operations: Mapping[str, OperationRecord],
    sessions: Mapping[str, bool],
    erased: Collection[str] = frozenset(),
) -> ParkedWork:
    """The state of a parked ``message``'s work, from the store's rows (``sessions``: whether
    each session has open work; ``erased``: sessions erased, whose work is gone with them)."""
    if message is None:
        return ParkedWork("unknown", "not a message this build reads")
    if isinstance(message, LiveNote):
        return ParkedWork("settled", "a live note: nothing depends on it")
    if isinstance(message, SessionWake):
        if message.session_id not in sessions:
            return _gone(message.session_id, erased, "session not in this store")
        if sessions[message.session_id]:
            return ParkedWork("pending", "the session has open work")
        return ParkedWork("settled", "the session has no open work")
    op = operations.get(message.operation_id) if not isinstance(message, ToolResult) else None
    if op is not None and op.status in FINAL_OPERATION_STATUSES:
        return ParkedWork("settled", f"operation {op.status}")
    op_state = f"operation {op.status}" if op is not None else "no operation yet"
    if isinstance(message, CancelNotice):
        return ParkedWork("pending", op_state)
    task = tasks.get(message.task_id)
    if task is None:
        return _gone(message.session_id, erased, "task not in this store")
    if task.status == "terminal":
        return ParkedWork("settled", f"task {task.outcome}")
    if isinstance(message, ToolResult):
        return ParkedWork("pending", "outcome not applied yet")
    return ParkedWork("pending", op_state)


def _gone(session_id: str, erased: Collection[str], otherwise: str) -> ParkedWork:
    """Work the store does not have: settled if its session was erased, else unknown."""
    if session_id in erased:
        return ParkedWork("settled", "its session was erased")
    return ParkedWork("unknown", otherwise)


async def purge_parked(
    broker: Broker, store: Store, which: PurgeFilter, *, force: bool = False, limit: int = 20
) -> PurgeReport:
    """Remove those of the first ``limit`` parked messages that ``which`` matches and whose
    work has settled; with ``force``, those whose work is pending or unknown too."""
    purged = kept = 0
    async with held_parked(broker, limit) as held:
        works = await judge_parked(store, [one.parked for one in held])
        for one, work in zip(held, works, strict=True):
            if not which.matches(one.parked, work):
                continue
            if work.state == "settled" or force:
                await one.remove()
                purged += 1
            else:
                kept += 1
        # The rest, left unacked, go back to the parking queue when the block ends.
    logger.info("purged %d parked messages, kept %d still pending", purged, kept)
    return PurgeReport(purged, kept)
