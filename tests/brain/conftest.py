"""Fixtures of the model adapter tests: a loopback model server, and adapters made against it
that are closed after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import pytest

from brainhands.brain.models._http import HttpModel
from tests.helpers.chat_server import ChatServer

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
