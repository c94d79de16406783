"""A handle on one submission: its result, its status, its cancellation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from brainhands.shared.errors import SubmissionFailed
from brainhands.shared.store import SubmissionRecord

if TYPE_CHECKING:
    from brainhands.client.direct import Client


@dataclass(frozen=True)
class Submission:
    """A handle on one submission: ``result``, ``status``, ``cancel``."""

    client: Client = field(repr=False)
    session_id: str
    request_id: str
    created: bool
    """False when this request id was submitted before: the handle is the original's."""

    async def status(self) -> SubmissionRecord:
        """The submission as it stands now."""
        key = self.client.key(self.session_id)
        return await self.client.store.submissions.get(key, self.request_id)

    # ``timeout`` as arq's ``Job.result`` and asyncio's ``wait_for`` name it: a caller's
    # ``asyncio.timeout`` would cancel the read mid-way instead of raising AnswerTimeout.
    async def result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """Wait for the answer and return it.

        Raises ``SubmissionFailed`` (with the record) if the submission failed or was
        cancelled, ``AnswerTimeout`` (a ``TimeoutError``) if ``timeout`` seconds pass first.
        """
        record = await self.client.wait(self.session_id, self.request_id, timeout=timeout)
        if record.status != "answered":
            raise SubmissionFailed(record)
        return record.answer

    async def cancel(self) -> str:
        """Request the cancellation; see ``Client.cancel``."""
        return await self.client.cancel(self.session_id, self.request_id)
