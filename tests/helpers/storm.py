"""A storm of worker kills on a chaos cluster (``tests/helpers/cluster.py``): a random
worker SIGKILLed every ``interval`` seconds and started again a moment later, a worker that
died by itself (a poison job) started again too, and the deployment's Redis state dropped at
chosen moments, as a Redis restarted with nothing kept would have it.

The suite's churn case and ``bench/faults.py``'s long one both blow through it, then wait for
the sessions with every worker supervised (``supervised_until_done``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence

from redis.asyncio import Redis

from tests.helpers.cluster import Cluster
from tests.helpers.polling import eventually


async def kill_storm(
    cluster: Cluster,
    names: Sequence[str],
    *,
    seconds: float,
    rng: random.Random,
    redis_wipes_at: Sequence[float] = (),
    interval: tuple[float, float] = (0.3, 1.0),
    restart_after: tuple[float, float] = (0.5, 2.0),
) -> None:
    """Kill one of ``names`` (brain-*, hands-*, sweeper-*) every ``interval`` seconds for
    ``seconds``, keeping one Brain and one Hands alive; each is started again
    ``restart_after`` seconds after its death. At each of ``redis_wipes_at`` (seconds into
    the storm) the deployment's Redis keys are dropped. Every worker runs when it returns."""
    started = time.monotonic()
    restart_at: dict[str, float] = {}
    wipes = sorted(redis_wipes_at)
    while (now := time.monotonic()) - started < seconds:
        for name in names:
            if name not in restart_at and cluster.procs[name].poll() is not None:
                cluster.kills[f"died by itself: {role(name)}"] += 1
                restart_at[name] = now
        for name, when in list(restart_at.items()):
            if now >= when:
                cluster.start(name)
                del restart_at[name]
        if wipes and now - started >= wipes[0]:
            wipes.pop(0)
            await wipe_redis(cluster)
            cluster.kills["redis restarted empty"] += 1
        alive = [n for n in names if n not in restart_at]
        roles = {r: [n for n in alive if n.startswith(r)] for r in ("brain", "hands")}
        victims = [n for n in alive if not n.startswith(tuple(roles)) or len(roles[role(n)]) > 1]
        if victims:
            victim = rng.choice(victims)
            cluster.kill(victim)
            restart_at[victim] = now + rng.uniform(*restart_after)
        await asyncio.sleep(rng.uniform(*interval))
    for name in restart_at:
        cluster.start(name)


async def supervised_until_done(cluster: Cluster, names: Sequence[str], within: float) -> None:
    """Wait for every session to finish while starting again each of ``names`` that dies
    (a poison job's doing), as a supervisor would."""

    async def done() -> bool:
        for name in names:
            if cluster.procs[name].poll() is not None:
                cluster.kills[f"died by itself: {role(name)}"] += 1
                cluster.start(name)
        return await cluster.all_done()

    await eventually(done, within=within, what="every session to finish")


def role(name: str) -> str:
    return name.split("-")[0]


async def wipe_redis(cluster: Cluster) -> None:
    """Drop every key of the deployment's namespace: to its workers, Redis restarted empty
    (leases, token counters, witnesses, hand-overs gone), while other tests' keys stay."""
    redis = Redis.from_url(cluster.redis_url)
    try:
        pattern = f"{cluster.env.topology.namespace}:*"
        async for key in redis.scan_iter(match=pattern, count=1000):
            await redis.delete(key)
    finally:
        await redis.aclose()
