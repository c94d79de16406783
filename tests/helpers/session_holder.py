"""A process that takes a session's lease, then commits when told to.

    python -m tests.helpers.session_holder SESSION TOKEN_FILE GO_FILE RESULT_FILE

It claims the session with a fenced lease, writes its token to TOKEN_FILE, waits (without
renewing) until GO_FILE exists, then commits one entry with its token and writes "ok" or
"stale <current fence>" to RESULT_FILE. Store and Redis come from ``BRAINHANDS_*``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from brainhands.shared.config import CommonSettings, load_settings
from brainhands.shared.errors import StaleLeaseError
from brainhands.shared.keys import Keys, session_resource
from brainhands.shared.lease import LeaseManager, connect_redis
from brainhands.shared.store import Draft, Store


async def main(session_id: str, token_file: Path, go_file: Path, result_file: Path) -> None:
    settings = load_settings(CommonSettings)
    store = await Store.open(settings.database_url, db_schema=settings.database_schema)
    leases = LeaseManager(connect_redis(settings.redis_url), Keys(settings.namespace), ttl_ms=1000)
    lease = await leases.acquire_fenced(
        session_resource(session_id), lambda t: store.claim_session_fence(session_id, t)
    )
    assert lease is not None
    version = (await store.load(session_id)).session.version
    await asyncio.to_thread(token_file.write_text, str(lease.token))
    while not await asyncio.to_thread(go_file.exists):  # noqa: ASYNC110 - a file, not an event
        await asyncio.sleep(0.05)
    draft = Draft(session_id, version=version, fence=lease.token)
    draft.append_entry("note", {"by": "holder", "token": lease.token})
    try:
        await store.commit(draft)
        outcome = "ok"
    except StaleLeaseError as exc:
        outcome = f"stale {exc.current}"
    await asyncio.to_thread(result_file.write_text, outcome)
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], *map(Path, sys.argv[2:5])))
