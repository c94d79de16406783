"""Tool declarations in the store, on every backend."""

from __future__ import annotations

import asyncio

from brainhands.shared.store import Store
from brainhands.shared.store.catalog import ToolCatalog
from brainhands.shared.tools import ToolDeclaration

SEND = ToolDeclaration("send", "email", "query", "Send one email.", {"type": "object"})
OVER_100 = {"arg": ["amount"], "op": ">", "value": 100}
FETCH = ToolDeclaration("fetch", "default", "safe", "Fetch a page.", {"type": "object"})


async def test_declarations_are_kept_by_name_and_rewritten_only_when_they_change(
    store: Store,
) -> None:
    assert await store.declarations.declare_tools([SEND, FETCH]) == []
    assert await store.declarations.tools() == [FETCH, SEND]  # by pool, then name
    assert (
        await store.declarations.declare_tools([SEND]) == []
    )  # the same build again: nothing changes

    renamed = ToolDeclaration("send", "email", "unsafe", "Send one email.", {"type": "object"})
    assert await store.declarations.declare_tools([renamed]) == ["send"]
    assert await store.declarations.tools() == [FETCH, renamed]
    assert renamed.digest != SEND.digest

    # A tool that names its compensation: a Brain learns it from the store alone.
    book = ToolDeclaration("book", "travel", "query", "Book.", {}, compensate="cancel_booking")
    assert await store.declarations.declare_tools([book]) == []
    assert book in await store.declarations.tools()
    assert book.digest != ToolDeclaration("book", "travel", "query", "Book.", {}).digest

    # An MCP tool says why it got its policy; a tool of ours keeps the digest it had.
    mcp = ToolDeclaration("bank.balance", "bank", "safe", "", {}, policy_reason="readOnlyHint")
    assert await store.declarations.declare_tools([mcp]) == []
    assert mcp in await store.declarations.tools()
    assert mcp.digest != ToolDeclaration("bank.balance", "bank", "safe", "", {}).digest
    # A condition for approval travels with the declaration, for a Brain to decide.
    pay = ToolDeclaration("pay", "bank", "unsafe", "", {}, approval_when=OVER_100)
    assert await store.declarations.declare_tools([pay]) == []
    assert pay in await store.declarations.tools()
    # (pinned: a build with the field re-declares none of the tools declared before it)
    assert SEND.digest == "3f8969ef800537e3dedf31aa6def1ee03eea0a3a81fa203fa995d8b874c986a4"


async def test_lookups_made_while_the_catalog_reads_share_that_read(store: Store) -> None:
    """Passes that look a tool up at once, on a fresh catalog or for a name it has not read
    yet, all find it: none takes the read still in flight for a read without the tool."""
    await store.declarations.declare_tools([SEND])
    catalog = ToolCatalog(store, refresh_interval=3600.0)

    found = await asyncio.gather(*(catalog.lookup(["send"]) for _ in range(8)))

    assert found == [{"send": SEND}] * 8
    await store.declarations.declare_tools([FETCH])
    catalog.refresh_interval = 0.05  # now due for a name it does not know
    await asyncio.sleep(0.1)
    found = await asyncio.gather(*(catalog.lookup(["fetch"]) for _ in range(8)))
    assert found == [{"fetch": FETCH}] * 8
