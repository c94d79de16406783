"""``brainhands workspace``: a session's workspaces (``client.workspaces``): list them and
their versions, compare two versions, write out a file or a tarball of one, give one its
first version from a tarball."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from brainhands.cli.acting import settings_for
from brainhands.client.direct import Client
from brainhands.client.workspaces import WorkspaceVersionView
from brainhands.shared.errors import InvalidRequest


async def workspace(args: argparse.Namespace) -> int:
    async with await Client.from_settings(settings_for(args)) as client:
        if args.action == "list":
            _show(await client.workspaces(args.session), args.json)
            return 0
        if args.name is None:
            raise InvalidRequest(f"{args.action}: give the workspace's name")
        if args.action == "versions":
            _show(await client.workspace_versions(args.session, args.name), args.json)
        elif args.action == "create":
            tarball = await _read(args.tarball) if args.tarball else None
            made = await client.create_workspace(args.session, args.name, tarball=tarball)
            _show([made], args.json)
        elif args.action == "diff":
            if args.before is None or args.after is None:
                raise InvalidRequest("diff: give --before and --after, two versions")
            paths = await client.workspace_diff(args.session, args.name, args.before, args.after)
            if args.json:
                print(json.dumps(paths, indent=2))
            for path, change in [] if args.json else paths.items():
                print(f"{change:8} {path}")
        else:
            version = args.version
            if version is None:
                versions = await client.workspace_versions(args.session, args.name)
                version = versions[-1].version if versions else 0
            if args.action == "get":
                if args.path is None:
                    raise InvalidRequest("get: give --path, the file to write out")
                data = await client.workspace_file(args.session, args.name, version, args.path)
            else:
                data = await client.workspace_tarball(args.session, args.name, version)
            _write(data, args.out)
    return 0


def _show(views: list[WorkspaceVersionView], as_json: bool) -> None:
    if as_json:
        print(json.dumps([v.as_dict() for v in views], indent=2))
        return
    for v in views:
        when = (
            "-"
            if v.created_at is None
            else datetime.fromtimestamp(v.created_at, UTC).isoformat(timespec="seconds")
        )
        by = v.operation_id or "given by a client"
        print(f"{v.name}  v{v.version}  {v.files} files  {v.bytes} bytes  {when}  {by}")


async def _read(path: str) -> bytes:
    try:
        return await asyncio.to_thread(Path(path).read_bytes)
    except OSError as exc:
        raise InvalidRequest(f"--tarball: {exc}") from None


def _write(data: bytes, out: str | None) -> None:
    if out is None or out == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        Path(out).write_bytes(data)
        print(f"{len(data)} bytes written to {out}", file=sys.stderr)
