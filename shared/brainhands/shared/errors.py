"""The one exception tree of brainhands.

    BrainhandsError
    ├── ConfigurationError          a setting is missing or invalid (raised at start-up)
    ├── StartupFailed               a service did not answer a starting process within its
    │                               deadline, or refused it for good
    ├── StoreError                  the session store failed (driver errors are wrapped here)
    │   ├── StoreUnavailable        connection-level failure; retryable
    │   ├── ConflictError           the session changed since the draft was read (stale version)
    │   │   └── SessionRunning      a session with work open was to be erased uncancelled
    │   ├── StaleLeaseError         the committer's fencing token was superseded
    │   ├── CallCancelled           a tool call's cancellation is committed: it must not go out
    │   ├── NotFoundError           a row the caller named does not exist
    │   ├── WorkspaceMoved          a call's workspace moved past the version it ran on
    │   └── StoreWentBack           the store lost commits it had acknowledged (a failover to
    │                               a standby that lacked them); work is held until an
    │                               operator accepts it
    ├── BrokerError                 RabbitMQ failed
    │   ├── BrokerUnavailable       no connection, or no confirm within the bound; retryable
    │   └── UnroutableMessage       a mandatory publish matched no queue
    ├── LeaseError                  Redis lease operations failed
    │   └── LeaseBackendError       Redis itself failed; retryable
    ├── InvalidMessage              a message body failed decoding or validation
    ├── UnknownToolError            no tool of that name is registered in this worker
    ├── UnknownTaskKindError        no handler for that task kind/version in this build
    ├── InvalidRequest              a client's request is malformed (also a ValueError)
    │   └── RefusedDestination      a webhook's host resolves to an address it may not be
    │                               posted to (loopback, private ...), or not at all
    ├── DecisionRefused             an approval's decision or a budget raise cannot count
    ├── SubmissionFailed            a submission a client waited for failed or was cancelled
    ├── AnswerTimeout               a client stopped waiting for an answer (also a TimeoutError)
    └── ToolError                   raised by tool code; carries its own retry behaviour
        ├── ToolUncertain           raised by tool code: the effect may or may not have
        │                           happened, and the tool cannot tell
        └── SandboxStopped          a tool's command was stopped by its sandbox (a limit,
                                    the call's cancel); the message says which

    BaseException
    └── LeaseLost                   the holder lost its lease while working; derives from
                                    BaseException so that a tool's ``except Exception``
                                    cannot swallow it by accident

What a tool's exception means for its call is decided in one place, ``hands.decide``
(``judge_failure``): only a retryable ``ToolError`` says that nothing happened.
"""

from __future__ import annotations

from typing import Any


class BrainhandsError(Exception):
    """Root of every error brainhands raises on purpose."""

    retryable: bool = False


class ConfigurationError(BrainhandsError):
    """A setting is missing or invalid; the message names the variable to set."""


class StartupFailed(BrainhandsError):
    """A starting process could not reach a service it needs (``shared.startup``); the message
    names the service and its address, without the password."""


class StoreError(BrainhandsError):
    """The session store failed."""


class StoreUnavailable(StoreError):
    """The store could not be reached or dropped the connection."""

    retryable = True


class ConflictError(StoreError):
    """The session's version moved since the draft was read: another commit won."""


class SessionRunning(ConflictError):
    """A session with work open (a task not ended, a submission queued or running) was to be
    erased without being cancelled too."""

    title = "Session Running"
    """The title of the API's problem (409) that says so, which the HTTP clients read."""


class StaleLeaseError(StoreError):
    """A write carried a fencing token older than the one the store has seen."""

    def __init__(self, resource: str, token: int, current: int | None) -> None:
        self.resource = resource
        self.token = token
        self.current = current
        super().__init__(
            f"stale lease on {resource}: token {token} was superseded (store holds fence {current})"
        )


class CallCancelled(StoreError):
    """The task that made a tool call has a committed cancel request: the call must not start."""

    def __init__(self, operation_id: str) -> None:
        self.operation_id = operation_id
        super().__init__(f"operation {operation_id} was cancelled before it started")


class NotFoundError(StoreError):
    """A row the caller named does not exist."""


class WorkspaceMoved(StoreError):
    """A call's changes to a workspace were not committed: another call committed the
    workspace's next version while it ran on the one before."""

    def __init__(self, session_id: str, name: str, base: int) -> None:
        super().__init__(
            f"workspace {name!r} of session {session_id} moved past version {base} while the "
            "call ran on it; the call's changes were discarded"
        )


class StoreWentBack(StoreError):
    """The store lost commits it had acknowledged: Redis witnessed ``witnessed`` of
    ``resource`` committed, and the store now holds ``stored`` (``shared.witness``).

    Retryable in the sense of ``settlement``: the delivery that met it is held, not acked and
    not parked, and runs once an operator has reconciled the store and accepted it
    (``brainhands store accept-rollback``); until then every acquisition is refused.
    """

    retryable = True

    def __init__(self, resource: str, stored: str, witnessed: str) -> None:
        self.resource = resource
        self.stored = stored
        self.witnessed = witnessed
        super().__init__(
            f"the store went back in time on {resource}: it holds {stored}, but {witnessed} "
            "was committed before; no work runs until an operator reconciles the store and "
            "runs `brainhands store accept-rollback`"
        )


class BrokerError(BrainhandsError):
    """RabbitMQ failed."""


class BrokerUnavailable(BrokerError):
    """No connection to RabbitMQ, or no publisher confirm within the bound."""

    retryable = True


class UnroutableMessage(BrokerError):
    """A mandatory publish was returned by the broker: no queue is bound to its route."""


class LeaseError(BrainhandsError):
    """A lease operation failed."""


class LeaseBackendError(LeaseError):
    """Redis failed while acquiring, renewing or releasing a lease."""

    retryable = True


class InvalidMessage(BrainhandsError):
    """A message body could not be decoded or did not validate against the protocol."""


class UnknownToolError(BrainhandsError):
    """No tool of that name is registered in this worker."""


class UnknownTaskKindError(BrainhandsError):
    """No handler for that task kind and version is registered in this build."""


class SubmissionFailed(BrainhandsError):
    """The submission a client waited for ended ``failed`` or ``cancelled``; ``record`` is
    the submission as it ended (its ``status`` and ``error``)."""

    def __init__(self, record: Any) -> None:
        self.record = record
        super().__init__(
            f"submission {record.request_id!r} of session {record.session_id} "
            f"{record.status}: {record.error}"
        )


class InvalidRequest(BrainhandsError, ValueError):
    """A client's request is malformed: a reserved signal name, a decision naming no call,
    a tenant or session id out of form. The message says what to change."""


class RefusedDestination(InvalidRequest):
    """A ``callback_url`` whose host does not resolve, or resolves to an address the
    deployment does not post to (loopback, private, link-local, multicast, reserved,
    unspecified) and the operator does not allow (``shared.destinations``). The message is
    for the operator's log: it names the address, which may be internal, so a tenant is
    told ``TOLD`` and nothing more (which names resolve inside is not theirs to learn)."""

    TOLD = "refused destination"


class DecisionRefused(BrainhandsError):
    """An operator's decision that cannot count: on an approval, the call was already
    decided otherwise (or expired), or is no longer pending; a budget raise while no run of
    the session is stopped at its budget."""


class AnswerTimeout(BrainhandsError, TimeoutError):
    """A client's wait for an answer ended before the submission did; it goes on running.
    ``record`` is the submission as last read."""

    def __init__(self, record: Any, waited: float) -> None:
        self.record = record
        super().__init__(
            f"submission {record.request_id!r} of session {record.session_id} is still "
            f"{record.status} after {waited}s"
        )


class ToolError(BrainhandsError):
    """Raised by tool code to report a failure with explicit retry behaviour.

    ``retryable`` says whether another attempt may succeed; ``next_retry_delay`` (seconds)
    overrides the tool's backoff for the next attempt.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        next_retry_delay: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.next_retry_delay = next_retry_delay


class ToolUncertain(ToolError):
    """Raised by tool code that cannot tell whether its effect happened (e.g. the request went
    out and no answer came back). The call is recorded ``uncertain`` and never run again on
    its own: the agent or a business rule decides."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class SandboxStopped(ToolError):
    """A command a tool ran in its sandbox (``ToolContext.run``) was stopped before it ended
    on its own: a limit of its ``Sandbox`` was reached, or the call was cancelled. The
    message names the command and the reason (``pytest -q: timed out after 60 s``);
    ``reason`` is the reason alone. Not retryable: the same command meets the same limit."""

    def __init__(self, command: str, reason: str) -> None:
        super().__init__(f"{command}: {reason}", retryable=False)
        self.reason = reason


class LeaseLost(BaseException):
    """The lease this work ran under was lost; the work must stop now."""

    def __init__(self, resource: str, reason: str) -> None:
        self.resource = resource
        self.reason = reason
        super().__init__(f"lease on {resource} lost: {reason}")
