"""Reliability suite (issue 15): isolation, fuzzing, faults and load, over every
registered toolset (``mcp_server.registry.TOOLSETS``), with tools and their
argument schemas discovered through MCP ``tools/list``.

    python bench/reliability.py                  # full sizes (make reliability)
    python bench/reliability.py --small          # the CI size (seconds, not minutes)
    python bench/reliability.py --parts isolation,fuzz

Everything runs on loopback against a private stack under ``var/reliability/``
(its own embedded PostgreSQL and Redis, never the dev database): the isolation
and fuzzing parts call the tools in-process (``mcp.Client(build_server(...))``);
the fault and load parts start a ``make run``-style stack (memproj.serve:
uvicorn + Celery worker + beat) and speak MCP over HTTP. Each part prints a
table and the script exits 1 when a check fails: the figures are reported as
they are, failures included.

The pieces live in tests/harness/; tests/reliability/ runs them at the CI size.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.harness.faults import EMBEDDER_FAULTS, FAULTS, FakeEmbeddingEndpoint, fault_scenario  # noqa: E402
from tests.harness.fuzzing import fuzz  # noqa: E402
from tests.harness.isolation import IsolationRun, run_isolation_machine  # noqa: E402
from tests.harness.load.contention import CONTENTION_ENV, contention_scenario  # noqa: E402
from tests.harness.load.mixed import load  # noqa: E402
from tests.harness.paths import VAR_RELIABILITY  # noqa: E402
from tests.harness.reports import reliability as report  # noqa: E402
from tests.harness.rows import consistency_problems  # noqa: E402
from tests.harness.stack import Stack, setup_django_on  # noqa: E402
from tests.harness.surfaces.django_http import HttpSurfaces  # noqa: E402
from tests.harness.surfaces.in_process import InProcessClients, toolset_names  # noqa: E402
from tests.harness.tenants import FAULT_RATE_LIMIT, http_identities, identities  # noqa: E402

FULL = {
    "isolation_examples": 50,
    "isolation_steps": 200,
    "fuzz_calls": 5000,
    "fault_seconds": 60.0,
    "fault_clients": 8,
    "drain_seconds": 180.0,
    "load_clients": 32,
    "load_seconds": 60.0,
    "contention_writers": 32,
    "contention_seconds": 125.0,
}
SMALL = {
    "isolation_examples": 2,
    "isolation_steps": 30,
    "fuzz_calls": 90,
    "fault_seconds": 12.0,
    "fault_clients": 3,
    "drain_seconds": 180.0,
    "load_clients": 4,
    "load_seconds": 8.0,
    "contention_writers": 32,
    "contention_seconds": 65.0,
}
PARTS = ("isolation", "fuzz", "faults", "load", "contention")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="the CI size")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
    parser.add_argument("--faults", default="", help="comma-separated subset of the faults (default: all)")
    parser.add_argument("--var-dir", default=str(VAR_RELIABILITY))
    parser.add_argument("--keep-running", action="store_true", help="leave the private servers running")
    for key in FULL:
        parser.add_argument(f"--{key.replace('_', '-')}", type=float, help=f"override (full {FULL[key]:g})")
    options = parser.parse_args(argv)
    size = dict(SMALL if options.small else FULL)
    for key in FULL:
        if getattr(options, key) is not None:
            size[key] = type(FULL[key])(getattr(options, key))
    parts = [p for p in options.parts.split(",") if p]
    # Two worker processes, as `make run` starts (MEMPROJ_WORKER_CONCURRENCY); the
    # CI-size tests keep one to spare the shared cores.
    stack = Stack(Path(options.var_dir), worker_concurrency=2)
    print(f"memproj reliability suite ({'small' if options.small else 'full'} size), private stack in {stack.var_dir}")
    stack.prepare()
    setup_django_on(stack)

    failures: list[str] = []
    run_id = uuid.uuid4().hex[:6]
    fake_embedder: FakeEmbeddingEndpoint | None = None
    try:
        if "isolation" in parts or "fuzz" in parts:
            people = identities(f"iso{run_id}")
            logins = http_identities(f"iso{run_id}", people)
            callers = {who: caller for who, (_, _, caller) in people.items()}
            with InProcessClients(callers, toolset_names()) as clients:
                tool_counts = {ts: len(tools) for ts, tools in clients.tools.items()}
                print(f"toolsets: {', '.join(f'{ts} ({n} tools)' for ts, n in tool_counts.items())}")
                if "isolation" in parts:
                    failures += _isolation_part(clients, people, HttpSurfaces(clients, logins), size)
                if "fuzz" in parts:
                    failures += _fuzz_part(clients, size)
        if "faults" in parts or "load" in parts:
            if "faults" in parts:
                # Embedder faults are injected through a fake OpenAI-compatible endpoint.
                fake_embedder = FakeEmbeddingEndpoint().start()
                stack.use_embedder(fake_embedder)
            stack.start()
            tokens = [
                stack.issue_token(f"http{run_id}-t{i}", f"agent{i}", rate_limit=FAULT_RATE_LIMIT) for i in range(3)
            ]
            if "faults" in parts:
                failures += _faults_part(stack, tokens[0], size, [f for f in options.faults.split(",") if f])
            if "load" in parts:
                if stack.embedder is not None:
                    # The load is measured as `make run` serves: the packaged model in-process.
                    stack.stop_serving()
                    stack.use_embedder(None)
                    stack.start()
                failures += _load_part(stack, tokens, size)
        if "contention" in parts:
            # Every beat sweep each minute, as CONTENTION_ENV says, on the packaged model.
            stack.stop_serving()
            stack.use_embedder(None)
            stack.env.update(CONTENTION_ENV)
            stack.start()
            token = stack.issue_token(f"ct{run_id}", "agent", rate_limit=FAULT_RATE_LIMIT)
            failures += _contention_part(stack, token, size)
    finally:
        if fake_embedder is not None:
            fake_embedder.stop()
        if options.keep_running:
            if stack.supervisor is not None:
                stack.supervisor.send_signal(signal.SIGTERM)
                stack.supervisor.wait(60)
        else:
            stack.stop()
    print(report.summary(failures))
    return 1 if failures else 0


def _isolation_part(
    clients: InProcessClients, people: dict[str, tuple[int, str, Any]], surfaces: HttpSurfaces, size: dict[str, Any]
) -> list[str]:
    run = IsolationRun(
        clients, {who: (i, tenant) for who, (i, tenant, _) in people.items()}, strict=False, surfaces=surfaces
    )
    started = time.monotonic()
    run_isolation_machine(run, examples=size["isolation_examples"], steps=size["isolation_steps"])
    text, failures = report.isolation(run.report, time.monotonic() - started)
    print(text)
    return failures


def _fuzz_part(clients: InProcessClients, size: dict[str, Any]) -> list[str]:
    who = next(iter(clients.callers))
    started = time.monotonic()
    fuzzed = fuzz(clients, who, calls_per_toolset=size["fuzz_calls"])
    elapsed = time.monotonic() - started
    text, failures = report.fuzz(fuzzed, clients.toolsets, elapsed, consistency_problems())
    print(text)
    return failures


def _faults_part(stack: Stack, token: str, size: dict[str, Any], only: Sequence[str] = ()) -> list[str]:
    runs = []
    faults = [*FAULTS, *(list(EMBEDDER_FAULTS)[:3] if stack.embedder is not None else [])]
    for fault in [f for f in faults if f in only] if only else faults:
        print(f"  fault: {fault} ...", flush=True)
        runs.append(
            fault_scenario(
                stack,
                token,
                fault,
                seconds=size["fault_seconds"],
                clients=size["fault_clients"],
                drain=size["drain_seconds"],
            )
        )
    text, failures = report.faults(runs)
    print(text)
    return failures


def _load_part(stack: Stack, tokens: Sequence[str], size: dict[str, Any]) -> list[str]:
    text, failures = report.load(load(stack, tokens, clients=size["load_clients"], seconds=size["load_seconds"]))
    print(text)
    return failures


def _contention_part(stack: Stack, token: str, size: dict[str, Any]) -> list[str]:
    writers, seconds = int(size["contention_writers"]), float(size["contention_seconds"])
    run = contention_scenario(stack, token, writers=writers, seconds=seconds, drain=size["drain_seconds"])
    text, failures = report.contention(run)
    print(text)
    return failures


if __name__ == "__main__":
    sys.exit(main())
