"""``brainhands``: one command, one subcommand per role or operator action.

Settings come from ``BRAINHANDS_*`` environment variables (see ``shared.config``); a bad
setting stops the command at start-up with a message naming the variable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from shared.config import CommonSettings, load_settings
from shared.errors import BrainhandsError
from shared.store import Store, migrate

Command = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    run: Command = args.run
    try:
        return asyncio.run(run(args))
    except BrainhandsError as exc:
        print(f"brainhands {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
