"""Fixtures of the model adapter tests: a loopback model server, and adapters made against it
that are closed after the test; and of the hosted agents' tests, a deployment."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from brainhands.brain.models._http import HttpModel
from tests.helpers import ledgers
from tests.helpers.brains import BrainHarness, brain_deployment
from tests.helpers.chat_server import ChatServer
from tests.helpers.stores import StoreTarget

M = TypeVar("M", bound=HttpModel)


@pytest.fixture
def server() -> Iterator[ChatServer]:
    chat = ChatServer()
    yield chat
    chat.close()


@pytest.fixture
async def new_model() -> AsyncIterator[Callable[..., Any]]:
    """``new_model(Adapter, base_url=..., **options)``: an adapter closed after the test."""
    made: list[HttpModel] = []

    def new(adapter: type[M], **kwargs: Any) -> M:
        kwargs.setdefault("model", "test-model")
        made.append(model := adapter(**kwargs))
        return model

    yield new
    for model in made:
        await model.aclose()


@pytest.fixture
async def hosted_deployment(
    store_target: StoreTarget,
    postgres_url: str,
    rabbitmq_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[BrainHarness]:
    """A deployment on each backend for a hosted agent (``tests.helpers.hosted_runs``); its
    tools' ledgers in ``tmp_path`` (read by the test too)."""
    monkeypatch.setattr(ledgers, "LEDGERS", tmp_path)
    async with brain_deployment(
        postgres_url, rabbitmq_url, redis_url, namespace, tmp_path, target=store_target
    ) as harness:
        yield harness
