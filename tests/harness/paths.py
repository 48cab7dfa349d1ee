"""Where the suites keep their files: the repository and its var/ directories."""

from __future__ import annotations

from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
# Cached datasets, embeddings and query plans of the benchmarks.
VAR_BENCH = BASE_DIR / "var" / "bench"
# The reliability suite's private stack (`make reliability`).
VAR_RELIABILITY = BASE_DIR / "var" / "reliability"
