"""A relay process that freezes after the broker confirmed a batch, before marking it sent.

    python -m tests.helpers.relay_victim MARKER

Store and broker come from the ``BRAINHANDS_*`` variables. The freeze is the window the
test SIGKILLs the process in: the rows are published but still unsent in the store.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from shared import relay as relay_module
from shared.config import CommonSettings, load_settings
from shared.relay import OutboxRelay
from shared.runtime import open_services


async def main(marker: Path) -> None:
    async def freeze_before_marking(conn: Any, ids: list[int]) -> None:
        marker.write_text(",".join(map(str, ids)))  # noqa: ASYNC240
        time.sleep(120)  # noqa: ASYNC251 - freezes the whole process until it is killed

    relay_module.mark_sent = freeze_before_marking  # type: ignore[assignment]
    async with open_services(load_settings(CommonSettings), name="relay-victim") as services:
        await OutboxRelay(services.store, services.broker).drain_once()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
