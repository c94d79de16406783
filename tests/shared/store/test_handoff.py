"""The hand-off of a process's outbox rows to its own relay (``shared.store.handoff``)."""

from __future__ import annotations

import pytest

from brainhands.shared.store import Store
from brainhands.shared.store.handoff import Handoff


def test_rows_are_left_to_the_relay_only_while_it_runs() -> None:
    handoff = Handoff()
    assert handoff.seconds is None
    assert handoff.publish_after(100.0) is None  # no relay here: any relay may publish

    handoff.begin(5.0)
    assert handoff.seconds == 5.0
    assert handoff.publish_after(100.0) == 105.0

    handoff.end()
    assert handoff.publish_after(100.0) is None


async def test_the_store_keeps_the_handoff_it_was_built_with_and_none_replaces_it(
    store: Store,
) -> None:
    given = Handoff()
    built = Store(store.backend, handoff=given)
    assert built.handoff is given
    assert Store(store.backend).handoff is not given  # each store its own by default
    with pytest.raises(AttributeError):
        built.handoff = Handoff()  # type: ignore[misc]  # set only at construction
