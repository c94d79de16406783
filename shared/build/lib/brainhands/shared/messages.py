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
    SerializerFunctionWrapHandler,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_serializer,
    model_validator,
)

from brainhands.shared.errors import InvalidMessage

Name = Annotated[str, StringConstraints(min_length=1)]
"""An identifier or routing name: never empty, since an empty one always hides a bug."""

ToolStatus: TypeAlias = Literal["succeeded", "failed", "uncertain", "cancelled"]

MAX_INLINE_JSON = 64 * 1024
"""Bytes of JSON a tool call's arguments or result may take inline. Larger ones are stored
once, as a blob row, and travel by reference: arguments by the Brain's choice (``ToolJob``),
results by Hands' (whose ``max_inline_result`` setting defaults to this)."""


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
    """Run one tool call: sent by the Brain (via the outbox) to the tool's Hands pool.

    Version 2 is a job whose arguments travel by reference (``arguments_blob_id``), and the
    version follows from that field: a job with its arguments inline stays version 1, which
    builds that know only version 1 still run, while they park a by-reference job naming the
    version rather than run the tool without its arguments.
    """

    schema_version: Literal[1, 2] = 1  # type: ignore[assignment]  # ToolJob alone has a v2
    type: Literal["tool_job"] = "tool_job"
    operation_id: Name
    """The idempotency key of the call, derived deterministically by the Brain."""
    tool: Name
    arguments: dict[str, Any]
    """The JSON object of arguments, frozen when the intent was committed; empty when they
    travel by reference."""
    arguments_blob_id: Name | None = None
    """The blob row holding the arguments' JSON, when it is larger than ``MAX_INLINE_JSON``:
    Hands read it before validating the arguments."""
    session_id: Name
    task_id: Name
    compat: Name
    """The Brain compatibility key the result event must be routed to."""
    pool: Name
    deadline: AwareDatetime | None = None
    """When the call is no longer worth starting; timezone-aware so every host agrees."""

    @model_validator(mode="before")
    @classmethod
    def _version_from_content(cls, data: Any) -> Any:
        if isinstance(data, dict) and "schema_version" not in data:
            return {**data, "schema_version": 2 if data.get("arguments_blob_id") else 1}
        return data

    @model_validator(mode="after")
    def _by_reference_is_version_2(self) -> ToolJob:
        if (self.schema_version == 2) != (self.arguments_blob_id is not None):
            raise ValueError("schema_version 2 is exactly a job with arguments_blob_id")
        if self.arguments_blob_id is not None and self.arguments:
            raise ValueError("arguments travel inline or by reference, not both")
        return self

    @model_serializer(mode="wrap")
    def _version_1_body(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.arguments_blob_id is None:
            del data["arguments_blob_id"]  # a version-1 body, exactly as version-1 builds read it
        return data


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


class LiveNote(_ProtocolMessage):
    """Something a session's watchers may see as it happens and that nothing depends on:
    published best effort, never stored, never retried. ``progress``: a tool's progress
    note (``operation_id``, ``data``); ``model``: text a model is producing, in pieces
    (``data``: the generation's ``task_id`` and the piece's ``seq`` from 0)."""

    type: Literal["live"] = "live"
    session_id: Name
    kind: Literal["progress", "model"]
    operation_id: Name | None = None
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


Message: TypeAlias = Annotated[
    ToolJob | ToolResult | SessionWake | CancelNotice | LiveNote,
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
