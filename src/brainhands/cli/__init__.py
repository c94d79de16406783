"""``brainhands``: one command, one subcommand per role or operator action.

Settings come from ``BRAINHANDS_*`` environment variables (see ``shared.config``); a bad
setting stops the command at start-up with a message naming the variable. Each subcommand
imports only what it runs, so a worker starts quickly.
"""

from __future__ import annotations

import argparse
import importlib.util

from brainhands.shared.command import (
    add_brain_arguments,
    add_hands_arguments,
    add_verbose,
    run_parsed,
)

WORKERS = {"hands", "relay", "brain", "sweeper", "api", "mcp"}
"""Long-running roles: they log JSON lines."""


def add_tenant(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tenant",
        help="the tenant whose session this is (default: BRAINHANDS_TENANT, else 'default')",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="brainhands",
        description="Durable execution runtime for tool-using AI agents.",
    )
    add_verbose(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("migrate", help="upgrade the session store's schema")
    p.add_argument("--revision", default="head", help="target revision (default: head)")
    p.set_defaults(run="brainhands.cli.operate:migrate")

    p = sub.add_parser("config", help="print the effective configuration, secrets redacted")
    p.add_argument("--role", choices=["common", "brain", "hands", "model"], default="common")
    p.set_defaults(run="brainhands.cli.operate:config")

    p = sub.add_parser("status", help="show the store's schema revision and row counts")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run="brainhands.cli.operate:status")

    p = sub.add_parser("store", help="check or accept a store found gone back in time")
    p.add_argument("action", choices=["check", "accept-rollback"])
    p.set_defaults(run="brainhands.cli.rollback:store")

    p = sub.add_parser("hands", help="run a Hands worker for one tool pool")
    add_hands_arguments(p)

    p = sub.add_parser("brain", help="run a Brain worker for one or more compatibility keys")
    add_brain_arguments(p)

    p = sub.add_parser("sweeper", help="run a sweeper (and relay) on its own")
    p.set_defaults(run="brainhands.brain.main:sweeper")

    p = sub.add_parser("submit", help="submit input to a session (once per request id)")
    p.add_argument("--session", required=True)
    p.add_argument("--request-id", required=True, help="the same id never starts a second run")
    p.add_argument("--compat", default="v1", help="Brain build to wake (default: v1)")
    p.add_argument("--wait", type=float, metavar="SECONDS", help="wait for the answer")
    p.add_argument("input", help='text, or JSON such as {"kind": ..., "input": ...}')
    add_tenant(p)
    p.set_defaults(run="brainhands.cli.operate:submit")

    p = sub.add_parser("show", help="print a session's entries, tasks and operations")
    p.add_argument("session")
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document: session, entries, tasks, operations",
    )
    add_tenant(p)
    p.set_defaults(run="brainhands.cli.operate:show")

    p = sub.add_parser("cancel", help="cancel a submission (durably, then its work winds down)")
    p.add_argument("--session", required=True)
    p.add_argument("--request-id", required=True)
    add_tenant(p)
    p.set_defaults(run="brainhands.cli.operate:cancel")

    p = sub.add_parser("session", help="a session's erasure: it and all it owns, for good")
    acts = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = acts.add_parser("delete", help="erase the session (recorded: who, when; not what)")
    q.add_argument("session", help="the session's id")
    q.add_argument(
        "--cancel", action="store_true", help="erase it even with work open, cancelling it"
    )
    add_tenant(q)
    q.set_defaults(run="brainhands.cli.acting:erase")

    p = sub.add_parser("signal", help="send a signal to a session (kept until a task waits)")
    p.add_argument("--session", required=True)
    p.add_argument("--name", required=True, help="what the waiting task waits for")
    p.add_argument("--id", help="the signal's id: the same id twice is one (default: random)")
    p.add_argument("payload", nargs="?", help="JSON the resumed phase receives")
    p.add_argument(
        "--decision", action="store_true", help="for a wait declared a decision (an approval)"
    )
    add_tenant(p)
    p.set_defaults(run="brainhands.cli.acting:signal")

    for verdict, what in (("approve", "dispatch them, once"), ("deny", "refuse them")):
        p = sub.add_parser(verdict, help=f"decide calls waiting for approval: {what}")
        p.add_argument("--session", required=True)
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--id", action="append", help="approval id (repeatable)")
        which.add_argument("--all", action="store_true", help="every call pending now")
        add_tenant(p)
        p.add_argument("--by", help="a name shown with the decision (default: BRAINHANDS_IDENTITY)")
        p.add_argument("--reason", required=verdict == "deny", help="why (the model reads it)")
        p.add_argument("--decision", help="decision id: the same decision twice counts once")
        if verdict == "approve":
            p.add_argument(
                "--arguments",
                metavar="JSON",
                help="one call (--id): run it with these arguments instead (checked against "
                "the tool's schema; the model is told of the edit)",
            )
        p.set_defaults(run=f"brainhands.cli.acting:{verdict}")

    p = sub.add_parser("raise-budget", help="raise a session's budget: a run stopped at it resumes")
    p.add_argument("--session", required=True)
    for limit, kind in (("tokens", int), ("cost", float), ("tool-calls", int), ("seconds", float)):
        p.add_argument(f"--{limit}", type=kind, help="the new limit (the others are kept)")
    p.add_argument("--id", help="the raise's id: the same id twice is one (default: random)")
    add_tenant(p)
    p.set_defaults(run="brainhands.cli.acting:raise_budget")

    p = sub.add_parser("compensation", help="retry or abandon a failed undo a task waits with")
    p.add_argument("action", choices=["retry", "abandon"])
    p.add_argument("session")
    p.add_argument("task", help="the waiting task (its session view lists it under compensations)")
    p.add_argument("--reason", required=True, help="why (kept with the act)")
    p.add_argument("--id", help="the act's id: the same id twice is one (default: random)")
    add_tenant(p)
    p.set_defaults(run="brainhands.cli.acting:compensation")

    p = sub.add_parser("tenant", help="an operator's acts on a tenant: set or show its budget")
    p.add_argument("what", choices=["budget"])
    p.add_argument("action", choices=["set", "show"])
    p.add_argument("tenant")
    for limit, kind in (("tokens", int), ("cost", float), ("tool-calls", int)):
        p.add_argument(f"--{limit}", type=kind, help="set: a limit (those left out: none)")
    p.add_argument("--json", action="store_true", help="print the budget as JSON")
    p.set_defaults(run="brainhands.cli.tenants:budget")

    p = sub.add_parser(
        "webhook-secret", help="show or rotate the secret a tenant's webhooks are signed with"
    )
    p.add_argument("action", choices=["show", "rotate"])
    p.add_argument("tenant")
    p.add_argument(
        "--grace",
        type=float,
        default=86400.0,
        help="rotate: seconds the previous secret still signs too (default: a day; 0: none)",
    )
    p.set_defaults(run="brainhands.cli.tenants:webhook_secret")

    p = sub.add_parser("schedule", help="create, list, pause, resume or delete schedules")
    p.add_argument("action", choices=["create", "list", "pause", "resume", "delete"])
    p.add_argument("id", nargs="?", help="the schedule's id (all but list)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--agent", help="create: each tick sends --input as text to this agent")
    target.add_argument("--kind", help="create: each tick starts this task kind with --input")
    p.add_argument("--input", help="create: the agent's text, or the task's input as JSON")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--cron", help='create: five fields, e.g. "0 3 * * 1-5"')
    when.add_argument("--every", type=int, help="create: seconds between ticks")
    p.add_argument("--tz", help="create: the cron's IANA time zone (default: UTC)")
    p.add_argument(
        "--missed",
        choices=["skip", "run_one"],
        default="skip",
        help="create: ticks missed while no sweeper ran: none runs, or the latest once",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    add_tenant(p)
    p.set_defaults(run="brainhands.cli.schedules:schedule")

    p = sub.add_parser("workspace", help="a session's workspaces: versions, diffs, files")
    p.add_argument("action", choices=["list", "versions", "diff", "get", "tarball", "create"])
    p.add_argument("session", help="the session whose workspaces these are")
    p.add_argument("name", nargs="?", help="the workspace (all but list)")
    p.add_argument("--version", type=int, help="get, tarball: which version (default: latest)")
    p.add_argument("--before", type=int, help="diff: the version to compare from")
    p.add_argument("--after", type=int, help="diff: the version to compare to")
    p.add_argument("--path", help="get: the file to write out")
    p.add_argument("--out", help="get, tarball: the file to write (default: standard output)")
    p.add_argument("--tarball", help="create: the tar archive of its first version's files")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_tenant(p)
    p.set_defaults(run="brainhands.cli.workspaces:workspace")

    p = sub.add_parser("pending", help="list the calls waiting for approval, by session")
    p.add_argument("--session", help="of this session only")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_tenant(p)
    p.set_defaults(run="brainhands.cli.acting:pending")

    if importlib.util.find_spec("brainhands.examples") is not None:  # brainhands-examples
        from brainhands.examples.demo_args import add_arguments as add_demo_arguments

        p = sub.add_parser("demo", help="the five-email demo: agents surviving worker kills")
        add_demo_arguments(p)
        p.set_defaults(run="brainhands.examples.demo:command")

    p = sub.add_parser("dlq", help="list, replay or purge parked (dead-lettered) messages")
    p.add_argument("action", choices=["list", "replay", "purge"], nargs="?", default="list")
    p.add_argument("--limit", type=int, default=20, help="messages to list, replay or purge")
    p.add_argument("--json", action="store_true", help="print JSON (list)")
    p.add_argument("--settled", action="store_true", help="purge: messages whose work settled")
    p.add_argument("--session", help="purge: messages of this session")
    p.add_argument(
        "--type",
        choices=["tool_job", "tool_result", "wake", "cancel", "unreadable"],
        help="purge: messages of this type",
    )
    p.add_argument(
        "--force", action="store_true", help="purge: also messages whose work is not settled"
    )
    p.set_defaults(run="brainhands.cli.operate:dlq")

    p = sub.add_parser("tools", help="list the tools Hands pools have declared, by pool")
    p.add_argument("--json", action="store_true", help="print JSON, argument schemas included")
    p.set_defaults(run="brainhands.cli.operate:tools")

    p = sub.add_parser("api", help="run the HTTP API (OpenAPI at /openapi.json)")
    p.add_argument("--host", help="address to listen on (default: BRAINHANDS_API_HOST)")
    p.add_argument("--port", type=int, help="port (default: BRAINHANDS_API_PORT; 0: any free)")
    p.set_defaults(run="brainhands.api.serve:api")

    p = sub.add_parser("mcp", help="serve the deployment's agents to MCP clients")
    p.add_argument(
        "--transport",
        choices=["http", "stdio"],
        default="http",
        help="http: streamable HTTP at /mcp, each request with an API key; stdio: for the "
        "local client that started it, acting as the CLI does (default: http)",
    )
    p.add_argument(
        "--host", help="http: address to listen on (default: BRAINHANDS_MCP_SERVER_HOST)"
    )
    p.add_argument(
        "--port", type=int, help="http: port (default: BRAINHANDS_MCP_SERVER_PORT; 0: any free)"
    )
    p.set_defaults(run="brainhands.mcp_server.serve:mcp")

    p = sub.add_parser("keys", help="create, list or revoke the API's keys")
    p.add_argument("action", choices=["create", "list", "revoke"])
    p.add_argument("--tenant", help="create: the tenant the key acts for")
    p.add_argument(
        "--scope",
        action="append",
        choices=["read", "submit", "tasks", "signal", "approve", "admin", "operator"],
        help="create: what the key may do (repeatable)",
    )
    p.add_argument("--name", help="create: who or what holds it (kept with decisions)")
    p.add_argument("--id", help="revoke: the key's id")
    p.set_defaults(run="brainhands.cli.operate:keys")

    p = sub.add_parser("relay", help="run an outbox relay on its own")
    p.set_defaults(run="brainhands.brain.main:relay")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_parsed(args.command, args, json_lines=args.command in WORKERS)
