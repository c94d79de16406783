"""Arguments and results too large to go inline, through real Brain and Hands processes on
each store: stored once as blobs, referenced by the rows and messages, and seen whole by the
tool, the phase and the model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from brainhands.brain.decide import TOOL_KIND
from brainhands.shared.messages import MAX_INLINE_JSON, ToolJob, decode
from brainhands.shared.store import Store, schema
from tests.helpers.brains import BrainHarness
from tests.helpers.large_values import POOL, SIZE, digest, text_of
from tests.helpers.processes import spawn_module
from tests.helpers.rabbit import broker_env
from tests.helpers.stores import StoreTarget
from tests.helpers.submitting import submit_input

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MODULE = "tests.helpers.large_values"


@pytest.fixture
async def deployment(
    store_target: StoreTarget, rabbitmq_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[BrainHarness]:
    """A Brain and a Hands worker of pool ``bulk``, on a store of each backend."""
    store = await Store.open(store_target.url, upgrade=True, db_schema=store_target.schema)
    async with broker_env(rabbitmq_url, namespace) as env:
        harness = BrainHarness(store, store_target, env, redis_url, tmp_path)
        await env.brain_queue("v1")
        await env.hands_queue(POOL)
        try:
            yield harness
        finally:
            harness.kill_all()
            await store.close()


def start(deployment: BrainHarness, **env: str) -> None:
    deployment.start_brain(tasks=MODULE, agents=MODULE, **env)
    hands = spawn_module(
        "brainhands",
        "hands",
        "--pool",
        POOL,
        "--tools",
        MODULE,
        env=deployment.settings(**env),
        log=deployment.tmp_path / "hands.log",
    )
    deployment.processes.append(hands)


async def tool_jobs(store: Store) -> list[tuple[int, ToolJob]]:
    """Every tool job in the outbox, with the size of its body on the wire."""
    async with store.backend.engine.connect() as conn:
        bodies = [bytes(r.body) for r in await conn.execute(select(schema.outbox.c.body))]
    return [(len(b), m) for b in bodies if isinstance(m := decode(b), ToolJob)]


async def test_a_large_result_reaches_the_phase_that_reads_it(deployment: BrainHarness) -> None:
    start(deployment)
    await deployment.submit("read_large", {"size": SIZE})

    record = await deployment.answer(within=60)

    assert record.answer == {
        "outcome": "succeeded",
        "error": None,
        "sha256": digest({"text": text_of(SIZE)}),
    }
    _, [op] = await deployment.store.queries.history("s1")
    assert op.result is None and op.blob_id is not None  # Hands stored it by reference


async def test_a_large_argument_reaches_the_tool_whole(deployment: BrainHarness) -> None:
    start(deployment)
    await deployment.submit("send_large", {"size": SIZE})

    record = await deployment.answer(within=60)

    text = text_of(SIZE)
    assert record.answer == {
        "outcome": "succeeded",
        "result": {"status": "succeeded", "result": {"sha256": digest(text), "length": SIZE}},
        "error": None,
    }
    # Stored once, by the Brain: the task, the job and the operation refer to the same blob.
    tasks, [op] = await deployment.store.queries.history("s1")
    [call] = [t for t in tasks if t.kind == TOOL_KIND]
    [(size, job)] = await tool_jobs(deployment.store)
    blob_id = call.input["arguments_blob_id"]
    assert call.input["arguments"] == {} and job.arguments == {} and op.arguments == {}
    assert job.arguments_blob_id == op.arguments_blob_id == blob_id
    assert job.schema_version == 2 and size < MAX_INLINE_JSON
    async with deployment.store.backend.engine.connect() as conn:
        stored = await conn.execute(select(schema.blob.c.data).where(schema.blob.c.id == blob_id))
        assert json.loads(stored.scalar_one()) == {"text": text}


async def test_the_model_reads_a_large_result_whole(
    deployment: BrainHarness, tmp_path: Path
) -> None:
    log = tmp_path / "model.jsonl"
    start(deployment, TEST_MODEL_LOG=str(log))
    await submit_input(
        deployment.store,
        deployment.env.topology,
        session_id="s1",
        request_id="r1",
        input={"agent": "bulky", "text": "fetch the text"},
        compat="v1",
    )

    record = await deployment.answer(within=60)

    assert record.status == "answered" and record.answer == {"text": "Fetched.", "turns": 2}
    second = json.loads(log.read_text().splitlines()[1])["messages"]
    [told] = [json.loads(m["content"]) for m in second if m["role"] == "tool"]
    assert told["status"] == "succeeded"
    assert digest(told["result"]) == digest({"text": text_of(SIZE)})
