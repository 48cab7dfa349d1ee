"""Smoke test of the benchmark scripts: each runs at a tiny size in a
subprocess, exits 0 and prints its table. No timing is asserted anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MADIAL = Path(os.environ.get("MEMPROJ_MADIAL_DIR", ROOT.parent / "shared" / "bench-data" / "madial"))
LME = Path(os.environ.get("MEMPROJ_LME_DIR", ROOT.parent / "shared" / "bench-data" / "longmemeval-s-dev"))

pytestmark = pytest.mark.slow


def run_script(name: str) -> str:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="memproj.settings.base")
    env.pop("DATABASE_URL", None)  # the scripts pick their own bench database
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / name), "--tiny"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"{name} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def header_cells(output: str, first: str) -> list[str]:
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells and cells[0] == first:
            return cells
    raise AssertionError(f"no table starting with column {first!r} in:\n{output}")


def test_perf_script_prints_its_tables() -> None:
    out = run_script("perf.py")
    assert header_cells(out, "size") == [
        "size",
        "path",
        "op",
        "n",
        "found",
        "p50_ms",
        "p95_ms",
        "max_ms",
        "goal_p95",
        "met",
        "e2e_minus_service_p95",
        "x_floor",
        "floor_p50_ms",
    ]
    for op in (
        "store_episode",
        "store_fact_supersede",
        "search_hybrid",
        "search_semantic",
        "search_keyword",
        "recall",
        "get",
        "context",
        "memento_search_memories",
        "langmem_search_memory",
        "roampal_get_context_insights",
        "roampal_hook_get_context",
        "pce_activate",
    ):
        assert f"| {op} " in out
    # Every dialect read runs against data it finds, at the service layer and end to end.
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 13 and cells[2] in (
            "memento_search_memories",
            "langmem_search_memory",
            "roampal_get_context_insights",
            "roampal_hook_get_context",
            "pce_activate",
        ):
            assert cells[4].isdigit() and int(cells[4]) > 0, line
    assert "http_hook" in out
    assert "command: " in out and "load average at start" in out
    assert "recall_at_20" in out and "exec_ms" in out  # the ANN sweep and the EXPLAIN summary
    assert "mcp_http" in out
    assert "embed_one" in out and "pgvector_topk" in out
    assert "raw_embedder_per_s" in out and "ingest_per_s" in out
    # Both store paths of the ingest: one call per memory and the bulk import.
    assert "episode_store per memory" in out and "episodes_store_bulk x64" in out
    assert header_cells(out, "clients")[:3] == ["clients", "calls", "calls_per_s"]


@pytest.mark.skipif(not (MADIAL / "data_en").is_dir(), reason="MADial-Bench data not present")
def test_quality_script_prints_its_tables() -> None:
    out = run_script("quality.py")
    assert header_cells(out, "system") == [
        "system",
        "R@1",
        "R@5",
        "R@10",
        "R@20",
        "nDCG@1",
        "nDCG@5",
        "nDCG@10",
        "nDCG@20",
    ]
    for row in ("keyword-only", "vector-only", "hybrid", "authors: bge-m3", "authors: openai"):
        assert row in out
    assert header_cells(out, "fusion")[0] == "fusion"
    assert "hybrid nDCG@10" in out and "better single channel" in out
    # Every dialect's own search, the current settings against those of when issue 14 began.
    assert header_cells(out, "dialect: tool")[-2:] == ["nDCG@10 now - start (95% CI)", "verdict"]
    for tool in (
        "memory: memory_search",
        "memory: memory_recall",
        "memento: search_memories",
        "langmem: search_memory",
        "roampal: search_memory",
        "pce: activate",
    ):
        assert f"| {tool}" in out
    if (LME / "s").is_dir():
        assert "LongMemEval-S dev" in out and "multi-session" in out and "S-R@10" in out
        if "LongMemEval-S dev (embedded haystacks)" in out:
            # The time boost is on by default: its with / without comparison is reported.
            assert "hybrid without the time boost" in out
