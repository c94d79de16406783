"""The parking queue: how messages get there, what is there and why, and how they go back.

Two roads lead to the parking queue (``Topology.parking_queue``):

- a work queue dead-lettered the message, usually because it reached the delivery limit
  (RabbitMQ records why in the ``x-death`` header: ``delivery_limit``, ``rejected``, ...);
- a consumer could not decode the body and parked it itself (``park``), recording the
  validation error and the routing key in ``x-brainhands-*`` headers.

Either way the parked message keeps its original routing key, which is where replay sends it.
``list_parked``, ``replay_parked`` and ``purge_parked`` are what the ``brainhands dlq`` command
runs.

A parked message is never the only record of pending work: it is a trigger, and the store
holds the facts it points to (a waiting tool task, an outcome not applied, a session with open
work), which the sweeper finds again. ``judge_parked`` reads those facts to tell an operator
whether a parked message's work has settled since, so that purging it loses nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from aio_pika.abc import AbstractIncomingMessage, AbstractQueue

from brainhands.shared import metrics
from brainhands.shared.errors import BrokerError, InvalidMessage, UnroutableMessage
from brainhands.shared.messages import (
    CancelNotice,
    LiveNote,
    Message,
    SessionWake,
    ToolJob,
    ToolResult,
    decode,
)
from brainhands.shared.store import OperationRecord, Store, TaskRecord
from brainhands.shared.store.queries import sessions_with_open_work
from brainhands.shared.store.records import FINAL_OPERATION_STATUSES

if TYPE_CHECKING:
    # The broker calls ``park``; this module only needs the broker's type.
    from brainhands.shared.broker import Broker, Delivery

logger = logging.getLogger("brainhands.broker")

REASON_HEADER = "x-brainhands-reason"
"""Header of a message parked by brainhands: why (e.g. the validation error of its body)."""
ORIGIN_HEADER = "x-brainhands-origin"
"""Header of a message parked by brainhands: the routing key it was delivered with."""

_MAX_REASON_CHARS = 2000
_PREVIEW_CHARS = 200
# Set by RabbitMQ (or by us when parking); a replayed message starts afresh without them.
_PARKING_HEADERS = frozenset(
    {
        "x-death",
        "x-first-death-exchange",
        "x-first-death-queue",
        "x-first-death-reason",
        "x-last-death-exchange",
        "x-last-death-queue",
        "x-last-death-reason",
        "x-delivery-count",
        REASON_HEADER,
        ORIGIN_HEADER,
    }
)


@dataclass(frozen=True)
class ParkedMessage:
    """What an operator needs to judge one parked message."""

    origin: str
    """The routing key it came from: a work queue's name, where replay sends it."""
    reason: str
    """Why it was parked: a validation error, or RabbitMQ's ``delivery_limit``, ``rejected``..."""
    count: int
    """How many times it was dead-lettered this way (1 for a message brainhands parked)."""
    body_preview: str
    """The start of the body, decoded leniently."""
    message: Message | None = field(default=None, repr=False, compare=False)
    """The body as a protocol message; None when this build cannot read it."""

    @property
    def message_type(self) -> str:
        """The message's ``type``, or ``unreadable``."""
        return self.message.type if self.message is not None else "unreadable"

    @property
    def session_id(self) -> str | None:
        return self.message.session_id if self.message is not None else None


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


async def park(broker: Broker, delivery: Delivery, reason: str) -> None:
    """Copy a delivery to the parking queue with ``reason``, wait for the confirm, ack it.

    The copy keeps body, headers and routing key (recorded as the origin, too). If the copy is
    not confirmed the delivery is requeued: it comes back, and at the delivery limit its queue
    dead-letters it to the parking queue anyway.
    """
    extra = {"routing_key": delivery.routing_key, "reason": reason}
    headers = {
        **delivery.headers,
        REASON_HEADER: reason[:_MAX_REASON_CHARS],
        ORIGIN_HEADER: delivery.routing_key,
    }
    try:
        await broker.publish_body(
            delivery.body,
            delivery.routing_key,
            exchange=broker.topology.dead_letter_exchange,
            headers=headers,
        )
    except BrokerError:
        logger.exception("could not park a message; requeued", extra=extra)
        await delivery.reject(requeue=True)
    else:
        logger.warning("parked a message", extra=extra)
        metrics.PARKED.labels("undecodable" if "invalid message" in reason else "other").inc()
        await delivery.ack()


async def list_parked(broker: Broker, limit: int = 20) -> list[ParkedMessage]:
    """Describe up to ``limit`` parked messages, oldest first, leaving them all parked.

    The messages are taken without ack and go back when the listing channel closes.
    """
    async with broker.side_channel() as channel:
        queue = await channel.get_queue(broker.topology.parking_queue, ensure=False)
        return [_describe(incoming) for incoming in await _take(queue, limit)]


async def judge_parked(store: Store, parked: Sequence[ParkedMessage]) -> list[ParkedWork]:
    """What the store says about the work of each of ``parked``, in two reads."""
    messages = [p.message for p in parked]
    tasks, operations = await store.rows(
        [m.task_id for m in messages if isinstance(m, ToolJob | ToolResult)],
        [m.operation_id for m in messages if isinstance(m, ToolJob | CancelNotice)],
    )
    sessions = await sessions_with_open_work(
        store, [m.session_id for m in messages if isinstance(m, SessionWake)]
    )
    return [parked_work(m, tasks, operations, sessions) for m in messages]


def parked_work(
    message: Message | None,
    tasks: Mapping[str, TaskRecord],
    operations: Mapping[str, OperationRecord],
    sessions: Mapping[str, bool],
) -> ParkedWork:
    """The state of a parked ``message``'s work, from the store's rows (``sessions``: whether
    each session has open work)."""
    if message is None:
        return ParkedWork("unknown", "not a message this build reads")
    if isinstance(message, LiveNote):
        return ParkedWork("settled", "a live note: nothing depends on it")
    if isinstance(message, SessionWake):
        if message.session_id not in sessions:
            return ParkedWork("unknown", "session not in this store")
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
        return ParkedWork("unknown", "task not in this store")
    if task.status == "terminal":
        return ParkedWork("settled", f"task {task.outcome}")
    if isinstance(message, ToolResult):
        return ParkedWork("pending", "outcome not applied yet")
    return ParkedWork("pending", op_state)


async def purge_parked(
    broker: Broker, store: Store, which: PurgeFilter, *, force: bool = False, limit: int = 20
) -> PurgeReport:
    """Remove those of the first ``limit`` parked messages that ``which`` matches and whose
    work has settled; with ``force``, those whose work is pending or unknown too."""
    purged = kept = 0
    async with broker.side_channel() as channel:
        queue = await channel.get_queue(broker.topology.parking_queue, ensure=False)
        taken = await _take(queue, limit)
        parked = [_describe(incoming) for incoming in taken]
        for incoming, one, work in zip(
            taken, parked, await judge_parked(store, parked), strict=True
        ):
            if not which.matches(one, work):
                continue
            if work.state == "settled" or force:
                await incoming.ack()
                purged += 1
            else:
                kept += 1
        # The rest, left unacked, go back to the parking queue when the channel closes.
    logger.info("purged %d parked messages, kept %d still pending", purged, kept)
    return PurgeReport(purged, kept)


async def _take(queue: AbstractQueue, limit: int) -> list[AbstractIncomingMessage]:
    """Up to ``limit`` messages from ``queue``, oldest first, unacked."""
    taken: list[AbstractIncomingMessage] = []
    # Holding each one unacked until the end is what makes the next get return the next.
    while len(taken) < limit:
        incoming = await queue.get(no_ack=False, fail=False)
        if incoming is None:
            break
        taken.append(incoming)
    return taken


async def replay_parked(broker: Broker, limit: int = 20) -> int:
    """Send up to ``limit`` parked messages back to their origin; return how many went.

    Each is republished (confirmed) before it is acked from the parking queue, so a crash in
    between duplicates a message rather than losing it. A message whose origin no longer has
    a queue stays parked. ``BrokerUnavailable`` stops the replay; the rest stays parked.
    """
    replayed = 0
    async with broker.side_channel() as channel:
        queue = await channel.get_queue(broker.topology.parking_queue, ensure=False)
        for _ in range(limit):
            incoming = await queue.get(no_ack=False, fail=False)
            if incoming is None:
                break
            origin = _describe(incoming).origin
            headers = {k: v for k, v in incoming.headers.items() if k not in _PARKING_HEADERS}
            try:
                await broker.publish_body(incoming.body, origin, headers=headers)
            except UnroutableMessage:
                # Left unacked, it returns to the parking queue when the channel closes.
                logger.warning("not replayed: no queue for %s", origin, extra={"origin": origin})
                continue
            await incoming.ack()
            replayed += 1
    logger.info("replayed %d parked messages", replayed)
    return replayed


def _describe(incoming: AbstractIncomingMessage) -> ParkedMessage:
    headers = incoming.headers
    deaths = headers.get("x-death")
    # RabbitMQ puts the most recent dead-lettering first.
    last_death: Mapping[str, Any] = {}
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict):
        last_death = deaths[0]
    routing_keys = last_death.get("routing-keys") or [incoming.routing_key or ""]
    origin = headers.get(ORIGIN_HEADER) or routing_keys[0]
    reason = headers.get(REASON_HEADER) or last_death.get("reason") or "unknown"
    return ParkedMessage(
        origin=_text(origin),
        reason=_text(reason),
        count=int(last_death.get("count", 1)),
        body_preview=incoming.body[:_PREVIEW_CHARS].decode("utf-8", errors="replace"),
        message=_message(incoming.body),
    )


def _message(body: bytes) -> Message | None:
    try:
        return decode(body)
    except InvalidMessage:
        return None


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
