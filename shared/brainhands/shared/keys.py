"""Every Redis key brainhands uses, in one place.

All keys of a deployment share its namespace, so several deployments (or test runs) can use
one Redis without seeing each other's state.
"""

from __future__ import annotations

from dataclasses import dataclass

SWEEPER_RESOURCE = "sweeper"
"""The resource of the one sweeper lease of a deployment."""


def session_resource(session_id: str) -> str:
    """The resource a Brain leases to run session ``session_id``."""
    return f"session:{session_id}"


def operation_resource(operation_id: str) -> str:
    """The resource a Hands worker leases to run operation ``operation_id``."""
    return f"operation:{operation_id}"


@dataclass(frozen=True, slots=True)
class Keys:
    """Builds the Redis key names of one namespace.

    A resource is what a lease guards, named by ``session_resource``,
    ``operation_resource`` or ``SWEEPER_RESOURCE``.
    """

    namespace: str

    def lease(self, resource: str) -> str:
        """The lease on ``resource``: holds its current holder, expires with its TTL."""
        return f"{self.namespace}:lease:{resource}"

    def fence(self, resource: str) -> str:
        """The fencing token counter of ``resource``; it expires once the resource is idle
        (``LeaseManager.counter_ttl_ms``)."""
        return f"{self.namespace}:fence:{resource}"

    def witness(self, resource: str) -> str:
        """What Redis saw the store commit for ``resource`` (``shared.witness``): expires with
        its fence key."""
        return f"{self.namespace}:witness:{resource}"

    def handed(self, resource: str) -> str:
        """The token of the last holder of ``resource`` that handed its lease over (nothing
        of its own in flight); expires after ``lease.HANDED_TTL_MS``."""
        return f"{self.namespace}:handed:{resource}"

    def witnesses(self) -> str:
        """A ``SCAN`` pattern matching every witness key of the namespace."""
        return f"{_glob_escaped(self.namespace)}:witness:*"

    def store_went_back(self) -> str:
        """Set when a worker found the store behind a witness: the evidence, as JSON. While
        it is there every acquisition is refused."""
        return f"{self.namespace}:store:went-back"

    def limit_rate(self, scope: str) -> str:
        """The theoretical arrival time of the next call under the limit ``scope``
        (``shared.limits.Scope``): its rate's state."""
        return f"{self.namespace}:limit:rate:{scope}"

    def limit_slots(self, scope: str) -> str:
        """The calls holding a slot of the limit ``scope``, scored by their deadlines."""
        return f"{self.namespace}:limit:slots:{scope}"

    def queue_progress(self) -> str:
        """How far each work queue was delivered: a sorted set, the queue's name scored by
        the publish time of the newest message a consumer received from it."""
        return f"{self.namespace}:progress"


def _glob_escaped(text: str) -> str:
    """``text`` matched literally in a Redis glob pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)
