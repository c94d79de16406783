"""``brainhands``: one command, one subcommand per role or operator action.

Settings come from ``BRAINHANDS_*`` environment variables (see ``shared.config``); a bad
setting stops the command at start-up with a message naming the variable.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from brain.agent import agent_kinds, load_agent_modules, start_agent_or_task
from brain.client import request_cancel, submit_input, wait_for_answer
from brain.registry import load_task_modules
from brain.settings import BrainSettings
from brain.sweeper import Sweeper
from brain.worker import BrainWorker
from hands.settings import HandsSettings
from hands.worker import HandsWorker
from shared.broker import Broker
from shared.config import CommonSettings, load_settings
from shared.errors import BrainhandsError, ConfigurationError
from shared.keys import Keys
from shared.lease import LeaseManager, connect_redis
from shared.logs import configure_logging
from shared.parking import list_parked, replay_parked
from shared.relay import OutboxRelay
from shared.runtime import Services, open_services, stop_on_signals
from shared.store import OperationLedger, Store, migrate
from shared.store.queries import session_history
from shared.tools import load_tool_modules
from shared.topology import Topology

Command = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]
WORKERS = {"hands", "relay", "brain", "sweeper"}
"""Long-running roles: they log JSON lines."""


async def _migrate(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    store = await Store.open(
        settings.database_url, upgrade=False, db_schema=settings.database_schema
    )
    try:
        before = await migrate.current_revision(store.engine)
        await migrate.upgrade(store.engine, args.revision)
        after = await migrate.current_revision(store.engine)
    finally:
        await store.close()
    print(f"store {_redacted(settings.database_url)}: {before or 'empty'} -> {after}")
    return 0


async def _status(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    store = await Store.open(settings.database_url, db_schema=settings.database_schema)
    try:
        status = await store.status()
    finally:
        await store.close()
    status["store"] = _redacted(settings.database_url)
    status["head"] = migrate.head_revision()
    print(json.dumps(status, indent=2) if args.json else _table(status))
    return 0


async def _hands(args: argparse.Namespace) -> int:
    settings = load_settings(HandsSettings)
    registry = load_tool_modules(args.tools)
    if not registry.in_pool(args.pool):
        raise ConfigurationError(
            f"no tool of pool {args.pool!r} is registered by {', '.join(args.tools)}; "
            f"pools there: {sorted({t.pool for t in registry}) or 'none'}"
        )
    async with open_services(settings, name=f"hands-{args.pool}") as services:
        worker = HandsWorker(
            ledger=OperationLedger(services.store),
            broker=services.broker,
            leases=services.leases(settings.lease_ttl_ms),
            registry=registry,
            pool=args.pool,
            concurrency=args.concurrency or settings.concurrency,
            shutdown_grace=settings.shutdown_grace,
            max_inline_result=settings.max_inline_result,
        )
        await _with_relay(services, worker.run)
    return 0


async def _brain(args: argparse.Namespace) -> int:
    settings = load_settings(BrainSettings)
    tools = load_tool_modules(args.tools or [])
    agents = load_agent_modules(args.agents or [])
    tasks = load_task_modules(args.tasks or []).include(agent_kinds(agents, tools))
    if not tasks.kinds:
        raise ConfigurationError("nothing to run: give --tasks MODULE and/or --agents MODULE")
    async with open_services(settings, name=f"brain-{'-'.join(args.compat)}") as services:
        leases = services.leases(settings.lease_ttl_ms)
        worker = BrainWorker(
            store=services.store,
            broker=services.broker,
            leases=leases,
            tasks=tasks,
            tools=tools,
            compats=args.compat,
            concurrency=settings.concurrency,
            max_restarts=settings.max_restarts,
            shutdown_grace=settings.shutdown_grace,
            start_submission=start_agent_or_task,
        )
        sweeper = _sweeper_of(services, leases, settings)

        async def work(stop: asyncio.Event) -> None:
            jobs = [worker.run(stop)]
            if not args.no_sweeper:
                jobs.append(sweeper.run(stop))
            await asyncio.gather(*jobs)

        await _with_relay(services, work)
    return 0


async def _sweeper(args: argparse.Namespace) -> int:
    settings = load_settings(BrainSettings)
    async with open_services(settings, name="sweeper") as services:
        sweeper = _sweeper_of(services, services.leases(settings.lease_ttl_ms), settings)
        await _with_relay(services, sweeper.run)
    return 0


def _sweeper_of(services: Services, leases: LeaseManager, settings: BrainSettings) -> Sweeper:
    return Sweeper(
        store=services.store,
        broker=services.broker,
        leases=leases,
        period=settings.sweeper_period,
        redispatch_after=settings.redispatch_after,
    )


async def _relay(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    async with open_services(settings, name="relay") as services:
        relay = OutboxRelay(services.store, services.broker, poll_interval=args.poll_interval)
        await relay.run(stop_on_signals())
    return 0


async def _with_relay(services: Services, work: Callable[[asyncio.Event], Any]) -> None:
    """Run ``work`` with an embedded relay woken by this process's commits.

    On a signal the work drains first; the relay stops after it, so outcomes committed
    while draining are still published.
    """
    stop = stop_on_signals()
    relay_stop = asyncio.Event()
    relay = OutboxRelay(services.store, services.broker)
    services.store.add_commit_listener(relay.wake)
    relay_task = asyncio.create_task(relay.run(relay_stop))
    try:
        await work(stop)
    finally:
        relay_stop.set()
        await relay_task
        await relay.drain_once()


async def _submit(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    topology = Topology(settings.namespace, delivery_limit=settings.delivery_limit)
    store = await Store.open(settings.database_url, db_schema=settings.database_schema)
    try:
        try:
            payload = json.loads(args.input)
        except json.JSONDecodeError:
            payload = {"text": args.input}
        receipt = await submit_input(
            store,
            topology,
            session_id=args.session,
            request_id=args.request_id,
            input=payload,
            compat=args.compat,
        )
        record = receipt.submission
        seen = "accepted" if receipt.created else "already accepted earlier; nothing new started"
        print(f"submission {record.id} ({seen}): {record.status}")
        if args.wait:
            record = await wait_for_answer(store, args.session, args.request_id, within=args.wait)
            print(
                json.dumps(
                    {"status": record.status, "answer": record.answer, "error": record.error},
                    indent=2,
                )
            )
            return 0 if record.status == "answered" else 1
    finally:
        await store.close()
    return 0


async def _show(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    store = await Store.open(settings.database_url, db_schema=settings.database_schema)
    try:
        state = await store.load(args.session)
        tasks, operations = await session_history(store.engine, args.session)
    finally:
        await store.close()
    s = state.session
    print(f"session {s.id}  compat={s.compat}  version={s.version}  fence={s.fence}")
    print(f"\nentries ({len(state.entries)}):")
    for e in state.entries:
        print(f"  {e.seq:>4} {e.kind:<12} {json.dumps(e.body)[:110]}")
    print(f"\ntasks ({len(tasks)}):")
    for t in tasks:
        where = t.outcome if t.status == "terminal" else f"{t.status}@{t.phase}"
        blocked = f"  BLOCKED: {t.blocked_reason}" if t.blocked_reason else ""
        print(f"  {t.id[:12]} {t.kind:<18} v{t.kind_version} {where}{blocked}")
    print(f"\noperations ({len(operations)}):")
    for o in operations:
        print(f"  {o.operation_id[:40]:<40} {o.tool:<16} {o.status:<10} attempts={o.attempts}")
    return 0


async def _cancel(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    topology = Topology(settings.namespace, delivery_limit=settings.delivery_limit)
    store = await Store.open(settings.database_url, db_schema=settings.database_schema)
    redis = connect_redis(settings.redis_url)
    try:
        said = await request_cancel(
            store,
            LeaseManager(redis, Keys(settings.namespace)),
            topology,
            session_id=args.session,
            request_id=args.request_id,
        )
    finally:
        await redis.aclose()
        await store.close()
    print(f"submission {args.request_id!r} of session {args.session}: {said}")
    return 0


async def _dlq(args: argparse.Namespace) -> int:
    settings = load_settings(CommonSettings)
    topology = Topology(settings.namespace, delivery_limit=settings.delivery_limit)
    broker = await Broker.connect(settings.rabbitmq_url, topology, connection_name="dlq")
    try:
        if args.action == "replay":
            replayed = await replay_parked(broker, args.limit)
            print(f"replayed {replayed} parked message(s) to their origin queues")
            return 0
        parked = await list_parked(broker, args.limit)
    finally:
        await broker.close()
    if args.json:
        print(json.dumps([dataclasses.asdict(p) for p in parked], indent=2))
    elif not parked:
        print(f"{topology.parking_queue} is empty")
    else:
        for p in parked:
            print(f"- from {p.origin} ({p.count}x): {p.reason}\n    {p.body_preview}")
    return 0


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _table(values: dict[str, Any]) -> str:
    width = max(len(k) for k in values)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in values.items())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="brainhands",
        description="Durable execution runtime for tool-using AI agents.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("migrate", help="upgrade the session store's schema")
    p.add_argument("--revision", default="head", help="target revision (default: head)")
    p.set_defaults(run=_migrate)

    p = sub.add_parser("status", help="show the store's schema revision and row counts")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=_status)

    p = sub.add_parser("hands", help="run a Hands worker for one tool pool")
    p.add_argument("--pool", required=True, help="the pool whose jobs this worker runs")
    p.add_argument(
        "--tools",
        required=True,
        action="append",
        help="module path that registers tools (repeatable), e.g. examples.notify.tools",
    )
    p.add_argument("--concurrency", type=int, help="tool calls at once (default: settings)")
    p.set_defaults(run=_hands)

    p = sub.add_parser("brain", help="run a Brain worker for one or more compatibility keys")
    p.add_argument(
        "--compat", action="append", required=True, help="compatibility key served (repeatable)"
    )
    p.add_argument(
        "--tasks", action="append", help="module path defining `registry = TaskRegistry()`"
    )
    p.add_argument(
        "--agents", action="append", help="module path defining `agents = AgentRegistry()`"
    )
    p.add_argument("--tools", action="append", help="module path that registers tools")
    p.add_argument("--no-sweeper", action="store_true", help="do not run a sweeper candidate")
    p.set_defaults(run=_brain)

    p = sub.add_parser("sweeper", help="run a sweeper (and relay) on its own")
    p.set_defaults(run=_sweeper)

    p = sub.add_parser("submit", help="submit input to a session (once per request id)")
    p.add_argument("--session", required=True)
    p.add_argument("--request-id", required=True, help="the same id never starts a second run")
    p.add_argument("--compat", default="v1", help="Brain build to wake (default: v1)")
    p.add_argument("--wait", type=float, metavar="SECONDS", help="wait for the answer")
    p.add_argument("input", help='text, or JSON such as {"kind": ..., "input": ...}')
    p.set_defaults(run=_submit)

    p = sub.add_parser("show", help="print a session's entries, tasks and operations")
    p.add_argument("session")
    p.set_defaults(run=_show)

    p = sub.add_parser("cancel", help="cancel a submission (durably, then its work winds down)")
    p.add_argument("--session", required=True)
    p.add_argument("--request-id", required=True)
    p.set_defaults(run=_cancel)

    p = sub.add_parser("dlq", help="list or replay parked (dead-lettered) messages")
    p.add_argument("action", choices=["list", "replay"], nargs="?", default="list")
    p.add_argument("--limit", type=int, default=20, help="messages to list or replay")
    p.add_argument("--json", action="store_true", help="print JSON (list)")
    p.set_defaults(run=_dlq)

    p = sub.add_parser("relay", help="run an outbox relay on its own")
    p.add_argument("--poll-interval", type=float, default=1.0, help="seconds between polls")
    p.set_defaults(run=_relay)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(
        json_lines=args.command in WORKERS, level=logging.DEBUG if args.verbose else logging.INFO
    )
    run: Command = args.run
    try:
        return asyncio.run(run(args))
    except BrainhandsError as exc:
        print(f"brainhands {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
