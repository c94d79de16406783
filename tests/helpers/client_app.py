"""An application of brainhands: its only project import is ``brainhands``.

Run as a script (``python client_app.py N [--old]``) with the deployment's ``BRAINHANDS_*``
URLs in the environment. It submits N sessions of the ``steps`` kind, waits for every
answer, then submits a long ``napper``, cancels it (twice) once it sleeps, waits for its end
and reads its session; it prints one JSON document of what it saw, with the CPU time it
spent on the N submissions and their answers.

``--old`` does the N submissions the way ``brainhands submit --wait`` did before the client
(``submit_input``, then ``wait_for_answer`` polling the store every 0.1 s), for comparison.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from typing import Any

from brainhands import Client, SubmissionFailed


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def with_client(n: int) -> dict[str, Any]:
    env = os.environ
    async with await Client.connect(
        database_url=env["BRAINHANDS_DATABASE_URL"],
        database_schema=env.get("BRAINHANDS_DATABASE_SCHEMA"),
        rabbitmq_url=env["BRAINHANDS_RABBITMQ_URL"],
        namespace=env["BRAINHANDS_NAMESPACE"],
    ) as client:
        began, started = cpu(), time.monotonic()
        handles = [
            await client.submit(f"app-{i}", {"kind": "steps", "input": {"i": i}}, request_id="r1")
            for i in range(n)
        ]
        submitted = cpu() - began
        answers = await asyncio.gather(*(h.result(timeout=60) for h in handles))
        spent, took = cpu() - began, time.monotonic() - started

        nap = await client.submit("app-nap", {"kind": "napper", "input": {"seconds": 600}})
        for _ in range(600):  # an application's own wait: until the napper sleeps (30 s)
            if any(t.status == "sleeping" for t in (await client.session("app-nap")).tasks):
                break
            await asyncio.sleep(0.05)
        said = [await nap.cancel(), await nap.cancel()]
        try:
            await nap.result(timeout=30)
            ended = "answered"
        except SubmissionFailed as exc:
            ended = exc.record.status
        view = await client.session("app-nap")
        return {
            "answers": [a["input"]["i"] for a in answers],
            "cpu_seconds": spent,
            "submit_cpu_seconds": submitted,
            "wall_seconds": took,
            "cancel_said": said,
            "cancel_ended": ended,
            "nap_request_id": nap.request_id,
            "view": {
                "session": view.session.id,
                "submissions": [s.status for s in view.submissions],
                "tasks": [
                    {"kind": t.kind, "status": t.status, "outcome": t.outcome} for t in view.tasks
                ],
                "inbox": [
                    {"kind": r.kind, "key": r.key, "applied": r.applied_at is not None}
                    for r in view.inbox
                ],
            },
        }


async def the_old_way(n: int) -> dict[str, Any]:
    from brainhands.shared.store import Store
    from brainhands.shared.topology import Topology
    from tests.helpers.submitting import submit_input, wait_for_answer

    env = os.environ
    store = await Store.open(
        env["BRAINHANDS_DATABASE_URL"], db_schema=env.get("BRAINHANDS_DATABASE_SCHEMA")
    )
    topology = Topology(env["BRAINHANDS_NAMESPACE"])
    try:
        began, started = cpu(), time.monotonic()
        for i in range(n):
            await submit_input(
                store,
                topology,
                session_id=f"old-{i}",
                request_id="r1",
                input={"kind": "steps", "input": {"i": i}},
                compat="v1",
            )
        submitted = cpu() - began
        records = await asyncio.gather(
            *(wait_for_answer(store, f"old-{i}", "r1", within=60) for i in range(n))
        )
        spent, took = cpu() - began, time.monotonic() - started
    finally:
        await store.close()
    return {
        "answers": [r.answer["input"]["i"] for r in records],
        "cpu_seconds": spent,
        "submit_cpu_seconds": submitted,
        "wall_seconds": took,
    }


if __name__ == "__main__":
    count = int(sys.argv[1])
    run = the_old_way if "--old" in sys.argv else with_client
    print(json.dumps(asyncio.run(run(count))))
