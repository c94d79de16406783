"""``python -m brainhands.examples.coder SESSION``: give the session the project to fix (its
workspace's first version, unless it has one), ask the coder to fix it, print its answer.
A deployment's settings come from ``BRAINHANDS_*`` as every process's do."""

from __future__ import annotations

import argparse
import asyncio

from brainhands.client.direct import Client
from brainhands.examples.coder.project import tarball
from brainhands.examples.coder.tools import WORKSPACE
from brainhands.shared.config import CommonSettings, load_settings
from brainhands.shared.errors import ConflictError


async def fix(session: str, seconds: float) -> int:
    async with await Client.from_settings(load_settings(CommonSettings)) as client:
        try:
            await client.create_workspace(session, WORKSPACE, tarball=tarball())
        except ConflictError:
            print(f"session {session} has its project already: the coder goes on with it")
        handle = await client.submit(session, "Fix the project's failing tests.", agent="coder")
        record = await client.wait(session, handle.request_id, timeout=seconds)
        print(record.answer if record.status == "answered" else record.error)
        return 0 if record.status == "answered" else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("session", help="the session whose workspace holds the project")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait")
    args = parser.parse_args()
    return asyncio.run(fix(args.session, args.timeout))


if __name__ == "__main__":
    raise SystemExit(main())
