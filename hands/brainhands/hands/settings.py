"""Settings of a Hands worker process (``BRAINHANDS_*`` variables)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from brainhands.shared.config import CommonSettings
from brainhands.shared.limits import LimitRules, parse_limit_rules
from brainhands.shared.messages import MAX_INLINE_JSON


class HandsSettings(CommonSettings):
    """A Hands worker: which pool it serves and how it treats each tool call."""

    concurrency: int = Field(default=16, ge=1)
    """Tool calls run at once (the consumer's prefetch); calls in flight together share
    their claims, starts, outcomes and lease round trips (``shared.batch``)."""
    lease_ttl_ms: int = Field(default=10_000, ge=200)
    """How long an operation lease lives without renewal; renewed every third of it."""
    shutdown_grace: float = Field(default=20.0, ge=0)
    """Seconds running tools get to finish after SIGTERM before they are handed back."""
    max_inline_result: int = Field(default=MAX_INLINE_JSON, ge=1024)
    """Results larger than this many bytes are stored once as a blob, not inline."""
    mcp_config: Path | None = None
    """A JSON or YAML file of MCP servers whose tools this pool serves too
    (``hands.mcp.config``); unset: none."""
    sandbox_bwrap: str = Field(default="bwrap", min_length=1)
    """The bubblewrap program that makes the sandboxes of tools declared with a ``Sandbox``
    (a name on ``PATH`` or a path). A Hands serving such a tool checks at start-up that it
    makes one, and refuses to start if not."""
    sandbox_first_user: int = Field(default=2_000_000, ge=1)
    """When the Hands runs as root: the first of the 65,536 user ids its sandboxes run as,
    one for each (the kernel limits a user's processes, not a sandbox's, and never root's).
    Give each Hands on a machine a range of ids no account uses."""
    mcp_relist_interval: float = Field(default=60.0, gt=0)
    """Seconds between two listings of the MCP servers' tools: a tool added or changed
    since is declared again."""
    tool_limits: str = ""
    """The operator's limits per tool, per pool and per (tenant, tool), as JSON
    (``shared.limits.parse_limit_rules``): ``{"tool:send_email": {"rate": 10, "burst": 2},
    "pool:email": {"concurrency": 20}, "tenant:acme/tool:send_email": {"rate": 1}}``. A
    ``tool:`` entry replaces the tool's own declaration; every limit that applies holds."""
    limit_waiting: int = Field(default=64, ge=0)
    """Jobs a Hands holds waiting for their tools' limits beyond ``concurrency`` (when any
    tool of its pool is limited): while they wait, other tools' jobs still run."""

    @field_validator("tool_limits")
    @classmethod
    def _tool_limits(cls, value: str) -> str:
        parse_limit_rules(value)
        return value

    @property
    def limit_rules(self) -> LimitRules:
        """The limits of ``tool_limits``."""
        return parse_limit_rules(self.tool_limits)
