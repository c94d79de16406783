"""The MCP configuration file: what it accepts, and the field it names when it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brainhands.hands.mcp import HttpServer, StdioServer, load_mcp_config
from brainhands.shared.errors import ConfigurationError


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_stdio_and_http_servers_with_overrides_from_yaml(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "mcp.yaml",
        """
servers:
  bank:
    command: python
    args: [-m, bank]
    env: {BANK_TOKEN: "${TOKEN}", MODE: test}
    trusted: true
    tools:
      deposit: {lookup: find_deposit, timeout: 5, pool: money}
  search:
    url: http://127.0.0.1:8000/mcp
    headers: {Authorization: "Bearer ${TOKEN}"}
""",
    )
    config = load_mcp_config(path, environ={"TOKEN": "s3cret"})

    bank, search = config.servers["bank"], config.servers["search"]
    assert isinstance(bank, StdioServer) and isinstance(search, HttpServer)
    assert (bank.command, bank.args, bank.trusted) == ("python", ["-m", "bank"], True)
    assert bank.env["BANK_TOKEN"].get_secret_value() == "s3cret"
    assert bank.env["MODE"].get_secret_value() == "test"
    deposit = bank.tools["deposit"]
    assert (deposit.lookup, deposit.timeout, deposit.pool) == ("find_deposit", 5, "money")
    assert search.headers["Authorization"].get_secret_value() == "Bearer s3cret"
    assert not search.trusted  # trust is never a default
    # Credentials are never printed, whoever prints the configuration.
    assert "s3cret" not in repr(config) and "s3cret" not in str(config)


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ({"servers": {}}, "servers: "),
        ({"servers": {"bank": {"args": ["x"]}}}, "servers.bank.stdio.command: Field required"),
        ({"servers": {"bank": {"url": "ftp://x"}}}, "servers.bank.http.url: String should match"),
        ({"servers": {"a.b": {"command": "x"}}}, "servers.a.b.[key]: String should match"),
        (
            {"servers": {"bank": {"command": "x", "tools": {"t": {"policy": "query"}}}}},
            "servers.bank.stdio.tools.t: Value error, policy 'query' needs a lookup tool",
        ),
        (
            {"servers": {"bank": {"command": "x", "tools": {"t": {"policy": "maybe"}}}}},
            "servers.bank.stdio.tools.t.policy: Input should be 'safe', 'query' or 'unsafe'",
        ),
        ({"servers": {"bank": {"command": "x", "trusted": "yes please"}}}, "trusted: Input"),
        (
            {"servers": {"bank": {"command": "x", "env": {"K": "${MISSING}"}}}},
            "servers.bank.stdio.env: Value error, refers to ${MISSING}, which is not set",
        ),
    ],
)
def test_an_invalid_file_is_refused_naming_the_field(
    tmp_path: Path, content: object, field: str
) -> None:
    path = write(tmp_path, "mcp.json", json.dumps(content))
    with pytest.raises(ConfigurationError) as caught:
        load_mcp_config(path, environ={})
    message = str(caught.value)
    assert message.startswith(f"BRAINHANDS_MCP_CONFIG ({path}): ")
    assert field in message


def test_an_unreadable_or_malformed_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot be read"):
        load_mcp_config(tmp_path / "absent.json", environ={})
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        load_mcp_config(write(tmp_path, "bad.json", "{servers"), environ={})
    with pytest.raises(ConfigurationError, match="not valid YAML"):
        load_mcp_config(write(tmp_path, "bad.yaml", "servers: [unclosed"), environ={})
