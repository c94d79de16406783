"""What the API's routes read and answer: request bodies, responses, and the ids and names
a client chooses (checked before a route runs)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from brainhands.api.stream_tokens import TTL_DEFAULT, TTL_MAX
from brainhands.shared.vocabulary import BUDGET_LIMITS

NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""Ids and names a client chooses: 1 to 128 plain characters."""

CURSOR = r"^[0-9]{1,12}(\.[0-9]{1,9})?:[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$"
"""A page cursor: the last page's ``updated_at:id``."""


def _not_a_bool(value: Any) -> Any:
    if isinstance(value, bool):  # which Python counts as an int: JSON does not
        raise ValueError("a whole number, not true or false")
    return value


Count = Annotated[int, Field(ge=0), BeforeValidator(_not_a_bool)]
"""A count in a body: a whole number from 0 (``3`` or ``3.0``; not ``true``)."""

SessionId = Annotated[str, Path(pattern=NAME, max_length=64)]
StreamToken = Annotated[
    str | None,
    Query(max_length=2048, description="a stream token (POST /stream-tokens), for EventSource"),
]
"""Read by the route's guard, before the route runs: declared for the document."""
RequestId = Annotated[str, Path(pattern=NAME, max_length=128)]
ApprovalId = Annotated[str, Path(pattern=NAME, max_length=64)]


_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
_H16 = "[0-9A-Fa-f]{1,4}"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_LS32 = rf"({_H16}:{_H16}|{_OCTET}(\.{_OCTET}){{3}})"
_IPV6 = "|".join(  # RFC 3986's IPv6address, alternative by alternative
    [rf"({_H16}:){{6}}{_LS32}", rf"::({_H16}:){{5}}{_LS32}"]
    + [rf"(({_H16}:){{0,{n - 1}}}{_H16})?::({_H16}:){{{5 - n}}}{_LS32}" for n in range(1, 5)]
    + [rf"(({_H16}:){{0,4}}{_H16})?::{_LS32}", rf"(({_H16}:){{0,5}}{_H16})?::{_H16}"]
    + [rf"(({_H16}:){{0,6}}{_H16})?::"]
)
CALLBACK_URL = rf"^https?://([A-Za-z0-9._~!$&'()*+,;=%-]+|\[({_IPV6})\])(:{_PORT})?([/?#][^\s]*)?$"
"""An ``http(s)`` URL whose host is ASCII (an internationalised name in its punycode form)
or an IPv6 address in brackets, with a port from 0 to 65535 and no credentials: the document
says all the API checks of the URL's form, so a URL it allows is taken (whether its address
may be posted to is the destination check's, ``shared.destinations``)."""


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Callback(Closed):
    callback_url: str | None = Field(default=None, max_length=2000, pattern=CALLBACK_URL)
    """Where the submission's end is posted (JSON, signed ``X-Brainhands-Signature``,
    ``Idempotency-Key`` the submission's id), at least once, retried with backoff."""


class BudgetLimits(Closed):
    """Limits of an agent's run (``brain.budget``); a limit left out is not set (or, in a
    raise, kept)."""

    tokens: Count | None = None
    """Model tokens, input and output together."""
    cost: float | None = Field(default=None, ge=0)
    """Model cost, at the agent's prices."""
    tool_calls: Count | None = None
    seconds: float | None = Field(default=None, ge=0)
    """Wall-clock seconds since the run began."""

    def named(self) -> dict[str, float]:
        """The limits this body sets (those left out are not null but absent)."""
        return self.model_dump(exclude_none=True, include=set(BudgetLimits.model_fields))


def _names_a_limit(schema: dict[str, Any]) -> None:
    """What the route refuses, the document forbids: a raise names one limit at least, as a
    number (not null)."""
    schema["anyOf"] = [
        {"required": [limit], "properties": {limit: {"type": "number"}}} for limit in BUDGET_LIMITS
    ]


class BudgetRaise(BudgetLimits):
    model_config = ConfigDict(json_schema_extra=_names_a_limit)

    raise_id: str | None = Field(default=None, pattern=NAME)
    """The same id twice is one raise (default: a random one)."""


class TextSubmission(Callback):
    """A message, for an agent."""

    text: str = Field(max_length=100_000)
    agent: str = Field(pattern=NAME)
    """The agent the message is for: one the deployment's Brains serve."""
    request_id: str | None = Field(default=None, pattern=NAME)
    """The same id never starts a second run (default: a random one)."""
    budget: BudgetLimits | None = None
    """What the run it starts may spend; where the agent sets a limit too, the lower holds."""


class InputSubmission(Callback):
    """A submission's input as it is, e.g. ``{"kind": ..., "input": ...}`` for a task."""

    input: dict[str, Any]
    request_id: str | None = Field(default=None, pattern=NAME)
    """The same id never starts a second run (default: a random one)."""


class DecisionBody(Closed):
    by: str | None = Field(default=None, min_length=1, max_length=128)
    """A name shown with the decision (default: the API key's name); who decided is
    recorded from the key, as ``principal``."""
    reason: str | None = Field(default=None, max_length=2000)
    decision_id: str | None = Field(default=None, pattern=NAME)


class ApproveBody(DecisionBody):
    arguments: dict[str, Any] | None = None
    """The call runs with these instead of the arguments asked for: checked against the
    tool's declared schema (422 with the reason when they do not fit; nothing recorded)."""


class DenyBody(DecisionBody):
    reason: str = Field(min_length=1, max_length=2000)


class SignalBody(Closed):
    name: str = Field(pattern=NAME)
    payload: Any = None
    signal_id: str | None = Field(default=None, pattern=NAME)
    decision: bool = False
    """For a wait declared a decision (``WaitSignal(..., decision=True)``): needs a key
    that may approve."""


class SubmissionOut(BaseModel):
    session_id: str
    request_id: str
    status: str
    answer: Any = None
    error: str | None = None
    created: bool | None = None
    """On submit: False when this request id was submitted before (nothing new started)."""


class DecisionOut(BaseModel):
    approval_id: str
    verdict: str
    by: str
    reason: str | None
    decision_id: str
    decided_at: float
    new: bool
    principal: str | None
    """Who decided, as their credential says (``key:<id>``)."""
    arguments: dict[str, Any] | None = None
    """The arguments the approver edited the call to; null: it ran as asked."""


class StreamTokenBody(Closed):
    session_id: str | None = Field(default=None, pattern=NAME, max_length=64)
    """The one session whose events it opens (default: any of the tenant's, and the list)."""
    ttl: int = Field(default=TTL_DEFAULT, ge=1, le=TTL_MAX)
    """Seconds it is good for."""


class StreamTokenOut(BaseModel):
    token: str
    """For ``?token=`` of ``/sessions/{id}/events`` and ``/events``: reads, nothing else."""
    expires_at: float


DocumentName = Annotated[str, Path(pattern=NAME, max_length=128)]


class IncrementOut(BaseModel):
    version: int
    patch: list[dict[str, Any]]
    """The RFC 6902 JSON Patch from the value before this write."""
    kind_version: int | None
    at: float


class DocumentOut(BaseModel):
    name: str
    version: int
    kind_version: int | None
    """The version of its kind the value was written at (null: an untyped document)."""
    value: Any
    history: list[IncrementOut]
    """Its latest writes, oldest first."""


class SignalOut(BaseModel):
    signal_id: str
    created: bool


class CancelOut(BaseModel):
    status: str


class ErasedOut(BaseModel):
    """What an erasure deleted: rows by table, none of their content."""

    session_id: str
    erased_at: float
    rows: dict[str, int]


class SessionPage(BaseModel):
    sessions: list[dict[str, Any]]
    next: str | None
    """The cursor of the next page (``?after=``), or None on the last."""
