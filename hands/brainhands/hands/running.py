"""The calls a Hands worker runs: one object per call, and how a running call hears that it
should stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pydantic import BaseModel

from brainhands.hands.context import ToolContext
from brainhands.hands.decide import lease_lasts
from brainhands.hands.sandbox import CallSandbox, Workdir
from brainhands.shared.errors import BrainhandsError
from brainhands.shared.lease import Lease
from brainhands.shared.messages import LiveNote, ToolJob
from brainhands.shared.renewal import Holding
from brainhands.shared.store import OperationLedger
from brainhands.shared.tools import ToolSpec

log = logging.getLogger("brainhands.hands")


@dataclass(frozen=True)
class HeldJob:
    """A tool job whose operation this worker holds the lease of: every write for it
    carries the lease's ``fence``. Enough to record an outcome, even one of a job whose
    tool is unknown here or whose arguments do not validate."""

    job: ToolJob
    fence: int


@dataclass(frozen=True)
class RunningCall(HeldJob):
    """A held job whose tool is known and whose arguments are valid: what every step of
    the call needs, in one object (Temporal's ``_RunningActivity``)."""

    spec: ToolSpec
    args: BaseModel

    def context(
        self,
        attempt: int,
        cancel: asyncio.Event,
        live: Callable[[LiveNote], None] | None = None,
        ledger: OperationLedger | None = None,
        sandbox: CallSandbox | None = None,
        workdir: Workdir | None = None,
    ) -> ToolContext:
        """What attempt ``attempt`` of the tool (or the query asking about it) is handed."""
        return ToolContext(
            operation_id=self.job.operation_id,
            session_id=self.job.session_id,
            fence=self.fence,
            attempt=attempt,
            cancel=cancel,
            live=live,
            ledger=ledger,
            sandbox=sandbox,
            workdir=None if workdir is None else workdir.path,
        )


def lease_vouched(holding: Holding[Lease]) -> bool:
    """Whether the held lease still lasts by the local clock (``decide.lease_lasts``): a
    call may go out with no started mark only then, as no fenced write stands between its
    claim and the tool (``decide.goes_out_unmarked``)."""
    lease = holding.lease
    return lease_lasts(holding.expires_at, lease.ttl_ms / 1000, now=time.monotonic())


class RunningCalls:
    """The calls whose tool runs in this worker right now, each with the event its context
    reads as ``cancelled()``. The event is set by a cancel notice (``cancel``: the fast
    path, which may be lost), by the store, where the cancel is committed (``watch``), or
    by the worker's shutdown (``cancel_all``)."""

    def __init__(self) -> None:
        self._cancels: dict[str, tuple[str, asyncio.Event]] = {}
        """Per operation id: its task's id and the event of the attempt running now."""

    def __len__(self) -> int:
        return len(self._cancels)

    @contextlib.contextmanager
    def attempt(self, call: RunningCall) -> Iterator[asyncio.Event]:
        """Count ``call`` as running for one attempt of its tool; each attempt has an event
        of its own."""
        operation_id = call.job.operation_id
        _, cancel = self._cancels.setdefault(operation_id, (call.job.task_id, asyncio.Event()))
        try:
            yield cancel
        finally:
            self._cancels.pop(operation_id, None)

    def cancel(self, operation_id: str) -> None:
        """Ask the call of ``operation_id`` to stop, if it runs here."""
        if operation_id in self._cancels:
            self._cancels[operation_id][1].set()
            log.info(
                "cancel requested",
                extra={"event": "cancel_requested", "operation_id": operation_id},
            )

    def cancel_all(self) -> None:
        """Ask every running call to stop: the worker is shutting down."""
        for _, cancel in self._cancels.values():
            cancel.set()

    async def watch(self, ledger: OperationLedger, period: float) -> None:
        """Every ``period`` seconds, tell running calls of their cancel from the store,
        where it is committed: a cancel notice is only the fast path, and it may be lost."""
        while True:
            await asyncio.sleep(period)
            waiting = {
                operation_id: (task_id, cancel)
                for operation_id, (task_id, cancel) in self._cancels.items()
                if not cancel.is_set()
            }
            try:
                cancelled = await ledger.cancelled_tasks(
                    [task_id for task_id, _ in waiting.values()]
                )
            except BrainhandsError as exc:
                log.warning(
                    "cancel check failed", extra={"event": "cancel_check", "error": str(exc)}
                )
                continue
            for operation_id, (task_id, cancel) in waiting.items():
                if task_id in cancelled:
                    cancel.set()
                    log.info(
                        "cancel found in the store",
                        extra={"event": "cancel_requested", "operation_id": operation_id},
                    )
