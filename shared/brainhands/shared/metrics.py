"""Prometheus metrics of every worker process, in one place so names stay consistent.

Names follow Prometheus conventions (``brainhands_*_total`` counters, ``*_seconds``
histograms); labels are low-cardinality (pool, tool, status, kind), never ids.
"""

from __future__ import annotations

from typing import TypeVar, cast

from prometheus_client import Counter, Gauge, Histogram

_Metric = TypeVar("_Metric", Counter, Histogram)

JOBS_RECEIVED = Counter("brainhands_jobs_received_total", "Tool jobs delivered", ["pool"])
JOBS_ACKED = Counter("brainhands_jobs_acked_total", "Tool jobs acked after their commit", ["pool"])
REDELIVERIES = Counter(
    "brainhands_redeliveries_total", "Messages delivered again by the broker", ["queue_kind"]
)
TOOL_OUTCOMES = Counter(
    "brainhands_tool_outcomes_total", "Recorded tool outcomes", ["tool", "status"]
)
TOOL_SECONDS = Histogram("brainhands_tool_seconds", "Duration of one tool call", ["tool"])
MODEL_SECONDS = Histogram("brainhands_model_seconds", "Duration of one model request", ["model"])
LEASE_ACQUIRED = Counter("brainhands_lease_acquisitions_total", "Leases acquired", ["resource"])
LEASE_RENEWED = Counter("brainhands_lease_renewals_total", "Lease renewals that succeeded")
INTERRUPTIONS = Counter(
    "brainhands_tool_interruptions_total",
    "Tool calls found cut short by their worker's death or a lost lease",
    ["tool"],
)
LEASE_LOST = Counter("brainhands_lease_losses_total", "Holders that lost their lease mid-work")
_LEASE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0)


def _per_round_trip(name: str, documentation: str) -> Histogram:
    """How many writes or calls one round trip carried, by ``what`` carried them."""
    return Histogram(name, documentation, ["what"], buckets=(1, 2, 4, 8, 16, 32, 64))


GROUP_COMMIT = _per_round_trip(
    "brainhands_group_commit_writes",
    "Writes per store transaction of a group commit: a Brain's session drafts, a Hands "
    "worker's outcomes (a batch that failed and was committed again one write at a time "
    "counts as its attempts did)",
)
BATCH_CALLS = _per_round_trip(
    "brainhands_batch_calls",
    "Calls carried by one round trip of a batcher (shared.batch): lease acquisitions and "
    "releases, fence claims, starts, mid-pass reads",
)
LEASE_RENEWAL_LAG = Histogram(
    "brainhands_lease_renewal_lag_seconds",
    "How late a lease renewal was sent against its schedule",
    buckets=_LEASE_BUCKETS,
)
LEASE_RENEWAL_SECONDS = Histogram(
    "brainhands_lease_renewal_seconds",
    "Round trip of one lease renewal request to Redis",
    buckets=_LEASE_BUCKETS,
)
STALE_REJECTED = Counter(
    "brainhands_stale_token_rejections_total", "Writes refused for a superseded fencing token"
)
PARKED = Counter("brainhands_parked_total", "Messages parked by this process", ["reason"])
OUTBOX_PUBLISHED = Counter("brainhands_outbox_published_total", "Outbox rows confirmed")
OUTBOX_BACKLOG = Gauge("brainhands_outbox_backlog", "Unsent outbox rows at the last relay pass")
RELAY_LAG = Gauge("brainhands_relay_lag_seconds", "Age of the oldest unsent outbox row")
SWEEPER_RECOVERIES = Counter(
    "brainhands_sweeper_recoveries_total", "Triggers the sweeper sent again", ["kind"]
)
SWEEPER_HELD_BACK = Counter(
    "brainhands_sweeper_held_back_total",
    "Wake-ups the sweeper held back because the session's Brain queue had a backlog",
)
SESSIONS_ADVANCED = Counter("brainhands_sessions_advanced_total", "Session passes by Brains")
PHASES_RUN = Counter("brainhands_phases_total", "Task phases run", ["kind"])


_CHILDREN: dict[tuple[object, tuple[str, ...]], object] = {}


def labelled(metric: _Metric, *values: str) -> _Metric:
    """``metric.labels(*values)``, looked up once per process: counted per call or phase,
    where ``labels`` (its checks, its lock) costs more than the count. The labels are
    low-cardinality and the metric keeps every child it made anyway: keeping them here too
    holds nothing more."""
    key = (metric, values)
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN[key] = metric.labels(*values)
    return cast(_Metric, child)
