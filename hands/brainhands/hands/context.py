"""What a running tool sees: its idempotency key, its fence, its attempt, a voice, and the
sandbox its commands run in."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from brainhands.hands.sandbox import CallSandbox, SandboxResult, describe
from brainhands.shared.errors import SandboxStopped
from brainhands.shared.messages import LiveNote
from brainhands.shared.store import OperationLedger

log = logging.getLogger("brainhands.hands.tool")


class ToolContext:
    """Handed to every tool call (and to a ``query`` function asking about one).

    ``operation_id`` is the call's idempotency key: pass it to the external system so a
    repeated call is recognized there. ``fence`` is the lease token the call runs under and
    ``attempt`` counts calls of this operation (1 for the first), across restarts.
    ``progress()`` reports on a long call; ``cancelled()`` says it should stop.
    ``note_handle()`` keeps the id of work the call started elsewhere, for whoever takes
    the call over (``handle()``). ``workdir`` is where it works: its workspace, when it
    declares one; ``run()`` runs a command there, in the tool's sandbox.
    """

    def __init__(
        self,
        *,
        operation_id: str,
        session_id: str,
        fence: int,
        attempt: int,
        cancel: asyncio.Event,
        live: Callable[[LiveNote], None] | None = None,
        ledger: OperationLedger | None = None,
        sandbox: CallSandbox | None = None,
        workdir: Path | None = None,
    ) -> None:
        self._sandbox = sandbox
        self._workdir = workdir
        self._live = live
        self._ledger = ledger
        self._operation_id = operation_id
        self._session_id = session_id
        self._fence = fence
        self._attempt = attempt
        self._cancel = cancel

    @property
    def operation_id(self) -> str:
        """The call's idempotency key: the same for every attempt of this call, and never the
        same for two calls (scoped by the session's uid). Hand it to the external system so
        a repeated attempt is recognized there, and look the call up by it in a ``query``."""
        return self._operation_id

    @property
    def session_id(self) -> str:
        """The session whose task made the call: for logs and correlation, not a key (every
        call of the session shares it)."""
        return self._session_id

    @property
    def fence(self) -> int:
        """The lease token this attempt runs under. Once another worker takes the call over
        with a higher token, this attempt's outcome is refused; an external system that
        accepts a fencing token can refuse its writes the same way."""
        return self._fence

    @property
    def attempt(self) -> int:
        """Which attempt of this call this is, 1 for the first, counted in the store across
        worker restarts; attempts cut short by a worker's death or a lost lease count too."""
        return self._attempt

    async def progress(self, message: str, **data: Any) -> None:
        """Report progress of a long call: a structured log line (``event`` ``progress``)
        with the operation id and ``data``, and a live note the session's watchers see in
        its event stream (``event: progress``). It is not stored and changes nothing; a
        note that cannot be sent is dropped, never the call's failure."""
        log.info(
            message,
            extra={"event": "progress", "operation_id": self._operation_id, **data},
        )
        if self._live is None:
            return
        note = LiveNote(
            session_id=self._session_id,
            kind="progress",
            operation_id=self._operation_id,
            message=message,
            data=data,
        )
        self._live(note)  # in the background: never waits, never fails the call

    def cancelled(self) -> bool:
        """Whether the call was asked to stop: its task was cancelled (the Brain's notice
        arrives at once; the store is checked every second in case it was lost) or the
        worker is shutting down. Nothing is raised: a long tool checks this and winds down.
        A call that returns anyway keeps its real outcome."""
        return self._cancel.is_set()

    async def note_handle(self, handle: str) -> None:
        """Commit ``handle``, the id an external system gave the work this call started (a
        job, a task), before waiting for that work: a worker that takes the call over after
        this one died reads it with ``handle()`` (in the tool or its ``query``) and follows
        that work instead of starting it again. Guarded by the call's fence: raises
        ``StaleLeaseError`` once another worker holds the call."""
        await self._store().note_handle(self._operation_id, self._fence, handle)

    async def handle(self) -> str | None:
        """The handle last noted for this call, by this attempt or an earlier one."""
        return await self._store().handle(self._operation_id)

    @property
    def workdir(self) -> Path:
        """The directory the tool works in, the one its commands run in and may write:
        holding its workspace's latest version at the start of each attempt (empty for a
        tool with none), removed after it."""
        if self._workdir is None:
            raise RuntimeError(
                "this tool has no working directory: declare a workspace "
                "(@tool(workspace=...)) or a sandbox to have one"
            )
        return self._workdir

    async def run(self, argv: Sequence[str]) -> SandboxResult:
        """Run the command ``argv`` (``["pytest", "-q"]``) in ``workdir``, within the
        tool's ``Sandbox``, and return how it ended: its exit status and what it printed.
        A command that exits non-zero is a result like any other; one its sandbox stopped
        (a limit reached, the call cancelled) raises ``SandboxStopped`` with the reason,
        after every process it started is killed."""
        done = await self._commands().run(argv, self._cancel)
        if done.stopped is not None:
            raise SandboxStopped(describe(argv), done.stopped)
        return done

    def _commands(self) -> CallSandbox:
        if self._sandbox is None:
            raise RuntimeError(
                "this tool declares no sandbox: declare @tool(sandbox=Sandbox(...)) to run "
                "commands, or sandbox='none' for a trusted tool"
            )
        return self._sandbox

    def _store(self) -> OperationLedger:
        if self._ledger is None:
            raise RuntimeError("this context was made without a store: it keeps no handle")
        return self._ledger
