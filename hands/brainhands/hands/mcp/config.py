"""The MCP servers a Hands pool serves tools from: the file ``BRAINHANDS_MCP_CONFIG`` names.

A JSON or YAML file, read once at start-up and validated whole, so a typo stops the
process with the field to fix instead of failing calls later::

    servers:
      bank:                                  # its tools are declared as bank.<tool>
        command: python                      # stdio: a command, its arguments, its environment
        args: [-m, bank_server]
        env: {BANK_TOKEN: "${BANK_TOKEN}"}   # ${NAME}: from the Hands' environment
        trusted: true                        # read its tools' annotations (hands.mcp.policy)
        tools:
          transfer: {lookup: find_transfer}  # per tool: policy, lookup, approval, timeout, pool
      search:
        url: http://127.0.0.1:8000/mcp       # streamable HTTP, with headers
        headers: {Authorization: "Bearer ${SEARCH_KEY}"}

Environment values and headers are credentials: they are ``SecretStr`` (never printed in a
log line or an error) and are only handed to the server's process or requests; nothing of
them reaches the store or the Brain. This module does not import the ``mcp`` SDK.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SecretStr,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from brainhands.shared.errors import ConfigurationError
from brainhands.shared.tools import ReplayPolicy, describe_invalid_arguments

NAME = r"^[A-Za-z0-9_-]+$"
"""A server's name: the namespace of its tools (``server.tool``), so no dot."""

_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ToolOverride(BaseModel):
    """What the configuration says of one tool, over what its annotations say."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: ReplayPolicy | None = None
    lookup: str | None = Field(default=None, min_length=1)
    """A tool of the same server that tells whether a call happened: called with
    ``{"operation_id": ...}``, it answers ``{"found": bool, "result": ...}``."""
    approval: bool | None = None
    timeout: float | None = Field(default=None, gt=0)
    pool: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _query_needs_lookup(self) -> ToolOverride:
        if self.policy == "query" and self.lookup is None:
            raise ValueError("policy 'query' needs a lookup tool to ask")
        return self


def _resolve(value: str, info: ValidationInfo) -> SecretStr:
    """``value`` with each ``${NAME}`` replaced from the environment in the context."""
    environ: Mapping[str, str] = (info.context or {}).get("environ", {})

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ValueError(f"refers to ${{{name}}}, which is not set in the environment")
        return environ[name]

    return SecretStr(_REFERENCE.sub(substitute, value))


class _Server(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    trusted: bool = False
    """Whether its tools' annotations are believed (the spec: untrusted hints are ignored)."""
    pool: str | None = Field(default=None, min_length=1)
    """The Hands pool its tools run on (default: the pool of the Hands reading the file)."""
    timeout: float = Field(default=60.0, gt=0)
    """Seconds a call of its tools may take (a tool's own ``timeout`` overrides it)."""
    start_attempts: int = Field(default=3, ge=1)
    """Tries to start (or reach) it before a call fails with the reason."""
    tools: dict[str, ToolOverride] = Field(default_factory=dict)


class StdioServer(_Server):
    """A server the Hands starts as its own child process, talking over stdin/stdout."""

    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, SecretStr] = Field(default_factory=dict)

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, dict):
            return value
        return {k: _resolve(v, info) if isinstance(v, str) else v for k, v in value.items()}


class HttpServer(_Server):
    """A server reached over streamable HTTP."""

    url: str = Field(pattern=r"^https?://")
    headers: dict[str, SecretStr] = Field(default_factory=dict)

    @field_validator("headers", mode="before")
    @classmethod
    def _headers(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, dict):
            return value
        return {k: _resolve(v, info) if isinstance(v, str) else v for k, v in value.items()}


def _transport(value: Any) -> Literal["http", "stdio"]:
    return "http" if isinstance(value, dict) and "url" in value else "stdio"


McpServer = Annotated[
    Annotated[StdioServer, Tag("stdio")] | Annotated[HttpServer, Tag("http")],
    Discriminator(_transport),
]


class McpConfig(BaseModel):
    """Every MCP server of the file, by name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    servers: dict[Annotated[str, Field(pattern=NAME)], McpServer] = Field(min_length=1)


def parse_mcp_config(data: Any, *, environ: Mapping[str, str]) -> McpConfig:
    """Validate ``data`` (the file's content); ``${NAME}`` references read ``environ``."""
    return McpConfig.model_validate(data, context={"environ": environ})


def load_mcp_config(path: Path, *, environ: Mapping[str, str]) -> McpConfig:
    """Read and validate the file at ``path``, or raise ``ConfigurationError`` naming the
    variable, the file and the field to fix."""
    where = f"BRAINHANDS_MCP_CONFIG ({path})"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigurationError(f"{where}: cannot be read: {exc.strerror}") from None
    if path.suffix in (".yaml", ".yml"):
        import yaml  # in the mcp extra; a JSON file needs nothing more

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigurationError(f"{where}: not valid YAML: {exc}") from None
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"{where}: not valid JSON: {exc}") from None
    try:
        return parse_mcp_config(data, environ=environ)
    except ValidationError as exc:
        raise ConfigurationError(f"{where}: {describe_invalid_arguments(exc)}") from None
