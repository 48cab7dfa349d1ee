"""The reliability suite at CI size: the pieces of bench/reliability.py (which
runs them at full size, `make reliability`) against the test database."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.reliability import HttpSurfaces, InProcessClients, Stack, http_identities, identities
from mcp_server.registry import TOOLSETS


@pytest.fixture
def people(transactional_db: None) -> dict[str, tuple[int, str, Any]]:
    """Three tenants, each with a member and an admin (no elevation scope)."""
    return identities("rel")


@pytest.fixture
def clients(people: dict[str, tuple[int, str, Any]]) -> Iterator[InProcessClients]:
    """In-process MCP sessions for every identity on every registered toolset."""
    callers = {who: caller for who, (_, _, caller) in people.items()}
    with InProcessClients(callers, sorted(TOOLSETS)) as opened:
        yield opened


@pytest.fixture
def surfaces(clients: InProcessClients, people: dict[str, tuple[int, str, Any]]) -> HttpSurfaces:
    """The HTTP endpoints beside MCP (REST route, roampal hooks, langmem store,
    admin as a staff user) for the same identities."""
    return HttpSurfaces(clients, http_identities("rel", people))


@contextlib.contextmanager
def private_stack(prefix: str, **options: Any) -> Iterator[Stack]:
    """A `make run`-style stack (bench.reliability.Stack) under a fresh temporary
    directory with a short name (Unix socket paths), removed afterwards."""
    var_dir = Path(tempfile.mkdtemp(prefix=prefix))
    running = Stack(var_dir, **options)
    try:
        running.prepare()
        running.start()
        yield running
    finally:
        running.stop()
        shutil.rmtree(var_dir, ignore_errors=True)
