"""Live notes against a real RabbitMQ: they reach the listening API processes, and a
publisher that nobody listens to goes quiet for a while instead of publishing for nobody."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from brainhands.shared import live
from brainhands.shared.live import LivePublisher
from brainhands.shared.messages import LiveNote, Message
from tests.helpers.polling import eventually
from tests.helpers.rabbit import BrokerEnv, broker_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


@pytest.fixture
async def env(rabbitmq_url: str, namespace: str) -> AsyncIterator[BrokerEnv]:
    async with broker_env(rabbitmq_url, namespace) as environment:
        yield environment


def note(n: int) -> LiveNote:
    return LiveNote(session_id="s1", kind="progress", message=f"note {n}")


async def listen(env: BrokerEnv) -> list[str]:
    """Bind a listener's queue, as an API process does; the notes it receives."""
    heard: list[str] = []
    queue = await env.topology.declare_live_listener(env.broker.channel)

    async def record(message: Message, delivery: object) -> None:
        assert isinstance(message, LiveNote)
        heard.append(message.message)
        await delivery.ack()  # type: ignore[attr-defined]

    await env.broker.consume(queue, record)
    return heard


async def sent(publisher: LivePublisher) -> None:
    """Wait until the notes the publisher took are published (or dropped)."""
    await eventually(lambda: not publisher._sending, within=5, what="the notes to go out")


async def test_notes_reach_a_listener(env: BrokerEnv) -> None:
    heard = await listen(env)
    publisher = LivePublisher(env.broker)

    for n in range(3):
        publisher.publish(note(n))
    await sent(publisher)

    await eventually(lambda: len(heard) == 3, within=5, what="the notes")
    assert sorted(heard) == ["note 0", "note 1", "note 2"]


async def test_with_nobody_listening_notes_are_dropped_for_a_while_then_tried_again(
    env: BrokerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live, "QUIET_WHEN_UNHEARD", 0.5)
    publisher = LivePublisher(env.broker)
    publisher.publish(note(0))  # returned by the broker: nobody listens
    await sent(publisher)

    heard = await listen(env)
    publisher.publish(note(1))  # within the quiet time: dropped, though heard it would be
    await asyncio.sleep(0.6)
    publisher.publish(note(2))  # tried again: heard
    await sent(publisher)

    await eventually(lambda: heard == ["note 2"], within=5, what="the note after the quiet")
