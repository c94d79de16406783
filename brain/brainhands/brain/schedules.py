"""Firing schedules: the sweeper's part in making each tick one submission.

Each sweep reads the active schedules whose next tick has come, asks ``shared.schedules``
which ticks to submit (``plan_firing``), submits each to its own session with the request id
the tick's time gives (``tick_session_id``), and only then moves the schedule on
(``store.schedules.advance``, a compare-and-set on the next tick it read). A sweeper killed
between a submit and the advance leaves the schedule where it was: the next sweep, its own or
another's, submits the same ticks again, which the store keeps once per
``(session, request_id)``. Two sweepers that both fire a schedule submit the same
submissions, and only one advance succeeds. So however many sweepers run and die, a tick is
submitted once; its wake-up travels by the outbox like any submission's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from brainhands.shared.errors import BrainhandsError
from brainhands.shared.messages import SessionWake, encode
from brainhands.shared.schedules import plan_firing, submission_input, tick_session_id
from brainhands.shared.store import OutboxMessage, ScheduleRecord, Store
from brainhands.shared.tenancy import session_key
from brainhands.shared.topology import Topology

log = logging.getLogger("brainhands.schedules")

LATE_AFTER = 60.0
"""Seconds a tick may be late and still be submitted as on time, by default."""


async def fire_schedules(
    store: Store, topology: Topology, *, late_after: float = LATE_AFTER, now: float | None = None
) -> int:
    """Submit the ticks of every due schedule and move each on; returns how many ticks this
    sweep submitted (a tick some other sweeper submitted too counts here as well). A schedule
    that fails is logged and left for the next sweep; the others still fire."""
    now = time.time() if now is None else now
    submitted = 0
    for schedule in await store.schedules.due(now):
        try:
            submitted += await _fire(store, topology, schedule, now=now, late_after=late_after)
        except (BrainhandsError, ValueError, KeyError) as exc:
            # KeyError: ZoneInfoNotFoundError, a zone the machine's tz database lost since.
            log.warning(
                "schedule %s/%s did not fire: %s",
                schedule.tenant,
                schedule.id,
                exc,
                extra={"event": "schedule_failed", "tenant": schedule.tenant},
            )
    return submitted


async def _fire(
    store: Store, topology: Topology, schedule: ScheduleRecord, *, now: float, late_after: float
) -> int:
    firing = plan_firing(
        schedule.spec,
        schedule.missed,
        due_at=schedule.next_tick_at,
        now=now,
        late_after=late_after,
    )
    payload = submission_input(agent=schedule.agent, kind=schedule.kind, input=schedule.input)

    def wake(key: str) -> Callable[[str], OutboxMessage]:
        def message(compat: str) -> OutboxMessage:
            body = encode(SessionWake(session_id=key, compat=compat, reason="schedule"))
            return OutboxMessage(topology.brain_queue(compat), body)

        return message

    for tick in firing.ticks:
        tick_id = tick_session_id(schedule.id, tick)
        key = session_key(schedule.tenant, tick_id)
        await store.submissions.submit(
            session_id=key,
            request_id=tick_id,
            input=payload,
            compat=schedule.compat,
            wake=wake(key),
            principal=f"schedule:{schedule.id}",
        )
    last = firing.ticks[-1] if firing.ticks else None
    if not await store.schedules.advance(
        schedule, next_tick_at=firing.next_tick_at, last_tick_at=last
    ):
        log.info(
            "schedule %s/%s moved on by another sweeper",
            schedule.tenant,
            schedule.id,
            extra={"event": "schedule_raced", "tenant": schedule.tenant},
        )
    if now - schedule.next_tick_at > late_after:
        log.info(
            "schedule %s/%s missed its ticks from %s on (%s)",
            schedule.tenant,
            schedule.id,
            schedule.next_tick_at,
            schedule.missed,
            extra={"event": "schedule_missed", "tenant": schedule.tenant},
        )
    return len(firing.ticks)
