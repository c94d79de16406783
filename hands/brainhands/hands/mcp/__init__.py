"""Tools from MCP servers, run by a Hands pool like its own (DESIGN §11).

``BRAINHANDS_MCP_CONFIG`` names the file of servers (``hands.mcp.config``); each server's
tools are declared as ``server.tool`` with the schema it lists and a replay policy read
from its annotations when the server is trusted (``hands.mcp.policy``). Only
``hands.mcp.connection`` and ``hands.mcp.tools`` import the ``mcp`` SDK (the Hands
distribution's ``mcp`` extra), and only a Hands configured with servers imports them.
"""

from brainhands.hands.mcp.config import (
    HttpServer,
    McpConfig,
    StdioServer,
    ToolOverride,
    load_mcp_config,
    parse_mcp_config,
)
from brainhands.hands.mcp.policy import Hints, McpPolicy, annotated_policy, tool_policy

__all__ = [
    "Hints",
    "HttpServer",
    "McpConfig",
    "McpPolicy",
    "StdioServer",
    "ToolOverride",
    "annotated_policy",
    "load_mcp_config",
    "parse_mcp_config",
    "tool_policy",
]
