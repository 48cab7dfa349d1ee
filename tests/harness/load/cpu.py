"""CPU time of process trees from /proc (Linux): the web process(es), their event
loops, the PostgreSQL server."""

from __future__ import annotations

import os
from pathlib import Path

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat(pid: int) -> tuple[int, list[str]] | None:
    """(parent pid, fields after the command name) of /proc/<pid>/stat, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), fields


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat is not None:
                tree.setdefault(stat[0], []).append(int(entry.name))
    return tree


def cpu_seconds(root: int, *, reaped: bool = False) -> float:
    """CPU time (user + system, every thread) of a process and its live descendants;
    with ``reaped``, also of its children that have exited and been waited for
    (PostgreSQL backends of closed connections count in the postmaster's cutime)."""
    tree = _children()
    total = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        stat = _proc_stat(pid)
        if stat is None:
            continue
        fields = stat[1]
        # fields[0] is the state; utime, stime, cutime, cstime are stat fields 14-17.
        total += int(fields[11]) + int(fields[12])
        if reaped and pid == root:
            total += int(fields[13]) + int(fields[14])
        stack.extend(tree.get(pid, []))
    return total / _CLK_TCK


def loop_cpu_seconds(root: int) -> float:
    """CPU time of the main thread of every process in the web tree: uvicorn's
    event loop (the supervisor of several workers adds next to nothing). Tool
    bodies, the embedder and its runtime run in other threads."""
    tree = _children()
    total = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            raw = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
        stack.extend(tree.get(pid, []))
    return total / _CLK_TCK


def postmaster_pid() -> int | None:
    """The PostgreSQL server the bench runs against, when it is the embedded one."""
    from django.db import connection

    if connection.settings_dict.get("HOST", "") and not str(connection.settings_dict["HOST"]).startswith("/"):
        return None
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend = int(cur.fetchone()[0])
    stat = _proc_stat(backend)
    return stat[0] if stat is not None else None
