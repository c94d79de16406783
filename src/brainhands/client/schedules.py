"""Schedules through a ``Client``: create, list, pause, resume and delete a tenant's
schedules. The sweeper fires them (``brain.schedules``); when their ticks fall and what
becomes of missed ones is ``shared.schedules``'s.

A schedule is named like a session: by a tenant's id, or, for an operator's client, by its
store key (``<tenant>/<id>``, or the default tenant's id).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypedDict, Unpack

from brainhands.shared.schedules import (
    check_missed,
    check_schedule_id,
    parse_spec,
    submission_input,
)
from brainhands.shared.storable import check_storable
from brainhands.shared.store import ScheduleRecord, Store
from brainhands.shared.tenancy import split_key


class ScheduleOptions(TypedDict, total=False):
    """What a schedule submits, and when: see ``Client.create_schedule``."""

    agent: str | None
    kind: str | None
    input: Any
    cron: str | None
    timezone: str | None
    every: int | None
    missed: str


@dataclass(frozen=True)
class ScheduleView:
    """A schedule as its tenant sees it (times in epoch seconds)."""

    tenant: str
    id: str
    agent: str | None
    kind: str | None
    input: Any
    cron: str | None
    timezone: str | None
    every: int | None
    missed: str
    state: str
    next_tick_at: float
    last_tick_at: float | None
    created_by: str
    created_at: float
    updated_by: str
    updated_at: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def schedule_view(record: ScheduleRecord) -> ScheduleView:
    spec = record.spec
    return ScheduleView(
        tenant=record.tenant,
        id=record.id,
        agent=record.agent,
        kind=record.kind,
        input=record.input,
        cron=spec.cron,
        timezone=spec.timezone if spec.cron is not None else None,
        every=spec.every,
        missed=record.missed,
        state=record.state,
        next_tick_at=record.next_tick_at,
        last_tick_at=record.last_tick_at,
        created_by=record.created_by,
        created_at=record.created_at,
        updated_by=record.updated_by,
        updated_at=record.updated_at,
    )


def new_schedule(
    key: str, *, compat: str, by: str, now: float, **options: Unpack[ScheduleOptions]
) -> ScheduleRecord:
    """The schedule of store key ``key`` these options describe, first ticking after
    ``now``; ``InvalidRequest`` saying what is wrong with them."""
    tenant, schedule_id = split_key(key)
    check_schedule_id(schedule_id)
    spec = parse_spec(
        cron=options.get("cron"), timezone=options.get("timezone"), every=options.get("every")
    )
    agent, kind, given = options.get("agent"), options.get("kind"), options.get("input")
    submission_input(agent=agent, kind=kind, input=given)  # checks the target
    check_storable(given, "input")
    return ScheduleRecord(
        tenant=tenant,
        id=schedule_id,
        agent=agent,
        kind=kind,
        input=given,
        compat=compat,
        spec=spec,
        missed=check_missed(options.get("missed", "skip")),
        state="active",
        next_tick_at=spec.next_tick(now),
        last_tick_at=None,
        created_by=by,
        created_at=now,
        updated_by=by,
        updated_at=now,
    )


class _Client(Protocol):
    """What the acts need of the ``Client`` they belong to."""

    store: Store
    principal: str
    compat: str
    tenant: str | None

    def key(self, session_id: str) -> str: ...


class ScheduleActs:
    """The schedule acts of a ``Client``."""

    async def create_schedule(
        self: _Client,
        schedule_id: str,
        *,
        principal: str | None = None,
        **options: Unpack[ScheduleOptions],
    ) -> ScheduleView:
        """Create a schedule that submits, at each tick, to ``agent`` (``input``: its text)
        or to the task kind ``kind`` (``input``: its input), as this client's tenant.
        ``cron`` (read in ``timezone``, default UTC) or ``every`` (seconds) say when;
        ``missed`` (``skip``, the default, or ``run_one``) what becomes of ticks missed
        while no sweeper ran. Each tick runs in a session of its own,
        ``<schedule_id>@<tick's epoch second>``. ``InvalidRequest`` for a bad spec or
        target, ``ConflictError`` if the id is taken."""
        record = new_schedule(
            self.key(schedule_id),
            compat=self.compat,
            by=principal or self.principal,
            now=time.time(),
            **options,
        )
        await self.store.schedules.create(record)
        return schedule_view(record)

    async def schedules(self: _Client, *, tenant: str | None = None) -> list[ScheduleView]:
        """The client's tenant's schedules, by id; an operator's client: ``tenant``'s, or
        (None) every tenant's."""
        whose = self.tenant if self.tenant is not None else tenant
        return [schedule_view(r) for r in await self.store.schedules.all(whose)]

    async def schedule(self: _Client, schedule_id: str) -> ScheduleView:
        """One schedule; ``NotFoundError`` if there is none."""
        tenant, own_id = split_key(self.key(schedule_id))
        return schedule_view(await self.store.schedules.get(tenant, own_id))

    async def pause_schedule(
        self: _Client, schedule_id: str, *, principal: str | None = None
    ) -> ScheduleView:
        """Stop the schedule's ticks until it is resumed; ``NotFoundError`` if none."""
        tenant, own_id = split_key(self.key(schedule_id))
        by = principal or self.principal
        return schedule_view(await self.store.schedules.set_state(tenant, own_id, "paused", by=by))

    async def resume_schedule(
        self: _Client, schedule_id: str, *, principal: str | None = None
    ) -> ScheduleView:
        """Tick again, from the next tick after now: the ticks that fell while it was
        paused are not missed ones, and none of them runs. An active schedule is left as
        it is."""
        tenant, own_id = split_key(self.key(schedule_id))
        record = await self.store.schedules.get(tenant, own_id)
        if record.state == "active":  # moving its next tick would drop one that is due
            return schedule_view(record)
        resumed = await self.store.schedules.set_state(
            tenant,
            own_id,
            "active",
            by=principal or self.principal,
            next_tick_at=record.spec.next_tick(time.time()),
        )
        return schedule_view(resumed)

    async def delete_schedule(self: _Client, schedule_id: str) -> None:
        """Delete the schedule (the sessions of its past ticks stay); ``NotFoundError`` if
        there is none."""
        tenant, own_id = split_key(self.key(schedule_id))
        await self.store.schedules.delete(tenant, own_id)
