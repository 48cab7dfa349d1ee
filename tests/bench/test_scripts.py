"""The benchmark scripts run as ``python bench/<name>.py``, which puts bench/
first on the module path: a script named like a standard-library module would
be imported in its place by any library that needs that module (a
bench/profile.py broke cProfile, and with it transformers' model classes)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_no_bench_script_shadows_a_standard_library_module() -> None:
    names = {path.stem for path in BENCH.glob("*.py")}
    assert names, BENCH
    assert sorted(names & sys.stdlib_module_names) == []
