"""Schedules: when a schedule's ticks fall, and which of them a sweep submits.

A schedule submits to an agent or a task kind, as its tenant, at each tick of its spec: a
cron expression read in a time zone (``cron``, ``timezone``), or every ``every`` seconds
(ticks at whole multiples of ``every`` since the epoch, so they do not drift with the time
a sweep happened to run). Each tick is one submission to a session of its own, whose id and
request id are derived from the schedule's id and the tick's time (``tick_session_id``): a
tick submitted twice, by two sweepers or by one killed between its submit and its advance,
is the same submission, which the store keeps once.

A sweep that finds a schedule due submits every tick that is at most ``late_after`` seconds
old (a sweep runs late by its period, or a little more: those ticks are on time). Older
ticks were missed while nothing ran, and the schedule's ``missed`` policy decides:
``skip`` submits none of them, ``run_one`` submits the latest of them once. Either way the
schedule then waits for its next tick after now.

Everything here is pure: the store keeps the rows (``store.schedules``), the sweeper fires
them (``brain.schedules``), and both ask this module what to do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from brainhands.shared.errors import InvalidRequest
from brainhands.shared.tenancy import NAME

MissedPolicy = Literal["skip", "run_one"]
MISSED_POLICIES: tuple[MissedPolicy, ...] = ("skip", "run_one")
ScheduleState = Literal["active", "paused"]

SCHEDULE_ID_MAX = 48
"""A schedule's id, at most: its ticks' session ids add ``@`` and the tick's epoch second,
and a tenant's session id is at most 64 characters (``shared/tenancy.py``)."""
EVERY_MAX = 366 * 86400
"""The longest interval, in seconds: a year (a longer period is a cron expression's)."""
CRON_MAX = 256
TARGET_MAX = 128
"""An agent's name or a task kind, at most (as the store keeps them)."""
MAX_TICKS_PER_SWEEP = 1000
"""Ticks one sweep submits for one schedule, at most (the oldest on time first): a short
interval and a long ``late_after`` cannot make one sweep submit without end."""


@dataclass(frozen=True)
class ScheduleSpec:
    """When a schedule ticks: ``cron`` in ``timezone``, or every ``every`` seconds."""

    cron: str | None = None
    timezone: str = "UTC"
    every: int | None = None

    def next_tick(self, after: float) -> float:
        """The first tick strictly after ``after`` (epoch seconds)."""
        if self.every is not None:
            return float((math.floor(after / self.every) + 1) * self.every)
        return self._cron(math.floor(after), reverse=False)

    def previous_tick(self, before: float) -> float:
        """The last tick strictly before ``before``."""
        if self.every is not None:
            return float((math.ceil(before / self.every) - 1) * self.every)
        return self._cron(math.ceil(before), reverse=True)

    def ticks(self, since: float, until: float) -> list[float]:
        """The ticks in ``[since, until]``, oldest first (the first ``MAX_TICKS_PER_SWEEP``)."""
        found: list[float] = []
        # Ticks fall on whole seconds: the first after ceil(since) - 1 is the first >= since.
        tick = self.next_tick(math.ceil(since) - 1)
        while tick <= until and len(found) < MAX_TICKS_PER_SWEEP:
            found.append(tick)
            tick = self.next_tick(tick)
        return found

    def _cron(self, at: int, *, reverse: bool) -> float:
        # cronsim reads the expression in the zone of the time it starts from, and gives a
        # time skipped by a DST change at the change, a time repeated by one only once.
        assert self.cron is not None
        start = datetime.fromtimestamp(at, ZoneInfo(self.timezone))
        return next(iter(CronSim(self.cron, start, reverse=reverse))).timestamp()


def parse_spec(*, cron: str | None, timezone: str | None, every: int | None) -> ScheduleSpec:
    """The spec these fields give, or ``InvalidRequest`` saying what is wrong with them."""
    if (cron is None) == (every is None):
        raise InvalidRequest("a schedule has either a cron expression or an interval (every)")
    if every is not None:
        if timezone is not None:
            raise InvalidRequest("timezone goes with a cron expression, not with an interval")
        if isinstance(every, bool) or not isinstance(every, int) or not 1 <= every <= EVERY_MAX:
            raise InvalidRequest(f"every {every!r}: a whole number of seconds, 1 to {EVERY_MAX}")
        return ScheduleSpec(every=every)
    assert cron is not None
    if len(cron) > CRON_MAX:
        raise InvalidRequest(f"cron: at most {CRON_MAX} characters")
    zone = timezone or "UTC"
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidRequest(f"timezone {zone!r}: not a known IANA time zone") from None
    try:
        CronSim(cron, datetime.now(UTC))
    except CronSimError as exc:
        raise InvalidRequest(f"cron {cron!r}: {exc}") from None
    return ScheduleSpec(cron=cron, timezone=zone)


def check_schedule_id(schedule_id: str) -> str:
    """``schedule_id`` if a schedule may be called so; ``InvalidRequest`` otherwise."""
    if not 0 < len(schedule_id) <= SCHEDULE_ID_MAX or not NAME.fullmatch(schedule_id):
        raise InvalidRequest(
            f"schedule id {schedule_id!r}: 1 to {SCHEDULE_ID_MAX} of A-Z a-z 0-9 . _ : - "
            "(starting with a letter or digit)"
        )
    if "@" in schedule_id:
        raise InvalidRequest(f"schedule id {schedule_id!r}: '@' separates a tick's time")
    return schedule_id


def check_missed(missed: str) -> MissedPolicy:
    for policy in MISSED_POLICIES:
        if missed == policy:
            return policy
    raise InvalidRequest(f"missed {missed!r}: one of {', '.join(MISSED_POLICIES)}")


def submission_input(*, agent: str | None, kind: str | None, input: Any) -> dict[str, Any]:
    """What each tick submits: ``{"agent", "text"}`` to an agent (``input`` its text), or
    ``{"kind", "input"}`` to start a task kind; ``InvalidRequest`` unless exactly one is
    named."""
    if (agent is None) == (kind is None):
        raise InvalidRequest("a schedule submits to either an agent or a task kind")
    if not 0 < len(agent or kind or "") <= TARGET_MAX:
        raise InvalidRequest(f"an agent's or a task kind's name: 1 to {TARGET_MAX} characters")
    if agent is not None:
        if input is not None and not isinstance(input, str):
            raise InvalidRequest("an agent's schedule input is its text: a string")
        return {"agent": agent, "text": input or ""}
    return {"kind": kind, "input": input}


def tick_session_id(schedule_id: str, tick: float) -> str:
    """The tenant's session id of the tick at ``tick``: also the tick's request id, so the
    same tick submitted again is the same submission."""
    return f"{schedule_id}@{int(tick)}"


@dataclass(frozen=True)
class Firing:
    """What one sweep does with a due schedule: submit ``ticks`` (oldest first), then move
    the schedule on to ``next_tick_at``."""

    ticks: list[float]
    next_tick_at: float


def plan_firing(
    spec: ScheduleSpec, missed: MissedPolicy, *, due_at: float, now: float, late_after: float
) -> Firing:
    """The firing of a schedule whose next tick was ``due_at``, at ``now``: its ticks up to
    ``late_after`` seconds old, and (``run_one``) the latest one older than that."""
    on_time_since = max(due_at, now - late_after)
    ticks = spec.ticks(on_time_since, now)
    if missed == "run_one" and due_at < on_time_since:
        latest_missed = spec.previous_tick(on_time_since)
        if latest_missed >= due_at:
            ticks.insert(0, latest_missed)
    return Firing(ticks=ticks, next_tick_at=spec.next_tick(now))
