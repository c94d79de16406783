"""Hearing of commits as they happen (PostgreSQL ``LISTEN``), instead of polling.

Every commit runs ``pg_notify`` on ``SESSION_CHANNEL`` with the session's id, and one that
ends a submission (answered, failed, cancelled) also on ``ANSWER_CHANNEL``, in its own
transaction (``commit.apply_draft_sync``), so a notification is delivered when, and only
when, what it announces is durable. A listener that hears it re-reads the store: the
notification is a trigger, the row is the fact. SQLite has no notifications: there
listeners poll.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.util import greenlet_spawn

from brainhands.shared.store.backend import Backend
from brainhands.shared.store.engine import wrap_driver_errors

log = logging.getLogger("brainhands.store")


class NotificationFeed:
    """One ``LISTEN`` connection that calls ``on_session(session_id)`` for every
    notification on ``channel`` (``ANSWER_CHANNEL``, ``SESSION_CHANNEL``)."""

    def __init__(self, backend: Backend, channel: str, on_session: Callable[[str], None]) -> None:
        self.backend = backend
        self.channel = channel
        self.on_session = on_session
        self._pooled: Any = None
        self.listening = False
        """Whether notifications arrive (False on SQLite, or once the connection dropped)."""

    async def start(self) -> bool:
        """Start listening; False where the backend has no notifications."""
        if not self.backend.notifies:
            return False
        with wrap_driver_errors():
            self._pooled = await self.backend.engine.raw_connection()
            driver = self._pooled.driver_connection
            await driver.add_listener(self.channel, self._heard)
            driver.add_termination_listener(self._lost)
        self.listening = True
        return True

    def _heard(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.on_session(payload)

    def _lost(self, _conn: Any) -> None:
        self.listening = False
        log.warning(
            "the notifications' connection closed; listeners poll",
            extra={"event": "notifications_lost", "channel": self.channel},
        )

    async def close(self) -> None:
        if self._pooled is None:
            return
        pooled, self._pooled = self._pooled, None
        self.listening = False
        driver = pooled.driver_connection
        with contextlib.suppress(Exception):  # closing: a dead connection is as good
            driver.remove_termination_listener(self._lost)
            await driver.remove_listener(self.channel, self._heard)
        # Back to the pool once it listens to nothing (the last listener's removal UNLISTENs);
        # the pool's return runs through the driver's sync adapter, hence the greenlet.
        with contextlib.suppress(Exception):
            await greenlet_spawn(pooled.close)
