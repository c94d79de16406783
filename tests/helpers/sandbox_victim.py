"""A process that runs one command in a sandbox and is then SIGKILLed by its test, as a
Hands is mid-call.

    python -m tests.helpers.sandbox_victim TOKEN

It prints its scratch directory's path, then runs a command whose three background
processes each append TOKEN to a marker file there every 50 ms, until they are killed.
"""

from __future__ import annotations

import asyncio
import sys

from brainhands.hands.sandbox import Sandboxes
from brainhands.shared.tools import Sandbox


async def run(token: str) -> None:
    sandboxes = Sandboxes()
    with sandboxes.scratch() as workdir:
        print(workdir.path, flush=True)
        loop = f"while true; do echo {token} >> mark$i; sleep 0.05; done"
        script = f"for i in 1 2 3; do ( {loop} ) & done; wait"
        await sandboxes.run(["sh", "-c", script], workdir, Sandbox())


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1]))
