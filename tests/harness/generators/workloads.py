"""The calls a load sends: the writes of the fault and load runs, the write mix
of a contention run, and the speed benchmark's mixed store/search workload."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.harness.generators import synthetic

WRITE_KINDS = ("fact", "rule", "episode")


def write_arguments(kind: str, marker: str) -> tuple[str, dict[str, Any]]:
    if kind == "fact":
        return "memory_store_fact", {"subject": marker, "predicate": "status", "content": f"{marker} is tracked"}
    if kind == "rule":
        return "memory_store_rule", {"content": f"Always mention {marker} before sending"}
    return "memory_store_episode", {"content": f"Worked on {marker} today", "butler": "ops"}


def contention_write(run_id: str, n: int, accepted_memento: Sequence[str]) -> tuple[str, str, dict[str, Any]]:
    """The n-th write of a contention run: (toolset, tool, arguments). A mix
    that makes every write path meet the others in one tenant: restatements
    (the worker merges them), near-identical facts differing in a date (left
    for review), keyed facts sharing a subject+predicate (fact-key lock and
    supersession), rules and episodes (the sweeps and consolidation)."""
    marker = f"{run_id}x{n}"
    slot = n % 8
    if slot == 0 and accepted_memento:
        return "memento", "store_memory", {"content": accepted_memento[-1 - (n // 8) % len(accepted_memento)]}
    if slot == 1:
        day = 2 + 7 * ((n // 8) % 4)
        return "memento", "store_memory", {"content": f"Deploy key {run_id}k{n // 32} was rotated on 2026-11-{day:02d}"}
    if slot in (0, 2, 3):
        return "memento", "store_memory", {"content": f"Service {marker} is owned by team {n % 13}"}
    if slot == 4:
        return "memory", "memory_store_fact", {"subject": marker, "predicate": "status", "content": f"{marker} is live"}
    if slot == 5:
        return "memory", "memory_store_rule", {"content": f"Always page {marker} before a release"}
    if slot == 6:
        return "memory", "memory_store_episode", {"content": f"Deployed {marker} to staging", "butler": "ops"}
    group = f"{run_id}g{n % 5}"
    return "memory", "memory_store_fact", {"subject": group, "predicate": "owner", "content": f"{group} is {marker}"}


def mixed_call(rng, queries: list[str], store_share: float, text_seed: int, k: int) -> tuple[str, dict]:  # type: ignore[no-untyped-def]
    """One call of the mixed workload: (kind, JSON-RPC body), memory_store_episode
    with ``store_share`` probability, else a hybrid memory_search."""
    if rng.random() < store_share:
        kind, name = "store", "memory_store_episode"
        arguments = {"content": synthetic.fresh_episode(text_seed), "butler": "general"}
    else:
        kind, name = "search", "memory_search"
        arguments = {"query": queries[rng.randrange(len(queries))], "mode": "hybrid"}
    return kind, {"jsonrpc": "2.0", "id": k, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
