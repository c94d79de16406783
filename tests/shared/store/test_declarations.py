"""Tool declarations in the store, on every backend."""

from __future__ import annotations

from brainhands.shared.store import Store
from brainhands.shared.store.declarations import declare_tools, declared_tools
from brainhands.shared.tools import ToolDeclaration

SEND = ToolDeclaration("send", "email", "query", "Send one email.", {"type": "object"})
FETCH = ToolDeclaration("fetch", "default", "safe", "Fetch a page.", {"type": "object"})


async def test_declarations_are_kept_by_name_and_rewritten_only_when_they_change(
    store: Store,
) -> None:
    assert await declare_tools(store, [SEND, FETCH]) == []
    assert await declared_tools(store) == [FETCH, SEND]  # by pool, then name
    assert await declare_tools(store, [SEND]) == []  # the same build again: nothing changes

    renamed = ToolDeclaration("send", "email", "unsafe", "Send one email.", {"type": "object"})
    assert await declare_tools(store, [renamed]) == ["send"]
    assert await declared_tools(store) == [FETCH, renamed]
    assert renamed.digest != SEND.digest
