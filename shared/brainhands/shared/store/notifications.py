"""Hearing of commits as they happen (PostgreSQL ``LISTEN``), instead of polling.

Every commit runs ``pg_notify`` on ``SESSION_CHANNEL`` with the session's id, and one that
ends a submission (answered, failed, cancelled) also on ``ANSWER_CHANNEL``, in its own
transaction (``commit.apply_draft_sync``), so a notification is delivered when, and only
when, what it announces is durable. A listener that hears it re-reads the store: the
notification is a trigger, the row is the fact. SQLite has no notifications: there
listeners poll.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from brainhands.shared.store.backends.base import Backend, Stop

log = logging.getLogger("brainhands.store")


class NotificationFeed:
    """One listening connection that calls ``on_session(session_id)`` for every
    notification on ``channel`` (``ANSWER_CHANNEL``, ``SESSION_CHANNEL``)."""

    def __init__(self, backend: Backend, channel: str, on_session: Callable[[str], None]) -> None:
        self.backend = backend
        self.channel = channel
        self.on_session = on_session
        self._stop: Stop | None = None
        self.listening = False
        """Whether notifications arrive (False on SQLite, or once the connection dropped)."""

    async def start(self) -> bool:
        """Start listening; False where the backend has no notifications."""
        self._stop = await self.backend.listen(self.channel, self.on_session, self._lost)
        self.listening = self._stop is not None
        return self.listening

    def _lost(self) -> None:
        self.listening = False
        log.warning(
            "the notifications' connection closed; listeners poll",
            extra={"event": "notifications_lost", "channel": self.channel},
        )

    async def close(self) -> None:
        if self._stop is None:
            return
        stop, self._stop = self._stop, None
        self.listening = False
        await stop()
