"""Running a command: the ``brainhands`` CLI's subcommands and the roles' own entry points
(``python -m brainhands.brain``, ``python -m brainhands.hands``) alike, and the two worker
roles' arguments, which both take (defined here, importing neither role, so that the CLI
of a Hands process never loads the Brain or the other way round).

A parsed command names what it runs as ``args.run = "module:function"``, imported only
then, so a worker loads only what it runs. It runs on uvloop's event loop; a
``BrainhandsError`` (a bad setting, say) ends it with its message and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop

from brainhands.shared.errors import BrainhandsError
from brainhands.shared.logs import configure_logging

Command = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


def add_verbose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")


def add_hands_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pool", required=True, help="the pool whose jobs this worker runs")
    p.add_argument(
        "--tools",
        action="append",
        default=[],
        help="module path that registers tools (repeatable), e.g. brainhands.examples.notify.tools "
        "(none needed when BRAINHANDS_MCP_CONFIG names MCP servers)",
    )
    p.add_argument("--concurrency", type=int, help="tool calls at once (default: settings)")
    p.set_defaults(run="brainhands.hands.main:hands")


def add_brain_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--compat", action="append", required=True, help="compatibility key served (repeatable)"
    )
    p.add_argument(
        "--tasks", action="append", help="module path defining `registry = TaskRegistry()`"
    )
    p.add_argument(
        "--agents", action="append", help="module path defining `agents = AgentRegistry()`"
    )
    p.add_argument("--no-sweeper", action="store_true", help="do not run a sweeper candidate")
    p.set_defaults(run="brainhands.brain.main:brain")


def role_main(role: str, add_arguments: Callable[[argparse.ArgumentParser], None]) -> int:
    """``python -m brainhands.<role>``: the role's worker, for an image with that role only
    (the same arguments as ``brainhands <role>``)."""
    parser = argparse.ArgumentParser(
        prog=f"python -m brainhands.{role}", description=f"Run a brainhands {role} worker."
    )
    add_verbose(parser)
    add_arguments(parser)
    return run_parsed(role, parser.parse_args(), json_lines=True)


def run_parsed(name: str, args: argparse.Namespace, *, json_lines: bool) -> int:
    """Run the command ``args.run`` names; ``json_lines`` for long-running roles."""
    level = logging.DEBUG if getattr(args, "verbose", False) else logging.INFO
    configure_logging(json_lines=json_lines, level=level)
    module, function = args.run.split(":")
    run: Command = getattr(importlib.import_module(module), function)
    try:
        # uvloop's event loop: the same asyncio API, with the loop and its sockets in C.
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(run(args))
    except BrainhandsError as exc:
        print(f"brainhands {name}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
