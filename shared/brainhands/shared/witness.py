"""Redis as the witness of what the store had committed: how a store that went back in time
is found, and what the deployment does about it.

A PostgreSQL standby promoted after its primary died holds what it had received. An
asynchronous one may lack commits the primary acknowledged: an operation recorded as
finished is found ``intended`` again (its call would go out a second time), a session's
committed turn is gone. The fencing tokens do not see it: the store's fences went back with
the rest, and Redis's counters are still above them.

So the lease scripts, in the round trips they already make, keep a witness per resource:

- releasing a lease after its holder's last commit records what that commit left -- a
  session's version, or for an operation the fence under which its final outcome was
  committed (``release.lua``; the larger value kept);
- acquiring returns the witness with the token (``acquire.lua``), and the holder compares it
  with what its claim read from the store (``session_went_back``, ``operation_went_back``).

A store behind its witness lost acknowledged commits. The worker that finds it sets the
deployment's flag (``declare_went_back``, logged at CRITICAL) and does not act on the
resource; while the flag is set ``acquire.lua`` refuses every acquisition, so every Brain
and Hands holds its deliveries (``StoreWentBack`` is retryable: held, neither acked nor
parked) and readiness says no. An operator reconciles the store and runs
``brainhands store accept-rollback`` (``accept_rollback``), which deletes the flag and the
namespace's witnesses.

A witness only ever says the store reached *at least* that point, so losing one costs
nothing but detection: Redis restarting empty, failing over to a replica that missed the
last writes, or a resource idle past the counter's TTL (its witness expires with its fence
key) leaves nothing to compare, and nothing is refused falsely.
"""

from __future__ import annotations

import json
import logging
import time

from redis.asyncio import Redis

from brainhands.shared.errors import StoreWentBack
from brainhands.shared.keys import Keys
from brainhands.shared.statuses import FINAL_OPERATION_STATUSES

log = logging.getLogger("brainhands.witness")

ACCEPT_BATCH = 500
"""Witness keys deleted per ``DEL`` when a rollback is accepted."""


def session_went_back(
    resource: str, witnessed: int | None, stored: int | None
) -> StoreWentBack | None:
    """The proof that the store lost commits of a session, if it did: Redis witnessed its
    version ``witnessed`` committed, and the store holds version ``stored`` (None: no such
    session)."""
    if witnessed is None or (stored is not None and stored >= witnessed):
        return None
    held = "no such session" if stored is None else f"version {stored}"
    return StoreWentBack(resource, held, f"version {witnessed}")


def operation_went_back(
    resource: str, witnessed: int | None, stored: str | None
) -> StoreWentBack | None:
    """The proof that the store lost an operation's outcome, if it did: Redis witnessed its
    final outcome committed under fence ``witnessed``, and the store holds status ``stored``
    (None: no such operation). A final outcome never changes, so any other status is a loss."""
    if witnessed is None or stored in FINAL_OPERATION_STATUSES:
        return None
    held = "no such operation" if stored is None else f"status {stored}"
    return StoreWentBack(resource, held, f"a final outcome (under fence {witnessed})")


def evidence(error: StoreWentBack, *, by: str = "") -> str:
    """``error`` as the flag's value: JSON an operator reads and ``read_evidence`` parses."""
    found = {
        "resource": error.resource,
        "stored": error.stored,
        "witnessed": error.witnessed,
        "at": time.time(),
        "by": by,
    }
    return json.dumps(found)


def read_evidence(value: str | bytes) -> StoreWentBack:
    """The error a flag's value (``evidence``) describes; a value of any other form still
    refuses, saying so."""
    try:
        found = json.loads(value)
        return StoreWentBack(str(found["resource"]), str(found["stored"]), str(found["witnessed"]))
    except (ValueError, KeyError, TypeError):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        return StoreWentBack("an unknown resource", "less", f"more (flag value {text!r})")


async def declare_went_back(redis: Redis, keys: Keys, error: StoreWentBack, *, by: str) -> None:
    """Set the deployment's flag with ``error``'s evidence (the first finding is kept), so
    every worker refuses work; log it at CRITICAL. ``by`` names the finder."""
    await redis.set(keys.store_went_back(), evidence(error, by=by), nx=True)
    log.critical(
        "the store lost acknowledged commits: refusing all work until an operator accepts it",
        extra={
            "event": "store_went_back",
            "resource": error.resource,
            "stored": error.stored,
            "witnessed": error.witnessed,
            "by": by,
        },
    )


async def went_back(redis: Redis, keys: Keys) -> StoreWentBack | None:
    """The finding the deployment's flag holds, if it is set."""
    value = await redis.get(keys.store_went_back())
    return None if value is None else read_evidence(value)


async def accept_rollback(redis: Redis, keys: Keys) -> tuple[StoreWentBack | None, int]:
    """Let the deployment run on its store as it is: delete the namespace's witnesses, then
    the flag. Returns the finding the flag held and how many witnesses were deleted.

    The witnesses go first: they describe the store before it went back, and once the flag
    is gone they would refuse again on every resource that lost commits."""
    deleted = 0
    batch: list[bytes] = []
    async for key in redis.scan_iter(match=keys.witnesses(), count=ACCEPT_BATCH):
        batch.append(key)
        if len(batch) >= ACCEPT_BATCH:
            deleted += await redis.delete(*batch)
            batch = []
    if batch:
        deleted += await redis.delete(*batch)
    finding = await went_back(redis, keys)
    await redis.delete(keys.store_went_back())
    return finding, deleted
