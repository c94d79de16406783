"""Who an MCP call acts for.

Over HTTP, the API key its request carries (``Authorization: Bearer bh_...``, as the HTTP
API takes it), verified with the API's own key table (``api.keys.VerifiedKeys``): the
call acts for that key's tenant, with its scopes, and is recorded as the key's
(``key:<id>``), as the API's acts are. Over stdio the server is the local user's own
process and acts as the CLI does: for the settings' tenant, recorded as their identity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from brainhands.api.keys import Principal, VerifiedKeys
from brainhands.shared.config import CommonSettings


@dataclass(frozen=True)
class Caller:
    """Whom a call acts for (tenant, scopes, a display name) and what its acts are
    recorded as."""

    principal: Principal
    acting: str


class Identify(Protocol):
    """The caller of a request with these headers (None: the transport has none), or None
    when they carry no valid key."""

    async def __call__(self, headers: Mapping[str, str] | None) -> Caller | None: ...


def local_caller(settings: CommonSettings) -> Identify:
    """Every call is the local user's: ``settings``' tenant, recorded as its identity,
    allowed all a tenant's ``admin`` key is (as the CLI is)."""
    caller = Caller(
        Principal("-", settings.tenant, settings.identity, frozenset({"admin"})),
        settings.identity,
    )

    async def identify(headers: Mapping[str, str] | None) -> Caller | None:
        return caller

    return identify


class KeyHolders:
    """Callers by the API key in their ``Authorization`` header."""

    def __init__(self, keys: VerifiedKeys) -> None:
        self.keys = keys

    async def __call__(self, headers: Mapping[str, str] | None) -> Caller | None:
        kind, _, credentials = (headers or {}).get("authorization", "").partition(" ")
        if kind.lower() != "bearer" or not credentials.strip():
            return None
        found = await self.keys.verify(credentials.strip())
        return None if found is None else Caller(found, f"key:{found.key_id}")
