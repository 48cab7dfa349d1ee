"""Issue 15, failure 5: with PostgreSQL unreachable, the HTTP endpoint answers
503 with Retry-After and the dialect's storage error - not a bare 500 - and a
tool call that loses the database mid-session gets the same coded error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.db import connections

from tests.conftest import call_error
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def database_down(tmp_path: Path) -> Iterator[None]:
    """New connections go to a socket directory where no server listens."""
    settings_dict = connections["default"].settings_dict
    saved = settings_dict["HOST"], settings_dict.get("PORT")
    connections.close_all()
    settings_dict["HOST"], settings_dict["PORT"] = str(tmp_path), ""
    yield
    connections.close_all()
    settings_dict["HOST"], settings_dict["PORT"] = saved


async def test_http_answers_503_with_retry_after_and_the_storage_error(member, database_down):
    from memproj.asgi import application

    transport = asgi_transport(application)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        response = await client.post(
            "/mcp/memory",
            headers={
                "Authorization": f"Bearer {member.token}",
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            },
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    error = response.json()["error"]
    assert error["data"]["code"] == "STORAGE_ERROR"
    assert error["message"].startswith("[STORAGE_ERROR] the memory store is unavailable")
    assert "Traceback" not in response.text and "connection" not in response.text.lower()


async def test_a_tool_call_during_an_outage_gets_the_storage_error(member, mcp_client_for, tmp_path):
    settings_dict = connections["default"].settings_dict
    saved = settings_dict["HOST"]
    async with mcp_client_for(member) as client:
        settings_dict["HOST"] = str(tmp_path)  # tools open fresh connections per call
        try:
            text = await call_error(client, "memory_search", query="anything")
        finally:
            settings_dict["HOST"] = saved
    assert text.startswith("[STORAGE_ERROR]") or "[STORAGE_ERROR]" in text
    assert "psycopg" not in text and "socket" not in text
