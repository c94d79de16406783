"""Task and operation ids, derived from the session's uid.

An operation id is handed to external services as their idempotency key, so it must never
repeat across deployments, stores or re-created sessions (DESIGN §2). The caller-chosen
session id cannot promise that (two deployments both serve a ``cust-42``); the random uid a
session gets when it is first created can. Each id is a function of what the store held
before the commit that creates it, so a phase run again before its result is committed
derives the same ids, and versions only grow, so no later commit derives them again.
"""

from __future__ import annotations

import hashlib
import uuid

_NAMESPACE = uuid.NAMESPACE_URL.bytes

CHOSEN_OPERATION_ID_MAX = 31
"""Longest operation id a phase may choose: it is kept scoped as ``{uid}:{chosen}`` (a
32-character uid and a colon) in a 64-character key."""


def derive_task_id(session_uid: str, version: int, n: int) -> str:
    """The ``n``-th task (counting from 0) created by the commit that makes the session
    ``version``."""
    # ``uuid.uuid5(uuid.NAMESPACE_URL, name).hex``, without building a ``UUID`` on the way
    # (a third of the time, at every task a pass creates).
    digest = bytearray(hashlib.sha1(_NAMESPACE + f"{session_uid}/{version}/{n}".encode()).digest())
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    return digest[:16].hex()


def derive_operation_id(session_uid: str, task_id: str, chosen: str | None = None) -> str:
    """The idempotency key of tool task ``task_id``'s call: ``op-{task_id}``, or the id its
    phase chose, scoped by the session's uid."""
    return f"op-{task_id}" if chosen is None else f"{session_uid}:{chosen}"
