"""The protocol: every message that travels through RabbitMQ, and its one serializer.

A message is only a trigger (DESIGN §1): it names what changed and where to look, and the
receiver reads the facts from the store. So messages stay small, carry identifiers rather than
state, and may be lost, duplicated or reordered without harm.

Every message is an immutable pydantic model with a ``schema_version`` and a ``type``
discriminator. ``decode`` accepts exactly the versions this build understands; anything else
raises ``InvalidMessage``, and the consumer parks the body instead of crashing on it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
)

from shared.errors import InvalidMessage

Name = Annotated[str, StringConstraints(min_length=1)]
"""An identifier or routing name: never empty, since an empty one always hides a bug."""

ToolStatus: TypeAlias = Literal["succeeded", "failed", "uncertain", "cancelled"]


class _ProtocolMessage(BaseModel):
    """Fields and settings every protocol message shares.

    ``frozen`` is shallow: the dict fields can still be mutated in place, but nothing in
    brainhands does, and the model itself cannot be reassigned or hashed into a new meaning.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = 1
    trace: dict[str, str] = Field(default_factory=dict)
    """Trace context carrier (W3C ``traceparent`` and friends), empty when not traced."""


class ToolJob(_ProtocolMessage):
    """Run one tool call: sent by the Brain (via the outbox) to the tool's Hands pool."""

    type: Literal["tool_job"] = "tool_job"
    operation_id: Name
    """The idempotency key of the call, derived deterministically by the Brain."""
    tool: Name
    arguments: dict[str, Any]
    """The JSON object of arguments, frozen when the intent was committed."""
    session_id: Name
    task_id: Name
    compat: Name
    """The Brain compatibility key the result event must be routed to."""
    pool: Name
    deadline: AwareDatetime | None = None
    """When the call is no longer worth starting; timezone-aware so every host agrees."""


class ToolResult(_ProtocolMessage):
    """A tool call has an outcome in the operation ledger: sent by Hands to a Brain."""

    type: Literal["tool_result"] = "tool_result"
    operation_id: Name
    session_id: Name
    task_id: Name
    compat: Name
    status: ToolStatus


class SessionWake(_ProtocolMessage):
    """Something in a session is due (a timer, a submission, recovery): take a look."""

    type: Literal["wake"] = "wake"
    session_id: Name
    compat: Name
    reason: str


class CancelNotice(_ProtocolMessage):
    """The cancellation of an operation is committed: Hands should stop working on it."""

    type: Literal["cancel"] = "cancel"
    operation_id: Name
    session_id: Name
    reason: str


Message: TypeAlias = Annotated[
    ToolJob | ToolResult | SessionWake | CancelNotice,
    Field(discriminator="type"),
]
"""Any protocol message; ``type`` tells which."""

_MESSAGE: TypeAdapter[Message] = TypeAdapter(Message)


def encode(message: Message) -> bytes:
    """Serialize a protocol message to the JSON body that goes on the wire."""
    return _MESSAGE.dump_json(message)


def decode(body: bytes) -> Message:
    """Parse and validate a wire body; raise ``InvalidMessage`` saying what is wrong."""
    try:
        return _MESSAGE.validate_json(body)
    except ValidationError as exc:
        raise InvalidMessage(_describe(exc)) from exc


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"]) or "body"
        problems.append(f"{where}: {error['msg']}")
    return "invalid message: " + "; ".join(problems)
