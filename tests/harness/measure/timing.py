"""Timing calls and summarising the samples."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(round(q / 100.0 * len(ordered) + 0.5))))
    return ordered[rank - 1]


def timed(fn: Callable[[], object], repeat: int, warmup: int = 2) -> list[float]:
    """Milliseconds per call."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def summary(samples_ms: Sequence[float]) -> tuple[float, float, float]:
    return statistics.median(samples_ms), percentile(samples_ms, 95), max(samples_ms)
