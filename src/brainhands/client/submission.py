"""A handle on one submission (its result, its status, its cancellation), and the options
of the verbs every client has: the same words whether the client holds the store
(``Client``) or a key to the HTTP API (``HttpClient``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypedDict, TypeVar

from brainhands.shared.errors import SubmissionFailed
from brainhands.shared.store import SubmissionRecord

if TYPE_CHECKING:
    from brainhands.client.direct import Client  # noqa: F401 -- named as a string below


class SubmitOptions(TypedDict, total=False):
    """How ``submit`` submits, besides what: see ``Client.submit``."""

    request_id: str | None
    agent: str | None
    callback_url: str | None
    budget: dict[str, float] | None
    """Limits of the agent's run (``tokens``, ``cost``, ``tool_calls``, ``seconds``); where
    the agent sets one too, the lower holds."""


class SignalOptions(TypedDict, total=False):
    """How ``signal`` sends, besides what: see ``Client.signal``."""

    signal_id: str | None
    decision: bool
    four_eyes: bool


class DecidedBy(TypedDict, total=False):
    """Who decides an approval, and how the decision is recorded: see ``Client.decide``."""

    by: str | None
    decision_id: str | None
    principal: str | None
    four_eyes: bool


class _Ended(Protocol):
    """A submission as a client reads it, once it has ended."""

    @property
    def session_id(self) -> str: ...
    @property
    def request_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def answer(self) -> Any: ...
    @property
    def error(self) -> Any: ...


class _Waits(Protocol):
    """What a handle asks of its client: its ``wait`` and ``cancel``."""

    @property
    def wait(self) -> Callable[..., Awaitable[_Ended]]: ...
    @property
    def cancel(self) -> Callable[[str, str], Awaitable[str]]: ...


C = TypeVar("C", bound=_Waits)


@dataclass(frozen=True)
class Handle(Generic[C]):
    """A handle on one submission: ``result``, ``status``, ``cancel``."""

    client: C = field(repr=False)
    session_id: str
    request_id: str
    created: bool
    """False when this request id was submitted before: the handle is the original's."""

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


@dataclass(frozen=True)
class Submission(Handle["Client"]):
    """A handle on one submission made through a ``Client``."""

    async def status(self) -> SubmissionRecord:
        """The submission as it stands now."""
        key = self.client.key(self.session_id)
        return await self.client.store.submissions.get(key, self.request_id)
