"""Shared fixtures. The trio convention (CONVENTIONS 3): an owner (admin) and a
member of tenant A, and an outsider in tenant B."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from mcp import Client

from policy.caller import Caller
from policy.services.tokens import token_authenticate, token_issue


@dataclass
class Identity:
    token: str
    caller: Caller


def make_identity(tenant: str, principal: str, role: str = "member", scopes: list[str] | None = None) -> Identity:
    issued = token_issue(tenant_slug=tenant, principal_name=principal, role=role, scopes=scopes)
    caller = token_authenticate(issued.token)
    assert caller is not None
    return Identity(issued.token, caller)


@pytest.fixture
def owner(transactional_db: None) -> Identity:
    return make_identity("tenant-a", "owner", role="admin")


@pytest.fixture
def member(transactional_db: None) -> Identity:
    return make_identity("tenant-a", "member")


@pytest.fixture
def outsider(transactional_db: None) -> Identity:
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

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
