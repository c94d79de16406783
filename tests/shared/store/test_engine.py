"""The backend under cancellation: a worker whose lease is lost cancels its store call
wherever it is, and that must not fill the log with errors."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

import pytest
from sqlalchemy import text

from brainhands.shared.config import normalize_database_url
from brainhands.shared.store.backends import open_backend

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

STATEMENT = "SELECT pg_sleep(0.02)"


@pytest.mark.parametrize("transaction", ["snapshot", "transaction"])
async def test_store_calls_cancelled_at_any_point_log_no_errors(
    postgres_url: str,
    transaction: Literal["snapshot", "transaction"],
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = await open_backend(normalize_database_url(postgres_url))

    async def call_again_and_again() -> None:
        while True:
            async with getattr(backend, transaction)() as conn:
                await conn.execute(text(STATEMENT))

    async def cancel_after(delay: float, work: Callable[[], Awaitable[None]]) -> None:
        running = asyncio.ensure_future(work())
        await asyncio.sleep(delay)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    try:
        with caplog.at_level(logging.WARNING):
            # Cancelled mid-statement, the connection is discarded, so later cancels also
            # land while one is being opened, in the middle of its handshake.
            for n in range(60):
                await cancel_after(0.001 + (n % 20) * 0.0025, call_again_and_again)
            async with backend.snapshot() as conn:
                assert (await conn.execute(text("SELECT 1"))).scalar() == 1
            gc.collect()  # abandoned futures report unretrieved exceptions when collected
            await asyncio.sleep(0.1)
    finally:
        await backend.close()

    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
