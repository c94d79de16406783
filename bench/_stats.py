"""Small helpers the benchmarks share: percentiles, a plain-text table, the machine's load."""

from __future__ import annotations

import os
from collections.abc import Sequence


def percentile(samples: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``samples``, linearly interpolated."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0..100, got {p}")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None
) -> None:
    """Print ``rows`` under ``headers``.

    ``align`` has one ``<`` (left) or ``>`` (right) per column; by default numbers are
    right-aligned and everything else left-aligned.
    """
    texts = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in texts) for i in range(len(headers))]
    if align is None:
        align = "".join(
            ">" if rows and all(isinstance(row[i], int | float) for row in rows) else "<"
            for i in range(len(headers))
        )
    if len(align) != len(headers) or set(align) - {"<", ">"}:
        raise ValueError(f"align needs one '<' or '>' per column, got {align!r}")

    def line(cells: Sequence[str]) -> str:
        return " | ".join(
            c.rjust(w) if a == ">" else c.ljust(w)
            for c, w, a in zip(cells, widths, align, strict=True)
        ).rstrip()

    print(line(texts[0]))
    print("-+-".join("-" * w for w in widths))
    for cells in texts[1:]:
        print(line(cells))


def machine() -> str:
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} CPU core(s), load average {one:.1f} (1 min), {five:.1f} (5 min)"
