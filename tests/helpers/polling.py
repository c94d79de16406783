"""Waiting for a condition with a deadline, instead of sleeping."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

from sqlalchemy.exc import SQLAlchemyError

from brainhands.shared.errors import BrainhandsError


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], *, within: float = 15.0, what: str = "condition"
) -> None:
    """Poll ``check`` (sync or async) until it holds, failing after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if await result if inspect.isawaitable(result) else result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {within}s")
        await asyncio.sleep(0.05)


async def once_it_answers(check: Callable[[], Awaitable[bool]]) -> bool:
    """``check``, or False while the store it reads does not answer (a fault is on it: a
    primary being replaced, a partition)."""
    try:
        return await check()
    except (SQLAlchemyError, BrainhandsError, OSError):
        return False
