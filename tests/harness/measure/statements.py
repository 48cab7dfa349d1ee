"""Every statement one tool call sends, and EXPLAIN (ANALYZE, BUFFERS) of each.

The call goes through the dialect's MCP server in this process (the tool layer
included: caller resolution, policy, audit, idempotency); every statement any
thread sends is recorded with its parameters and the time the client waited
for it. Each recorded statement is then explained, in a transaction that is
rolled back (EXPLAIN ANALYZE runs a write), after replaying the SET statements
that preceded it in the call."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_recording: list[list[tuple[str, Any, float]]] = []
_lock = threading.Lock()


@contextmanager
def recorded_statements() -> Iterator[list[tuple[str, Any, float]]]:
    """Every statement sent through Django's cursors in any thread while open:
    (sql, params, milliseconds the client waited)."""
    from django.db.backends import utils

    captured: list[tuple[str, Any, float]] = []
    # A private method of Django's cursor wrapper, which no stub declares.
    wrapper: Any = utils.CursorWrapper
    original = wrapper._execute

    from memory.retrieval import split_settings

    def execute(self, sql, params, *ignored_wrapper_args):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            return original(self, sql, params, *ignored_wrapper_args)
        finally:
            # A retrieval channel sends its settings and its statement as one
            # query: recorded apart, so that the statement is explained with them.
            settings, statement = split_settings(sql)
            with _lock:
                if settings:
                    captured.append((settings, None, 0.0))
                captured.append((statement, params, (time.perf_counter() - t0) * 1000.0))

    wrapper._execute = execute
    try:
        yield captured
    finally:
        wrapper._execute = original


def _verb(sql: str) -> str:
    head = " ".join(sql.split())[:400].upper()
    if head.startswith("WITH"):
        for word in ("INSERT", "UPDATE", "DELETE"):
            if f") {word}" in head:
                return f"WITH..{word}"
        return "WITH..SELECT"
    return head.split(" ", 1)[0]


def _label(sql: str) -> str:
    """A short name for a statement: its verb and the tables or function it names."""
    import re

    flat = " ".join(sql.split())
    tables = list(dict.fromkeys(re.findall(r'(?:FROM|INTO|UPDATE|JOIN)\s+"?([a-z_][a-z0-9_]*)"?', flat, re.I)))
    calls = re.findall(r"SELECT\s+(?:\*\s+FROM\s+)?([a-z_]+)\(", flat, re.I)
    parts = [_verb(sql)]
    if calls and not tables:
        parts.append(calls[0] + "()")
    parts += [t for t in tables if t.lower() not in {"unnest", "lateral"}][:3]
    if "<=>" in flat:
        parts.append("[vector]")
    if "memory_termstat" in flat:
        parts.append("[bm25]")
    return " ".join(parts)[:70]


def explain_all(captured: list[tuple[str, Any, float]]) -> list[dict[str, Any]]:
    """EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) of each captured statement."""
    from django.db import connection, transaction

    out = []
    for i, (sql, params, ms) in enumerate(captured):
        verb = _verb(sql)
        row: dict[str, Any] = {
            "label": _label(sql),
            "ms": ms,
            "exec_ms": None,
            "plan_ms": None,
            "hit": 0,
            "read": 0,
            "plan": None,
        }
        if verb in {"SET", "SAVEPOINT", "RELEASE", "ROLLBACK", "BEGIN", "COMMIT"} or sql.strip() == "SELECT 1":
            out.append(row)
            continue
        sets = [c[0] for c in captured[:i] if _verb(c[0]) == "SET"]
        try:
            with transaction.atomic(), connection.cursor() as cur:
                for statement in sets:
                    cur.execute(statement)
                # Twice, keeping the second: the service plans on connections it
                # keeps (CONN_MAX_AGE), whose catalog caches are warm; this one's
                # first planning of a statement would count loading them.
                for _ in range(2):
                    cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
                    plan = cur.fetchone()[0]
                plan = plan[0] if isinstance(plan, list) else json.loads(plan)[0]
                transaction.set_rollback(True)
            top = plan["Plan"]
            row.update(
                plan=top,
                exec_ms=plan.get("Execution Time"),
                plan_ms=plan.get("Planning Time"),
                hit=top.get("Shared Hit Blocks", 0),
                read=top.get("Shared Read Blocks", 0),
            )
        except Exception as exc:  # noqa: BLE001 - a statement that cannot be replayed alone is reported so
            row["label"] += f" (not explained: {type(exc).__name__})"
        out.append(row)
    return out


def plan_lines(node: dict[str, Any], depth: int = 0) -> list[str]:
    """An explained plan as indented lines: each node's type, relation or index,
    actual rows and loops, time, buffers, and the rows its filter removed."""
    what = " ".join(str(node[key]) for key in ("Node Type", "Relation Name", "Index Name", "CTE Name") if node.get(key))
    removed = node.get("Rows Removed by Filter") or node.get("Rows Removed by Index Recheck")
    line = (
        f"{'  ' * depth}{what}: rows {node.get('Actual Rows')} x{node.get('Actual Loops')}, "
        f"{node.get('Actual Total Time')} ms, buffers {node.get('Shared Hit Blocks', 0)}"
        + (f", removed {removed}" if removed else "")
    )
    out = [line]
    for child in node.get("Plans", []):
        out += plan_lines(child, depth + 1)
    return out


def profile_call(call: Callable[[], Any], repeat: int = 3) -> dict[str, Any]:
    """Record the statements of ``call`` (warmed up once, then the median of
    ``repeat`` calls by wait) and explain those of the last call."""
    call()
    totals = []
    last: list[tuple[str, Any, float]] = []
    for _ in range(repeat):
        with recorded_statements() as captured:
            call()
        totals.append(sum(c[2] for c in captured))
        last = captured
    rows = explain_all(last)
    import statistics

    return {
        "statements": len(last),
        "wait_ms": statistics.median(totals),
        "exec_ms": sum(r["exec_ms"] or 0.0 for r in rows),
        "plan_ms": sum(r["plan_ms"] or 0.0 for r in rows),
        "rows": rows,
    }
