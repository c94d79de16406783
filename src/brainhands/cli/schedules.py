"""``brainhands schedule``: create, list, pause, resume and delete a tenant's schedules
(``client.schedules``); the deployment's sweepers fire them."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from brainhands.cli.acting import settings_for
from brainhands.client.direct import Client
from brainhands.client.schedules import ScheduleView
from brainhands.shared.errors import InvalidRequest


async def schedule(args: argparse.Namespace) -> int:
    async with await Client.from_settings(settings_for(args)) as client:
        if args.action == "list":
            shown = await client.schedules()
            if args.json:
                print(json.dumps([s.as_dict() for s in shown], indent=2))
            for view in [] if args.json else shown:
                print(_line(view))
            return 0
        if args.id is None:
            raise InvalidRequest(f"{args.action}: give the schedule's id")
        if args.action == "create":
            view = await client.create_schedule(
                args.id,
                agent=args.agent,
                kind=args.kind,
                input=_input(args),
                cron=args.cron,
                timezone=args.tz,
                every=args.every,
                missed=args.missed,
            )
        elif args.action == "pause":
            view = await client.pause_schedule(args.id)
        elif args.action == "resume":
            view = await client.resume_schedule(args.id)
        else:
            await client.delete_schedule(args.id)
            print(f"schedule {args.id} deleted")
            return 0
    print(json.dumps(view.as_dict(), indent=2) if args.json else _line(view))
    return 0


def _input(args: argparse.Namespace) -> Any:
    """An agent's input is its text; a task kind's is JSON."""
    if args.input is None or args.agent is not None:
        return args.input
    try:
        return json.loads(args.input)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"--input is not JSON: {exc}") from None


def _line(view: ScheduleView) -> str:
    when = f"cron {view.cron!r} {view.timezone}" if view.cron else f"every {view.every}s"
    target = f"agent {view.agent}" if view.agent else f"kind {view.kind}"
    nxt = datetime.fromtimestamp(view.next_tick_at, UTC).isoformat(timespec="seconds")
    return f"{view.id}  {view.state}  {when}  {target}  missed={view.missed}  next {nxt}"
