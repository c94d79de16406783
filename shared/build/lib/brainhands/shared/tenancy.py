"""Tenants: whose a session is, and how a tenant's session id becomes the store's key.

Every session belongs to one tenant. A tenant names its sessions freely; the store keys
them by ``<tenant>/<id>``, so the same id in two tenants is two sessions, and nothing one
tenant sends can reach, create or detect another's. The default tenant's sessions (what the
CLI and the Python client make unless told otherwise, and everything made before tenants
had ids of their own) keep the id itself as their key.

A tenant name and a tenant's session id never contain ``/``: a key with one is always a
tenant's, a key without one is always the default tenant's, and no two pairs share a key.
"""

from __future__ import annotations

import re

from brainhands.shared.errors import InvalidRequest

DEFAULT_TENANT = "default"
"""The tenant of sessions made without one: the CLI's and the Python client's by default,
and the API's when authentication is off."""

TENANT_MAX = 64
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]*")
"""A tenant or a tenant's session id: plain characters, never ``/``."""


def check_tenant(tenant: str) -> str:
    """``tenant`` if it is a valid tenant name; ``InvalidRequest`` saying why otherwise."""
    if not 0 < len(tenant) <= TENANT_MAX or not NAME.fullmatch(tenant):
        raise InvalidRequest(
            f"tenant {tenant!r}: 1 to {TENANT_MAX} of A-Z a-z 0-9 . _ : @ - (starting with a "
            "letter or digit)"
        )
    return tenant


def session_key(tenant: str | None, session_id: str) -> str:
    """The store's key of ``tenant``'s session ``session_id``. ``None``: the caller speaks
    in store keys already (an operator's client), and ``session_id`` is the key."""
    if tenant is None:
        return session_id
    if "/" in session_id:
        raise InvalidRequest(f"session id {session_id!r}: a tenant's session id has no '/'")
    return session_id if tenant == DEFAULT_TENANT else f"{tenant}/{session_id}"


def split_key(key: str) -> tuple[str, str]:
    """The tenant and the tenant's own id of the session whose store key is ``key``."""
    tenant, slash, session_id = key.partition("/")
    return (tenant, session_id) if slash else (DEFAULT_TENANT, key)
