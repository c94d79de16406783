"""Settings of a Brain worker process (``BRAINHANDS_*`` variables)."""

from __future__ import annotations

from pydantic import Field, field_validator

from brainhands.brain.retention import Retention, tenant_days
from brainhands.shared.config import CommonSettings


class BrainSettings(CommonSettings):
    """A Brain worker: how it holds sessions and how its embedded sweeper runs."""

    concurrency: int = Field(default=16, ge=1)
    """Sessions advanced at once (the consumer's prefetch). Passes in flight together share
    their store, Redis and broker round trips (``shared.batch``), but when the Brain's CPU
    is the limit each waits longer for it: more trades latency for throughput. A pass holds
    its slot through its model call, so slow models want more."""
    lease_ttl_ms: int = Field(default=10_000, ge=200)
    """How long a session lease lives without renewal; renewed every third of it."""
    max_restarts: int = Field(default=5, ge=1)
    """Entries into one phase before a task that keeps dying there is failed."""
    document_increments: bool = False
    """Whether a document write stores its increment alone, the whole value only at each
    new baseline. Off: every write stores the whole value as well (what a build older than
    increments reads); turn it on once no such build runs (docs/deploy.md)."""
    tool_declaration_grace: float = Field(default=30.0, ge=0)
    """Seconds a young task or agent turn waits for a Hands pool to declare a tool it calls
    (Hands started after the Brain); past them the call fails, or is refused, as unknown."""
    shutdown_grace: float = Field(default=20.0, ge=0)
    """Seconds running phases get to finish after SIGTERM."""
    sweeper_period: float = Field(default=1.0, gt=0)
    """Seconds between sweeps: how long a lost trigger can delay work."""
    sweeper_backlog_grace: float = Field(default=10.0, gt=0)
    """Seconds a session's need must wait before it is re-triggered while its Brain queue
    holds a backlog (its wake-up is most likely still queued) and the queue has no delivery
    mark; doubled per wake-up sent. No hold lasts more than eight of these."""
    sweeper_blocked_recheck: float = Field(default=60.0, gt=0)
    """Seconds after a task was blocked (no handler for its kind or version) before the
    sweeper wakes its session to look again; doubled per look, up to eight times."""
    redispatch_after: float = Field(default=15.0, gt=0)
    """Seconds a tool call may go without an outcome or a live lease before it is re-sent."""
    schedule_late_after: float = Field(default=60.0, gt=0)
    """Seconds a schedule's tick may be late (the sweepers down, or behind) and still be
    submitted; a tick older than that was missed, and the schedule's ``missed`` policy
    decides: ``skip`` it, or ``run_one`` (the latest missed tick, once)."""
    retention_days: float = Field(default=0.0, ge=0)
    """Days a finished session (no task open, no submission queued or running) is kept
    after its last change before the sweeper erases it, with all it owns; 0: for ever."""
    retention_tenant_days: str = ""
    """Tenants whose sessions are kept another number of days than ``retention_days``:
    ``acme=7,globex=0`` (0: for ever)."""

    @field_validator("retention_tenant_days")
    @classmethod
    def _retention_tenant_days(cls, value: str) -> str:
        tenant_days(value)
        return value

    @property
    def retention(self) -> Retention:
        """How long the sweeper keeps finished sessions."""
        return Retention(self.retention_days, tenant_days(self.retention_tenant_days))
