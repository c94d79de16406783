"""Settings of a Hands worker process (``BRAINHANDS_*`` variables)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from brainhands.shared.config import CommonSettings
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
    mcp_relist_interval: float = Field(default=60.0, gt=0)
    """Seconds between two listings of the MCP servers' tools: a tool added or changed
    since is declared again."""
