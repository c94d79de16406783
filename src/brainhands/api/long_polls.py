"""Long polls (``?wait=``): a request held until its submission has ended, woken by the
change feed the event streams use, never by a read of its own on a timer.

A waiting request reads its submission once, then again only when its session has
committed (``SessionChanges``: one ``LISTEN`` for the process, or on SQLite one poll of
the watched sessions' versions for all): a thousand idle waiters cost no store read. Each
holds one of its key's open streams (``Quotas``) while it waits, so one key cannot hold
more waiting requests than streams, and ends early, with the status then, when the
server stops or its key is revoked.
"""

# ``timeout`` as the rest of the client's waits name it.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio

from brainhands.api.changes import SessionChanges
from brainhands.api.keys import Principal
from brainhands.api.quota import Quotas
from brainhands.api.watcher import Watchers
from brainhands.client.direct import Client
from brainhands.shared.store import FINAL_SUBMISSION_STATUSES, SubmissionRecord


class LongPolls:
    def __init__(
        self, client: Client, changes: SessionChanges, watchers: Watchers, quotas: Quotas
    ) -> None:
        self.client = client
        self.changes = changes
        self.watchers = watchers
        self.quotas = quotas

    async def wait(
        self, who: Principal, key: str, request_id: str, timeout: float
    ) -> SubmissionRecord:
        """The submission ``request_id`` of the session of store key ``key`` once it has
        ended, or as it stands after ``timeout`` seconds (``NotFoundError`` if there is
        none); 429 if ``who``'s key has all its streams open."""
        release = self.quotas.open_stream(who.key_id)
        try:
            with self.watchers.open(who) as watcher, self.changes.watch(key, watcher):
                # Watched before the first read: a commit in between still wakes it.
                record = await self.client.submission(key, request_id).status()
                deadline = asyncio.get_running_loop().time() + timeout
                while record.status not in FINAL_SUBMISSION_STATUSES:
                    try:
                        async with asyncio.timeout_at(deadline):
                            news = await watcher.next()
                    except TimeoutError:
                        break
                    if news == "closed":
                        break
                    if news == "changed" or (news == "ping" and not self.changes.pushed):
                        record = await self.client.submission(key, request_id).status()
                return record
        finally:
            release()
