"""The deployment's agents served to MCP clients (``brainhands mcp``): a tool per agent
that starts a durable run and returns its answer, and tools to list and decide the calls
waiting for approval; a run may be a task of the Tasks extension (``tasks``), which a
client collects after disconnecting. ``settings``, ``callers`` and ``runs`` need no
``mcp`` SDK; ``tools``, ``tasks`` and ``serve`` do (the root distribution's ``mcp``
extra)."""
