"""Settings of an API process (``BRAINHANDS_API_*`` variables, beside the common ones)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from brainhands.shared.config import CommonSettings


class ApiSettings(CommonSettings):
    """The HTTP API: where it listens, how it authenticates, what it accepts."""

    api_host: str = "127.0.0.1"
    """Address the API listens on (``0.0.0.0`` in a container)."""
    api_port: int = Field(default=8080, ge=0, le=65535)
    """Port of the API, its OpenAPI document, ``/healthz``, ``/readyz`` and ``/metrics``."""
    api_auth: Literal["keys", "none"] = "keys"
    """``keys``: every request needs an API key (``brainhands keys create``); ``none``: no
    authentication, every request acts for tenant ``dev`` (local development only)."""
    api_max_body: int = Field(default=1_048_576, ge=1024)
    """Largest request body accepted, in bytes; a larger one is refused with 413."""
    api_compat: str = "v1"
    """The Brain build sessions created through the API are run by."""
