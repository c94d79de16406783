"""Fixtures of the hosted agents' integration tests (``test_hosted*``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from brainhands.shared.tools import registry


@pytest.fixture
def own_registry() -> Iterator[None]:
    """The tools ``host`` registers leave the process's registry with the test."""
    before = dict(registry.tools)
    yield
    registry.tools = before
