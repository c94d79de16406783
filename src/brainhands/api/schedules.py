"""The API's routes for a tenant's schedules (``client.schedules``): create, list, read,
pause, resume, delete. A key reaches its own tenant's schedules only; another tenant's are
not found. Reading needs ``read``; the rest ``submit``, as the ticks are submissions made
for the tenant (and, for a task kind, ``tasks`` too, as a raw input does)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from brainhands.api.bodies import Closed
from brainhands.api.guard import Guarded, acting, caller, needs
from brainhands.client.direct import Client
from brainhands.client.schedules import ScheduleView
from brainhands.shared.errors import ConflictError
from brainhands.shared.schedules import CRON_MAX, EVERY_MAX, SCHEDULE_ID_MAX, TARGET_MAX
from brainhands.shared.tenancy import session_key

ScheduleId = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$", max_length=SCHEDULE_ID_MAX)
]


class ScheduleBody(Closed):
    """A schedule: what each tick submits (to ``agent``, ``input`` its text; or to the
    task kind ``kind``, ``input`` its input) and when (``cron`` read in ``timezone``, or
    ``every`` seconds). Each tick runs in a session of its own, ``<id>@<tick's epoch
    second>``."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$", max_length=SCHEDULE_ID_MAX)
    agent: str | None = Field(default=None, min_length=1, max_length=TARGET_MAX)
    kind: str | None = Field(default=None, min_length=1, max_length=TARGET_MAX)
    input: Any = None
    cron: str | None = Field(default=None, max_length=CRON_MAX)
    """Five fields (minute hour day-of-month month day-of-week)."""
    timezone: str | None = Field(default=None, max_length=64)
    """An IANA time zone (``Europe/Paris``); UTC when left out."""
    every: int | None = Field(default=None, ge=1, le=EVERY_MAX)
    """Seconds between ticks, at whole multiples of it since the epoch."""
    missed: Literal["skip", "run_one"] = "skip"
    """Ticks missed while no sweeper ran: none runs (``skip``), or the latest once."""


class ScheduleOut(BaseModel):
    tenant: str
    id: str
    agent: str | None
    kind: str | None
    input: Any
    cron: str | None
    timezone: str | None
    every: int | None
    missed: str
    state: Literal["active", "paused"]
    next_tick_at: float
    last_tick_at: float | None
    created_by: str
    created_at: float
    updated_by: str
    updated_at: float


def _out(view: ScheduleView) -> ScheduleOut:
    return ScheduleOut.model_validate(view.as_dict())


def schedule_routes(client: Client) -> APIRouter:
    """``/schedules`` (``GET``, ``POST``), ``/schedules/{id}`` (``GET``, ``DELETE``) and
    its ``/pause`` and ``/resume``."""
    app = APIRouter(route_class=Guarded)

    @app.post("/schedules", tags=["schedules"], status_code=201, openapi_extra=needs("submit"))
    async def create(body: ScheduleBody, request: Request) -> ScheduleOut:
        """Create a schedule of the key's tenant; 422 saying why for a bad cron expression,
        time zone or target, 409 if the id is taken."""
        who = caller(request)
        if body.kind is not None and not who.may("tasks"):
            raise HTTPException(403, "a task kind's schedule needs a key with the 'tasks' scope")
        try:
            view = await client.create_schedule(
                session_key(who.tenant, body.id),
                principal=acting(who),
                **body.model_dump(exclude={"id"}),
            )
        except ConflictError as exc:
            raise HTTPException(409, str(exc)) from None
        return _out(view)

    @app.get("/schedules", tags=["schedules"], openapi_extra=needs("read"))
    async def every_schedule(request: Request) -> list[ScheduleOut]:
        """The key's tenant's schedules, by id."""
        return [_out(v) for v in await client.schedules(tenant=caller(request).tenant)]

    @app.get("/schedules/{schedule_id}", tags=["schedules"], openapi_extra=needs("read"))
    async def one(schedule_id: ScheduleId, request: Request) -> ScheduleOut:
        return _out(await client.schedule(session_key(caller(request).tenant, schedule_id)))

    @app.post("/schedules/{schedule_id}/pause", tags=["schedules"], openapi_extra=needs("submit"))
    async def pause(schedule_id: ScheduleId, request: Request) -> ScheduleOut:
        """No tick runs until the schedule is resumed."""
        who = caller(request)
        key = session_key(who.tenant, schedule_id)
        return _out(await client.pause_schedule(key, principal=acting(who)))

    @app.post("/schedules/{schedule_id}/resume", tags=["schedules"], openapi_extra=needs("submit"))
    async def resume(schedule_id: ScheduleId, request: Request) -> ScheduleOut:
        """Tick again from the next tick after now (the ticks of the pause do not run)."""
        who = caller(request)
        key = session_key(who.tenant, schedule_id)
        return _out(await client.resume_schedule(key, principal=acting(who)))

    @app.delete(
        "/schedules/{schedule_id}",
        tags=["schedules"],
        status_code=204,
        openapi_extra=needs("submit"),
    )
    async def delete(schedule_id: ScheduleId, request: Request) -> None:
        """Delete the schedule; the sessions of its past ticks stay."""
        await client.delete_schedule(session_key(caller(request).tenant, schedule_id))

    return app
