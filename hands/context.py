"""What a running tool sees: its idempotency key, its fence, its attempt, and a voice."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("brainhands.hands.tool")


class ToolContext:
    """Handed to every tool call.

    ``operation_id`` is the call's idempotency key: pass it to the external system so a
    repeated call is recognized there. ``fence`` is the lease token the call runs under and
    ``attempt`` counts calls of this operation (1 for the first), across restarts.
    """

    def __init__(
        self,
        *,
        operation_id: str,
        session_id: str,
        fence: int,
        attempt: int,
        cancel: asyncio.Event,
    ) -> None:
        self._operation_id = operation_id
        self._session_id = session_id
        self._fence = fence
        self._attempt = attempt
        self._cancel = cancel

    @property
    def operation_id(self) -> str:
        return self._operation_id

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def fence(self) -> int:
        return self._fence

    @property
    def attempt(self) -> int:
        return self._attempt

    async def progress(self, message: str, **data: Any) -> None:
        """Report progress of a long call (a structured log line with the operation id)."""
        log.info(
            message,
            extra={"event": "progress", "operation_id": self._operation_id, **data},
        )

    def cancelled(self) -> bool:
        """Whether the call was asked to stop (cancellation, shutdown); a tool should wind down."""
        return self._cancel.is_set()
