"""Settings of an API process (``BRAINHANDS_API_*`` variables, beside the common ones)."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, SecretStr

from brainhands.shared.config import CommonSettings
from brainhands.shared.errors import ConfigurationError


class ApiSettings(CommonSettings):
    """The HTTP API: where it listens, how it authenticates, what it accepts."""

    api_host: str = "127.0.0.1"
    """Address the API listens on (``0.0.0.0`` in a container)."""
    api_port: int = Field(default=8080, ge=0, le=65535)
    """Port of the API, its OpenAPI document, ``/healthz``, ``/readyz`` and ``/metrics``."""
    api_auth: Literal["keys", "none"] = "keys"
    """``keys``: every request needs an API key (``brainhands keys create``); ``none``: no
    authentication, every request acts for the default tenant, whose sessions the CLI and
    the Python client make unless told otherwise (one developer's machine only: the API
    then refuses to listen on an address other than a loopback one, refuses writes from
    other sites' pages, and still asks an ``operator`` key for an operator's acts)."""
    api_max_body: int = Field(default=1_048_576, ge=1024)
    """Largest request body accepted, in bytes; a larger one is refused with 413."""
    api_compat: str = "v1"
    """The Brain build sessions created through the API are run by."""
    api_four_eyes: bool = False
    """A session's decisions (approve, deny, decision signals, budget raises, undo retry
    or abandon) are made only by a key other than the ones that submitted to it."""
    api_cors_origins: str = ""
    """Comma-separated origins whose pages may call the API from a browser
    (``https://console.example.com``); empty: none but the API's own."""
    api_allowed_hosts: str = ""
    """Comma-separated ``Host`` names the API answers to; empty: any with keys, only
    ``localhost``, ``127.0.0.1`` and ``::1`` with authentication off (so that a web page
    elsewhere cannot reach a loopback API through DNS rebinding)."""
    api_rate: float = Field(default=50.0, gt=0)
    """Requests a second one key may make of one API process, sustained (over it: 429)."""
    api_burst: int = Field(default=200, ge=1)
    """Requests one key may make at once before its rate applies."""
    api_max_streams: int = Field(default=50, ge=1)
    """Event streams one key may hold open on one API process at once."""
    api_token_secret: SecretStr | None = None
    """Key that signs stream tokens (``POST /stream-tokens``); every API replica needs the
    same one to accept the others' tokens. Unset: each process makes its own."""
    api_docs: bool = False
    """Serve the OpenAPI document (``/openapi.json``), to any key of the deployment. No
    page renders it: a documentation page would load its code from elsewhere."""

    def check_bind(self, host: str) -> None:
        """``ConfigurationError`` if authentication is off and ``host`` is not a loopback
        address: no key would then guard what anyone on the network can reach."""
        if self.api_auth == "none" and not _loopback(host):
            raise ConfigurationError(
                f"BRAINHANDS_API_AUTH=none serves only a loopback address, not {host!r} "
                "(BRAINHANDS_API_HOST, --host): set BRAINHANDS_API_AUTH=keys to listen there"
            )

    def cors_origins(self) -> list[str]:
        return [o.strip() for o in self.api_cors_origins.split(",") if o.strip()]

    def allowed_hosts(self) -> list[str]:
        hosts = [h.strip() for h in self.api_allowed_hosts.split(",") if h.strip()]
        if hosts:
            return hosts
        return ["*"] if self.api_auth == "keys" else ["localhost", "127.0.0.1", "::1"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
