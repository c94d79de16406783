"""Settings of an MCP server process (``BRAINHANDS_MCP_SERVER_*`` variables, beside the
common ones)."""

from __future__ import annotations

from pydantic import Field

from brainhands.shared.config import CommonSettings


class McpServerSettings(CommonSettings):
    """``brainhands mcp``: where it listens over HTTP, which Brains it serves, how long a
    run's tool waits for the answer."""

    mcp_server_host: str = "127.0.0.1"
    """Address the streamable HTTP transport listens on (``0.0.0.0`` in a container)."""
    mcp_server_port: int = Field(default=8090, ge=0, le=65535)
    """Port of the streamable HTTP transport (its endpoint is ``/mcp``)."""
    mcp_server_compat: str = "v1"
    """The Brain build whose declared agents are served, and that runs new sessions."""
    mcp_server_wait: float = Field(default=300.0, gt=0)
    """Seconds a run's tool call waits for the answer. A run still going then is answered
    with its status; calling the tool again with the same session and request id collects
    its answer (the same request id never starts a second run)."""
    mcp_server_agents_ttl: float = Field(default=30.0, gt=0)
    """Seconds the list of declared agents (one tool each) is kept before it is read again."""
    mcp_server_rate: float = Field(default=50.0, gt=0)
    """HTTP requests a second one key may make of one MCP server process, sustained, and
    requests with no valid key one address may make (over it: 429, as the HTTP API does)."""
    mcp_server_burst: int = Field(default=200, ge=1)
    """Requests one key (or address) may make at once before its rate applies."""
