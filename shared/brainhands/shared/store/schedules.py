"""Schedules as the store keeps them: one row per tenant's schedule, with the time of its next
tick. When ticks fall and which a sweep submits is ``shared.schedules``'s business; this is
only where the rows live, and the one write that must be fenced: moving a schedule on past
the ticks a sweeper submitted (``advance``), a compare-and-set on the next tick it read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Row

from brainhands.shared.errors import ConflictError, NotFoundError
from brainhands.shared.schedules import MissedPolicy, ScheduleSpec, ScheduleState
from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend

_s = schema.schedule


@dataclass(frozen=True)
class ScheduleRecord:
    """A tenant's schedule: what each tick submits (to ``agent`` or ``kind``, with ``input``,
    to Brains of ``compat``), when (``spec``), what becomes of missed ticks, and where it is."""

    tenant: str
    id: str
    agent: str | None
    kind: str | None
    input: Any
    compat: str
    spec: ScheduleSpec
    missed: MissedPolicy
    state: ScheduleState
    next_tick_at: float
    last_tick_at: float | None
    created_by: str
    created_at: float
    updated_by: str
    updated_at: float


def _record(row: Row[Any]) -> ScheduleRecord:
    return ScheduleRecord(
        tenant=row.tenant,
        id=row.id,
        agent=row.agent,
        kind=row.kind,
        input=row.input,
        compat=row.compat,
        spec=ScheduleSpec(cron=row.cron, timezone=row.timezone or "UTC", every=row.every),
        missed=row.missed,
        state=row.state,
        next_tick_at=row.next_tick_at,
        last_tick_at=row.last_tick_at,
        created_by=row.created_by,
        created_at=row.created_at,
        updated_by=row.updated_by,
        updated_at=row.updated_at,
    )


class Schedules:
    """The schedules, reached as ``store.schedules``."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def create(self, record: ScheduleRecord) -> None:
        """Keep a new schedule; ``ConflictError`` if the tenant has one of that id."""
        spec = record.spec
        values = {
            "tenant": record.tenant,
            "id": record.id,
            "agent": record.agent,
            "kind": record.kind,
            "input": record.input,
            "compat": record.compat,
            "cron": spec.cron,
            "timezone": spec.timezone if spec.cron is not None else None,
            "every": spec.every,
            "missed": record.missed,
            "state": record.state,
            "next_tick_at": record.next_tick_at,
            "last_tick_at": record.last_tick_at,
            "created_by": record.created_by,
            "created_at": record.created_at,
            "updated_by": record.updated_by,
            "updated_at": record.updated_at,
        }
        try:
            async with self._backend.transaction() as conn:
                await conn.execute(insert(_s).values(**values))
        except ConflictError:
            raise ConflictError(f"schedule {record.id!r} exists already") from None

    async def get(self, tenant: str, schedule_id: str) -> ScheduleRecord:
        """The schedule, or ``NotFoundError``."""
        query = select(_s).where(_s.c.tenant == tenant, _s.c.id == schedule_id)
        async with self._backend.snapshot() as conn:
            row = (await conn.execute(query)).one_or_none()
        if row is None:
            raise NotFoundError(f"no schedule {schedule_id!r}")
        return _record(row)

    async def all(self, tenant: str | None = None) -> list[ScheduleRecord]:
        """The schedules of ``tenant`` (of every tenant: None), by tenant then id."""
        query = select(_s).order_by(_s.c.tenant, _s.c.id)
        if tenant is not None:
            query = query.where(_s.c.tenant == tenant)
        async with self._backend.snapshot() as conn:
            return [_record(row) for row in await conn.execute(query)]

    async def set_state(
        self,
        tenant: str,
        schedule_id: str,
        state: ScheduleState,
        *,
        by: str,
        next_tick_at: float | None = None,
    ) -> ScheduleRecord:
        """Pause or resume the schedule (resumed, from ``next_tick_at``); ``NotFoundError``
        if there is none. Its next tick moving makes any sweep in flight fail to advance it."""
        values: dict[str, Any] = {"state": state, "updated_by": by, "updated_at": time.time()}
        if next_tick_at is not None:
            values["next_tick_at"] = next_tick_at
        async with self._backend.transaction() as conn:
            done = await conn.execute(
                update(_s).where(_s.c.tenant == tenant, _s.c.id == schedule_id).values(**values)
            )
        if done.rowcount != 1:
            raise NotFoundError(f"no schedule {schedule_id!r}")
        return await self.get(tenant, schedule_id)

    async def delete(self, tenant: str, schedule_id: str) -> None:
        """Delete the schedule (its ticks' sessions stay); ``NotFoundError`` if there is none."""
        async with self._backend.transaction() as conn:
            done = await conn.execute(
                delete(_s).where(_s.c.tenant == tenant, _s.c.id == schedule_id)
            )
        if done.rowcount != 1:
            raise NotFoundError(f"no schedule {schedule_id!r}")

    async def due(self, now: float, *, limit: int = 100) -> list[ScheduleRecord]:
        """The active schedules whose next tick is at or before ``now``, most overdue first."""
        query = (
            select(_s)
            .where(_s.c.state == "active", _s.c.next_tick_at <= now)
            .order_by(_s.c.next_tick_at)
            .limit(limit)
        )
        async with self._backend.snapshot() as conn:
            return [_record(row) for row in await conn.execute(query)]

    async def advance(
        self, schedule: ScheduleRecord, *, next_tick_at: float, last_tick_at: float | None
    ) -> bool:
        """Move ``schedule`` on to ``next_tick_at`` (and, if a tick was submitted, record the
        latest as ``last_tick_at``), if it is still active at the next tick it was read
        with; False if another sweeper moved it first, or it was paused, resumed or
        deleted meanwhile."""
        values: dict[str, Any] = {"next_tick_at": next_tick_at}
        if last_tick_at is not None:
            values["last_tick_at"] = last_tick_at
        async with self._backend.transaction() as conn:
            done = await conn.execute(
                update(_s)
                .where(
                    _s.c.tenant == schedule.tenant,
                    _s.c.id == schedule.id,
                    _s.c.state == "active",
                    _s.c.next_tick_at == schedule.next_tick_at,
                )
                .values(**values)
            )
        return done.rowcount == 1
