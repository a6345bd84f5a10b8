"""Summaries of measured times."""

from __future__ import annotations

import statistics

PERCENTILES = (10, 25, 50, 75, 90, 99)


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile of `values` (p in [0, 100])."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(values: list[float]) -> dict[str, float]:
    """mean, median and the standard percentiles, keyed like "p99"."""
    if not values:
        return {}
    out = {"mean": statistics.fmean(values), "median": statistics.median(values)}
    out.update({f"p{p}": percentile(values, p) for p in PERCENTILES})
    return out
