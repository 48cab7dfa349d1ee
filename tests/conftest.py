"""Shared fixtures. The trio every permission test uses: an owner (admin) and a
member of tenant A, and an outsider in tenant B. And the embedder each test
gets: a deterministic hashing embedder (tests/embedders.py), or the real
all-MiniLM-L6-v2 for tests marked ``real_embedder``: MCP-level, worker and
bench tests, and those that rely on semantic similarity."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent

from memory.embeddings import Embedder, get_embedder, set_embedder
from policy.caller import Caller
from policy.services.tokens import token_authenticate, token_issue
from tests.embedders import BrokenEmbedder, HashingEmbedder


@dataclass
class Identity:
    token: str
    caller: Caller


def make_identity(tenant: str, principal: str, role: str = "member", scopes: list[str] | None = None) -> Identity:
    issued = token_issue(tenant_slug=tenant, principal_name=principal, role=role, scopes=scopes)
    caller = token_authenticate(issued.token)
    assert caller is not None
    return Identity(issued.token, caller)


TRIO = {"owner", "member", "outsider"}


# The trio's database is the one the test's ``django_db`` mark asks for.
@pytest.fixture
def owner(db: None) -> Identity:
    return make_identity("tenant-a", "owner", role="admin")


@pytest.fixture
def member(db: None) -> Identity:
    return make_identity("tenant-a", "member")


@pytest.fixture
def outsider(db: None) -> Identity:
    return make_identity("tenant-b", "outsider")


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool and return its structured output; fail the test on a tool error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {result.content}"
    assert result.structured_content is not None
    return result.structured_content


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail; return its error text."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} unexpectedly succeeded: {result.structured_content}"
    return " ".join(getattr(block, "text", "") for block in result.content)


def block_text(result: CallToolResult, index: int = 0) -> str:
    """The text of a tool result's content block ``index``; a block of another kind fails the test."""
    block = result.content[index]
    assert isinstance(block, TextContent), f"content block {index} is not text: {block!r}"
    return block.text


@pytest.fixture
def mcp_client_for():
    """Factory: an in-process MCP client whose server runs as the given identity."""
    from mcp_server.server import build_server

    def factory(identity: Identity, toolset: str = "memory") -> Client:
        return Client(build_server(toolset, static_caller=identity.caller))

    return factory


_APP_CREDENTIALS: dict[str, Any] = {}


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """Before the test database exists: start the embedded servers (importing
    the settings starts none) and connect as the schema owner, which creates
    the test database and runs the migrations (memproj/dbroles.py)."""
    from memproj.dbroles import separate_roles
    from memproj.embedded import ensure_for_settings

    ensure_for_settings()
    if separate_roles():
        from django.conf import settings
        from django.db import connection

        connection.close()
        _APP_CREDENTIALS.update({key: connection.settings_dict.get(key) for key in settings.MEMPROJ_DB_OWNER})
        connection.settings_dict.update(settings.MEMPROJ_DB_OWNER)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):  # noqa: F811 - wraps pytest-django's own
    """The tests then run as the service's role, which owns nothing: what the
    audit log refuses, it refuses to the tests too."""
    from django.conf import settings
    from django.db import connection

    from memproj.dbroles import separate_roles

    owner = dict(settings.MEMPROJ_DB_OWNER)
    if separate_roles():
        with django_db_blocker.unblock():
            connection.close()
        connection.settings_dict.update(_APP_CREDENTIALS)
    yield
    if separate_roles():
        # pytest-django drops the test database after this, as its owner.
        with django_db_blocker.unblock():
            connection.close()
        connection.settings_dict.update(owner)


@pytest.fixture(scope="session", autouse=True)
def _release_test_database(django_db_setup, django_db_blocker):
    """Tool calls and async ORM calls run in worker threads whose connections the
    main thread cannot close; end those sessions so the test database can be dropped."""
    yield
    from django.db import connection

    # Client sessions only: an autovacuum worker on the database (after large
    # inserts) is the superuser's, and terminating it is refused; DROP
    # DATABASE ends such workers itself.
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )


# --- embedders ------------------------------------------------------------------------------
TESTS = Path(__file__).resolve().parent
# MCP-level, bench (quality) and worker tests run the service as its clients see it,
# often in another process: they keep the real model.
REAL_EMBEDDER_DIRS = (TESTS / "mcp_server", TESTS / "bench", TESTS / "workers")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        # A test of the trio without its own database mark gets the transactional
        # database: its tools may run in worker threads, which see committed rows only.
        if TRIO & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("django_db"):
            item.add_marker(pytest.mark.django_db(transaction=True))
        path = Path(str(item.path))
        if item.get_closest_marker("worker") or any(path.is_relative_to(d) for d in REAL_EMBEDDER_DIRS):
            item.add_marker(pytest.mark.real_embedder)
    # Longest first: under pytest-xdist (scripts/test.sh) each long test starts at
    # once on its own worker while the short ones fill the gaps. Sorting is stable.
    items.sort(key=_run_order)


# Tests that start other processes (a Celery worker, an MCP server, a browser).
SUBPROCESS_MODULES = (TESTS / "mcp_server" / "test_transports.py",)


def _run_order(item: pytest.Item) -> int:
    if item.get_closest_marker("slow"):
        return 0
    if item.get_closest_marker("worker") or item.get_closest_marker("browser") or item.path in SUBPROCESS_MODULES:
        return 1
    return 2


@pytest.fixture(scope="session")
def _real_embedder() -> Embedder:
    """The embedder the settings configure (MiniLM; the model loads on first use)."""
    set_embedder(None)
    return get_embedder()


@pytest.fixture(autouse=True)
def _test_embedder(request: pytest.FixtureRequest, _real_embedder: Embedder) -> Iterator[Embedder]:
    chosen = _real_embedder if request.node.get_closest_marker("real_embedder") else HashingEmbedder()
    set_embedder(chosen)
    yield chosen
    set_embedder(_real_embedder)


@pytest.fixture
def embedder_outage(_test_embedder: Embedder) -> Iterator[Embedder]:
    """The embedder is down for the test (or until it puts back the embedder
    this fixture yields)."""
    set_embedder(BrokenEmbedder(_test_embedder.model_name))
    yield _test_embedder
    set_embedder(_test_embedder)
