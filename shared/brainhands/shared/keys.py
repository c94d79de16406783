"""Every Redis key brainhands uses, in one place.

All keys of a deployment share its namespace, so several deployments (or test runs) can use
one Redis without seeing each other's state.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Keys:
    """Builds the Redis key names of one namespace.

    A resource is what a lease guards, named ``kind:id``: ``session:<id>``,
    ``operation:<id>``, ``sweeper``.
    """

    namespace: str

    def lease(self, resource: str) -> str:
        """The lease on ``resource``: holds its current holder, expires with its TTL."""
        return f"{self.namespace}:lease:{resource}"

    def fence(self, resource: str) -> str:
        """The fencing token counter of ``resource``; it never expires."""
        return f"{self.namespace}:fence:{resource}"

    def queue_progress(self) -> str:
        """How far each work queue was delivered: a sorted set, the queue's name scored by
        the publish time of the newest message a consumer received from it."""
        return f"{self.namespace}:progress"
