"""The reliability suite at CI size: the harness's pieces (tests/harness/;
bench/reliability.py runs them at full size, `make reliability`) against the
test database."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.surfaces.django_http import HttpSurfaces
from tests.harness.surfaces.in_process import InProcessClients, toolset_names
from tests.harness.tenants import http_identities, identities


@pytest.fixture
def people(transactional_db: None) -> dict[str, tuple[int, str, Any]]:
    """Three tenants, each with a member and an admin (no elevation scope)."""
    return identities("rel")


@pytest.fixture
def clients(people: dict[str, tuple[int, str, Any]]) -> Iterator[InProcessClients]:
    """In-process MCP sessions for every identity on every registered toolset."""
    callers = {who: caller for who, (_, _, caller) in people.items()}
    with InProcessClients(callers, toolset_names()) as opened:
        yield opened


@pytest.fixture
def surfaces(clients: InProcessClients, people: dict[str, tuple[int, str, Any]]) -> HttpSurfaces:
    """The HTTP endpoints beside MCP (REST route, roampal hooks, langmem store,
    admin as a staff user) for the same identities."""
    return HttpSurfaces(clients, http_identities("rel", people))
