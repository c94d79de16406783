"""The hand-off of a process's outbox rows to its own relay, given to the store when it is
built and set by the relay while it runs.

A relay running in the process that commits publishes the rows of each commit right after
it (``shared.relay``); the rows are written with ``publish_after`` one hand-off period ahead,
so that the other relays, which poll, leave them alone meanwhile. While no relay runs here,
rows are written for any relay to take at once.
"""

from __future__ import annotations


class Handoff:
    """How long this process's relay has its commits' outbox rows to itself, if one runs.

    One object, shared by the store's parts that write outbox rows and the relay that sets
    it: each write reads it as it happens, so a relay that starts or stops later is heeded
    without rebuilding the store.
    """

    def __init__(self) -> None:
        self._seconds: float | None = None

    @property
    def seconds(self) -> float | None:
        """Seconds a row is left to this process's relay (None: no relay runs here)."""
        return self._seconds

    def begin(self, seconds: float) -> None:
        """A relay runs here from now on and publishes each commit's rows itself."""
        self._seconds = seconds

    def end(self) -> None:
        """No relay runs here any more: rows are written for any relay."""
        self._seconds = None

    def publish_after(self, now: float) -> float | None:
        """When relays other than this process's may publish a row written at ``now``."""
        return None if self._seconds is None else now + self._seconds
