"""``brainhands.Client`` against real Brain processes: submit, wait, cancel, read."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from brainhands import AnswerTimeout, Client, InvalidRequest, NotFoundError, SubmissionFailed
from brainhands.shared.messages import SessionWake, encode
from brainhands.shared.store import OutboxMessage, schema
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually
from tests.helpers.processes import WORKDIR

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

APP = Path(__file__).resolve().parents[1] / "helpers" / "client_app.py"


def run_app(brains: BrainHarness, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(APP), *args],
        cwd=WORKDIR,
        # The root on the path for ``--old``, whose baseline is the tests' store-level submit.
        env={**__import__("os").environ, **brains.settings(), "PYTHONPATH": str(WORKDIR)},
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def test_an_application_submits_awaits_cancels_and_reads_through_the_client(
    brains: BrainHarness,
) -> None:
    brains.start_brain()
    brains.start_brain()
    n = 50

    seen = await asyncio.to_thread(run_app, brains, str(n))
    old = await asyncio.to_thread(run_app, brains, str(n), "--old")

    assert seen["answers"] == list(range(n))
    assert seen["cancel_said"] == ["requested", "requested"]
    assert seen["cancel_ended"] == "cancelled"
    view = seen["view"]
    assert isinstance(view, dict)
    assert view["submissions"] == ["cancelled"]
    assert view["tasks"] == [{"kind": "napper", "status": "terminal", "outcome": "cancelled"}]
    assert view["inbox"] == [{"kind": "cancel", "key": seen["nap_request_id"], "applied": True}]
    async with brains.store.backend.engine.connect() as conn:
        sub = schema.submission
        answered = await conn.execute(
            select(func.count()).where(sub.c.session_id.like("app-%"), sub.c.status == "answered")
        )
        assert answered.scalar_one() == n
        o = schema.outbox
        # The client's wake-ups: left to it alone for the hand-off (5 s), and each was sent
        # well inside it, so the client published them itself right after its commit.
        lags = await conn.execute(
            select(o.c.sent_at - o.c.created_at).where(
                o.c.session_id.like("app-%"), o.c.publish_after.is_not(None)
            )
        )
        sent = [lag for (lag,) in lags if lag is not None]
        assert len(sent) >= n + 2 and max(sent) < 1.0  # 50 submissions, the nap and its cancel
    assert old["answers"] == list(range(n))
    for name, run in (("client", seen), ("old submit+poll", old)):
        total, submitting = float(run["cpu_seconds"]), float(run["submit_cpu_seconds"])  # type: ignore[arg-type]
        waiting = total - submitting
        print(
            f"\n{name}: CPU per submission+answer {1000 * total / n:.2f} ms "
            f"(submit {1000 * submitting / n:.2f} ms, wait {1000 * waiting / n:.2f} ms), "
            f"wall {run['wall_seconds']:.2f} s for {n}"
        )


async def test_a_cancel_waits_in_the_inbox_for_a_brain_and_is_applied_once(
    brains: BrainHarness,
) -> None:
    first = brains.start_brain()
    async with brains.client() as client:
        nap = await client.submit("s1", {"kind": "napper", "input": {"seconds": 600}})

        async def sleeping() -> bool:
            return any(t.status == "sleeping" for t in (await client.session("s1")).tasks)

        await eventually(sleeping, within=30, what="the napper to sleep")
        first.kill()
        first.wait()
        queued = await client.submit("s2", {"kind": "steps", "input": {}})

        assert await nap.cancel() == "requested"
        assert await client.cancel("s1", nap.request_id) == "requested"  # the same request
        assert await queued.cancel() == "requested"
        [request] = await client.store.inbox.of_session("s1")
        assert request.applied_at is None  # no Brain runs: it waits

        brains.start_brain()
        with pytest.raises(SubmissionFailed) as failed:
            await nap.result(timeout=30)
        assert failed.value.record.status == "cancelled"
        with pytest.raises(SubmissionFailed):
            await queued.result(timeout=30)

        view = await client.session("s1")
        assert [(t.kind, t.outcome) for t in view.tasks] == [("napper", "cancelled")]
        [request] = view.inbox
        assert request.applied_at is not None
        assert (await client.session("s2")).tasks == []  # ended before it started
        assert await nap.cancel() == "cancelled"  # once ended, nothing more is requested
        assert len(await client.store.inbox.of_session("s1")) == 1


async def test_a_cancel_whose_wake_up_was_lost_is_found_by_the_sweeper(
    brains: BrainHarness,
) -> None:
    brains.start_brain()
    async with brains.client() as client:
        nap = await client.submit("s1", {"kind": "napper", "input": {"seconds": 600}})

        async def sleeping() -> bool:
            return any(t.status == "sleeping" for t in (await client.session("s1")).tasks)

        await eventually(sleeping, within=30, what="the napper to sleep")

        def lost(compat: str) -> OutboxMessage:
            # Routed to a Brain build nobody runs: published, never consumed.
            wake = SessionWake(session_id="s1", compat=compat, reason="cancel")
            return OutboxMessage(brains.env.topology.brain_queue("nobody"), encode(wake))

        await brains.store.inbox.send_request(
            session_id="s1", kind="cancel", key=nap.request_id, wake=lost
        )
        with pytest.raises(SubmissionFailed):
            await nap.result(timeout=30)
        assert '"session_woken": 1' in brains.log(0)  # the sweeper's wake-up did it
        [request] = await client.store.inbox.of_session("s1")
        assert request.applied_at is not None


async def test_a_waiting_client_is_woken_by_the_answers_commit(brains: BrainHarness) -> None:
    brains.start_brain()
    async with brains.client(poll=60.0) as client:  # the fallback poll would take a minute
        warm = await client.submit("warm", {"kind": "steps", "input": {}})
        await warm.result(timeout=30)

        handle = await client.submit("s1", {"kind": "steps", "input": {"x": 1}})
        started = time.monotonic()
        answer = await handle.result(timeout=30)
        took = time.monotonic() - started

        assert answer["input"] == {"x": 1}
        assert took < 5.0
        slow = await client.submit("s2", {"kind": "napper", "input": {"seconds": 600}})
        with pytest.raises(AnswerTimeout) as timed_out:
            await slow.result(timeout=0.5)
        assert isinstance(timed_out.value, TimeoutError)
        assert (await slow.status()).status == "running"


async def test_submitting_the_same_request_twice_starts_one_run(brains: BrainHarness) -> None:
    brains.start_brain()
    async with brains.client() as client:
        first = await client.submit("s1", "hello", request_id="r1", agent="echo")
        again = await client.submit("s1", "hello", request_id="r1", agent="echo")
        assert (first.created, again.created) == (True, False)
        record = await first.status()
        assert record.input == {"text": "hello", "agent": "echo"}
        assert isinstance(client, Client)


async def test_a_tenants_client_reaches_its_own_sessions_only(brains: BrainHarness) -> None:
    brains.start_brain()
    steps = {"kind": "steps", "input": {"x": 1}}
    async with brains.client(tenant="acme") as acme, brains.client() as default:
        mine = await acme.submit("s1", steps, request_id="r1")
        assert (await mine.result(timeout=30))["input"] == {"x": 1}
        # The default tenant's s1 is another session: nothing of acme's is there.
        with pytest.raises(NotFoundError):
            await default.session("s1")
        assert (await acme.session("s1")).session.tenant == "acme"
        # An operator's client (tenant None) names every tenant's sessions by store key.
    async with brains.client(tenant=None) as operator:
        assert [s.request_id for s in (await operator.session("acme/s1")).submissions] == ["r1"]
    with pytest.raises(InvalidRequest, match="has no '/'"):
        async with brains.client(tenant="acme") as acme:
            await acme.session("globex/s1")


async def test_connect_takes_every_database_url_form_and_names_them_otherwise(
    brains: BrainHarness, tmp_path: Path
) -> None:
    file = tmp_path / "client.db"
    async with brains.client() as template:
        rabbitmq_url = brains.env.url
        namespace = template.broker.topology.namespace
    for url in (f"sqlite:///{file}", f"sqlite+aiosqlite:///{file}"):
        client = await Client.connect(
            database_url=url, rabbitmq_url=rabbitmq_url, namespace=namespace
        )
        try:
            assert (await client.submit("s1", "hi", request_id="r1")).request_id == "r1"
        finally:
            await client.close()
    with pytest.raises(ValueError, match=r"database URL: .*sqlite:///path/to/file.db"):
        await Client.connect(database_url="mysql://db/x", rabbitmq_url=rabbitmq_url)
