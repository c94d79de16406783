"""``brainhands store``: whether a worker found the store gone back in time, and the
operator's word that the deployment may run on it as it is (``shared.witness``)."""

from __future__ import annotations

import argparse

from brainhands.shared.config import CommonSettings, load_settings
from brainhands.shared.keys import Keys
from brainhands.shared.lease import connect_redis
from brainhands.shared.witness import accept_rollback, read_evidence


async def store(args: argparse.Namespace) -> int:
    """``check``: print the finding, exit 1 while it stands (0 when there is none).
    ``accept-rollback``: delete it and the namespace's witnesses; work resumes."""
    settings = load_settings(CommonSettings)
    redis = connect_redis(
        settings.redis_url,
        sentinels=settings.sentinel_addresses,
        sentinel_master=settings.redis_sentinel_master,
    )
    keys = Keys(settings.namespace)
    try:
        if args.action == "check":
            raw = await redis.get(keys.store_went_back())
            if raw is None:
                print(f"namespace {keys.namespace}: no worker found the store gone back")
                return 0
            text = raw if isinstance(raw, str) else raw.decode(errors="replace")
            print(f"namespace {keys.namespace}: all work refused: {read_evidence(text)}")
            print(f"evidence: {text}")
            return 1
        finding, witnesses = await accept_rollback(redis, keys)
    finally:
        await redis.aclose()
    if finding is None:
        print(f"namespace {keys.namespace}: nothing was refused; {witnesses} witnesses deleted")
    else:
        print(
            f"namespace {keys.namespace}: rollback accepted ({finding.resource}: the store "
            f"holds {finding.stored}, {finding.witnessed} had been committed); "
            f"{witnesses} witnesses deleted, work resumes"
        )
    return 0
