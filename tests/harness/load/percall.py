"""CPU per answered call, one kind of call at a time: a closed loop of HTTP
clients sending only that call (each dialect's main read, a store, or the mixed
workload) for a few seconds, with the CPU the web process(es) and the
database's backends spent per answered call.

The PostgreSQL figure counts only the backends connected to the measured
database (pg_stat_activity), so other databases on the same server (other
suites' test databases) do not inflate it; each backend is read as the step
goes (``BackendWatch``), so one whose connection the web tier closes mid-step
still counts.

Several servers may be measured in one run (``servers``: label -> web pid and
base URL), step by step in turn (A, B, A, B, ...): drift of the machine's load
then hits every server alike, which is what an A/B on a shared machine needs."""

from __future__ import annotations

import asyncio
import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness.generators import synthetic
from tests.harness.generators.dataset import LANGMEM_NAMESPACE
from tests.harness.load.cpu import _children, _proc_stat, cpu_seconds, loop_cpu_seconds
from tests.harness.measure.timing import percentile
from tests.harness.surfaces.mcp_http import MCP_HEADERS, post_api_call, post_tool_call

Arguments = Callable[[random.Random, list[str], int], dict[str, Any]]


@dataclass(frozen=True)
class CallKind:
    """One kind of call: the endpoint path under the server, the tool and its arguments."""

    path: str
    tool: str
    arguments: Arguments
    # Share of stores mixed in (the mixed workload only).
    store_share: float = 0.0
    # The plain HTTP API (/api/<toolset>/<tool>, the arguments as the body)
    # instead of a JSON-RPC tools/call: the same tool without the MCP transport.
    plain_http: bool = False

    @property
    def toolset(self) -> str:
        return self.path.split("?", 1)[0].removeprefix("/mcp/").removeprefix("/api/").split("/", 1)[0]

    @property
    def options(self) -> dict[str, str]:
        """The per-connection dialect options the endpoint's query carries."""
        query = self.path.partition("?")[2]
        return dict(part.split("=", 1) for part in query.split("&") if "=" in part)


def _query(key: str) -> Arguments:
    return lambda rng, qs, _k: {key: qs[rng.randrange(len(qs))]}


def _store(_rng: random.Random, _qs: list[str], k: int) -> dict[str, Any]:
    return {"content": synthetic.fresh_episode(k), "butler": "general"}


CALL_KINDS: dict[str, CallKind] = {
    "store_episode": CallKind("/mcp/memory", "memory_store_episode", _store),
    "memory_search": CallKind(
        "/mcp/memory", "memory_search", lambda rng, qs, _k: {"query": qs[rng.randrange(len(qs))], "mode": "hybrid"}
    ),
    "memory_recall": CallKind("/mcp/memory", "memory_recall", _query("topic")),
    "memento_search_memories": CallKind(
        "/mcp/memento", "search_memories", lambda rng, qs, _k: {"query": qs[rng.randrange(len(qs))], "limit": 5}
    ),
    "langmem_search_memory": CallKind(
        f"/mcp/langmem?configurable.user_id={LANGMEM_NAMESPACE[1]}",
        "search_memory",
        lambda rng, qs, _k: {"query": qs[rng.randrange(len(qs))], "limit": 10},
    ),
    "memory_search_api": CallKind(
        "/api/memory/memory_search",
        "memory_search",
        lambda rng, qs, _k: {"query": qs[rng.randrange(len(qs))], "mode": "hybrid"},
        plain_http=True,
    ),
    "roampal_get_context_insights": CallKind("/mcp/roampal", "get_context_insights", _query("query")),
    "pce_activate": CallKind("/mcp/pce", "pce_memory_activate", _query("q")),
    "mixed": CallKind(
        "/mcp/memory",
        "memory_search",
        lambda rng, qs, _k: {"query": qs[rng.randrange(len(qs))], "mode": "hybrid"},
        store_share=0.3,
    ),
}


def _backend_pids(database: str) -> dict[int, float]:
    """pid -> CPU seconds of each backend of ``database`` now."""
    from django.db import connection

    from tests.harness.load.cpu import _CLK_TCK

    with connection.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [database])
        pids = [int(row[0]) for row in cur.fetchall()]
    out = {}
    for pid in pids:
        stat = _proc_stat(pid)
        if stat is not None:
            out[pid] = (int(stat[1][11]) + int(stat[1][12])) / _CLK_TCK
    return out


class BackendWatch:
    """The CPU the backends of ``database`` spend while a step runs, each read
    every ``interval`` seconds and kept as last seen. The web tier closes a
    connection once it is DB_CONN_MAX_AGE old, mid-step as often as not; read
    only before and after, such a backend's whole step would be lost (a step's
    PostgreSQL CPU could read near zero); read as it goes, at most its last
    interval is."""

    def __init__(self, database: str, interval: float = 0.2) -> None:
        self.database = database
        self.interval = interval
        self._start: dict[int, float] = {}
        self._seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="backend-watch", daemon=True)

    def __enter__(self) -> BackendWatch:
        self._start = _backend_pids(self.database)
        self._seen = dict(self._start)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._seen.update(_backend_pids(self.database))

    def _watch(self) -> None:
        from django.db import connection

        try:
            while not self._stop.wait(self.interval):
                self._seen.update(_backend_pids(self.database))
        finally:
            connection.close()  # this thread's own

    def spent(self) -> float:
        """CPU seconds spent since entering (a backend new since then from zero)."""
        return sum(cpu - self._start.get(pid, 0.0) for pid, cpu in self._seen.items())


async def _closed_loop(
    base_url: str, token: str, kind: CallKind, clients: int, seconds: float, seed: int
) -> dict[str, Any]:
    import httpx

    qs = synthetic.queries(512, seed=seed)
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    store = CALL_KINDS["store_episode"]
    async with httpx.AsyncClient(
        headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}, timeout=60.0, limits=limits
    ) as http:

        async def client(c: int) -> None:
            rng = random.Random(seed * 1000 + c)
            k = 0
            while time.perf_counter() < deadline:
                k += 1
                text_seed = seed * 10**6 + c * 10**4 + k
                chosen = store if kind.store_share and rng.random() < kind.store_share else kind
                arguments = chosen.arguments(rng, qs, text_seed)
                body = {
                    "jsonrpc": "2.0",
                    "id": k,
                    "method": "tools/call",
                    "params": {"name": chosen.tool, "arguments": arguments},
                }
                t0 = time.perf_counter()
                if chosen.plain_http:
                    answered = await post_api_call(http, base_url + chosen.path, arguments, errors)
                else:
                    answered = await post_tool_call(http, base_url + chosen.path, body, errors)
                if answered:
                    latencies.append((time.perf_counter() - t0) * 1000.0)

        start = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(clients)))
        elapsed = time.perf_counter() - start
    return {
        "calls": len(latencies),
        "seconds": elapsed,
        "per_s": len(latencies) / elapsed,
        "p50": percentile(latencies, 50),
        "p95": percentile(latencies, 95),
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
    }


@dataclass(frozen=True)
class Server:
    """A served web tier to measure: its root process, its base URL (no path),
    and the database it serves when not the step's (an A/B of two layouts of
    the same data)."""

    label: str
    pid: int
    base_url: str
    database: str = ""


def percall_step(server: Server, token: str, kind_name: str, clients: int, seconds: float, database: str, seed: int):  # type: ignore[no-untyped-def]
    """One closed-loop step against one server: throughput, latency, and CPU per
    answered call of the web tree, its event loop, the database's backends."""
    kind = CALL_KINDS[kind_name]
    database = server.database or database
    web0, loop0 = cpu_seconds(server.pid), loop_cpu_seconds(server.pid)
    with BackendWatch(database) as backends:
        step = asyncio.run(_closed_loop(server.base_url, token, kind, clients, seconds, seed))
    calls = max(1, step["calls"])
    step["web_cpu_ms"] = (cpu_seconds(server.pid) - web0) * 1000.0 / calls
    step["loop_cpu_ms"] = (loop_cpu_seconds(server.pid) - loop0) * 1000.0 / calls
    step["pg_cpu_ms"] = backends.spent() * 1000.0 / calls
    step["cpu_ms"] = step["web_cpu_ms"] + step["pg_cpu_ms"]
    return {"server": server.label, "kind": kind_name, "clients": clients, **step}


def interleaved(
    servers: list[Server],
    token: str,
    kinds: list[str],
    *,
    clients: int,
    seconds: float,
    rounds: int,
    database: str,
    progress: Callable[[str], None] = lambda _m: None,
) -> list[dict[str, Any]]:
    """``rounds`` rounds; in each, every kind on every server in turn (the
    server order alternates between rounds). One warm-up call burst per server
    and kind first, not recorded."""
    for server in servers:
        for kind in kinds:
            percall_step(server, token, kind, 2, 1.0, database, seed=1)
    out = []
    for r in range(rounds):
        order = servers if r % 2 == 0 else list(reversed(servers))
        for kind in kinds:
            for server in order:
                progress(f"round {r + 1}/{rounds}: {kind} on {server.label}")
                out.append({"round": r, **percall_step(server, token, kind, clients, seconds, database, seed=10 + r)})
    return out


def summarise(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (kind, server): medians over rounds of each step's figures."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for step in steps:
        groups.setdefault((step["kind"], step["server"]), []).append(step)
    out = []
    for (kind, server), group in groups.items():
        row: dict[str, Any] = {"kind": kind, "server": server, "rounds": len(group)}
        for key in ("per_s", "p50", "p95", "web_cpu_ms", "loop_cpu_ms", "pg_cpu_ms", "cpu_ms"):
            row[key] = statistics.median(s[key] for s in group)
        row["errors"] = sum(s["errors"] for s in group)
        out.append(row)
    return out


def ab_table(summary: list[dict[str, Any]], labels: tuple[str, str]) -> list[list[Any]]:
    """Rows of kind, then A and B's medians of CPU per call (web, PostgreSQL,
    total), calls/s and p95, and B/A ratios of total CPU, calls/s and p95."""
    by = {(row["kind"], row["server"]): row for row in summary}
    kinds = list(dict.fromkeys(row["kind"] for row in summary))
    rows = []
    a, b = labels
    for kind in kinds:
        ra, rb = by.get((kind, a)), by.get((kind, b))
        if ra is None or rb is None:
            continue
        rows.append(
            [
                kind,
                f"{ra['web_cpu_ms']:.1f} / {ra['pg_cpu_ms']:.1f} / {ra['cpu_ms']:.1f}",
                f"{rb['web_cpu_ms']:.1f} / {rb['pg_cpu_ms']:.1f} / {rb['cpu_ms']:.1f}",
                f"{rb['cpu_ms'] / ra['cpu_ms']:.2f}",
                f"{ra['per_s']:.1f} / {rb['per_s']:.1f}",
                f"{rb['per_s'] / ra['per_s']:.2f}",
                f"{ra['p95']:.0f} / {rb['p95']:.0f}",
                f"{rb['p95'] / ra['p95']:.2f}",
                f"{ra['errors']} / {rb['errors']}",
            ]
        )
    return rows


AB_HEADERS = (
    "call",
    "A CPU ms/call web / pg / total",
    "B CPU ms/call web / pg / total",
    "B/A CPU",
    "calls/s A / B",
    "B/A calls/s",
    "p95 ms A / B",
    "B/A p95",
    "errors A / B",
)


def pids_of_tree(root: int) -> list[int]:
    """The process and its live descendants (uvicorn's workers)."""
    tree = _children()
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(tree.get(pid, []))
    return out


def py_spy_record(pid: int, seconds: float, out: Path, *, rate: int = 97, gil: bool = False) -> Any:
    """Start py-spy sampling ``pid`` (and its subprocesses) for ``seconds``,
    collapsed stacks to ``out``; returns the process (wait on it). ``gil``:
    only the thread holding the GIL is sampled, i.e. Python's own CPU (native
    work that releases the GIL, the ONNX forward pass, is then not seen; a
    wait that released it still counts until another thread takes it)."""
    import shutil
    import subprocess
    import sys

    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen(
        [
            exe,
            "record",
            "--pid",
            str(pid),
            "--subprocesses",
            "--nonblocking",
            "--rate",
            str(rate),
            "--duration",
            str(int(seconds)),
            "--format",
            "raw",
            "--output",
            str(out),
            *(["--gil"] if gil else []),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
