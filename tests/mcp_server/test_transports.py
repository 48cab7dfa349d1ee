"""The real transports: a stdio subprocess and the streamable-HTTP endpoint of the
ASGI app under uvicorn, each authenticated with a real token."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import httpx2
import pytest
from django.db import connection
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from memory.models import Memory
from tests.conftest import call
from tests.harness.ports import HeldPort, serve_until_ready, stop_server

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def _env_for_test_database(**extra: str) -> dict[str, str]:
    """A child process that talks to this test run's database and broker."""
    from django.conf import settings

    db = connection.settings_dict
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="memproj.settings.base",
        DATABASE_URL=f"postgres://{db['USER']}@/{db['NAME']}?host={db['HOST']}",
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        CELERY_TASK_ALWAYS_EAGER="true",
        MEMPROJ_TOOL_TIMEOUT_SCALE=str(settings.MEMPROJ_TOOL_TIMEOUT_SCALE),
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


async def test_stdio_subprocess_with_token_from_environment(member):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_server", "--toolset", "memory"],
        env=_env_for_test_database(MEMPROJ_TOKEN=member.token),
        cwd=str(ROOT),
    )
    async with Client(params, read_timeout_seconds=120) as client:
        tools = await client.list_tools()
        stored = await call(client, "memory_store_fact", subject="user", predicate="editor", content="Uses Neovim")
        found = await call(client, "memory_search", query="which editor", types=["fact"])
    assert len(tools.tools) == 12
    assert found["results"][0]["id"] == stored["id"]
    row = await Memory.objects.aget(pk=stored["id"])
    assert row.tenant_id == member.caller.tenant_id and row.principal_id == member.caller.principal_id


def test_stdio_refuses_to_start_without_a_valid_token(member):
    proc = subprocess.run(
        [sys.executable, "-m", "mcp_server", "--toolset", "memory"],
        env=_env_for_test_database(MEMPROJ_TOKEN="mp_not-a-real-token"),
        cwd=str(ROOT),
        input=b"",
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert b"MEMPROJ_TOKEN" in proc.stderr


@pytest.fixture
def http_server(transactional_db, tmp_path):
    log_path = tmp_path / "uvicorn.log"
    # The port stays bound until uvicorn serves on it (see tests.harness.ports).
    with HeldPort() as held:
        base = f"http://127.0.0.1:{held.port}"
        proc = serve_until_ready(
            [sys.executable, "-m", "uvicorn", "memproj.asgi:application", "--fd", str(held.fd)],
            held,
            log_path=log_path,
            name="uvicorn",
            timeout=120,
            env=_env_for_test_database(MEMPROJ_PUBLIC_URL=base),
            cwd=ROOT,
        )
    yield base
    stop_server(proc, log_path=log_path, name="uvicorn", timeout=20)


async def test_http_endpoint_with_bearer_token(http_server, member, outsider):
    url = f"{http_server}/mcp/memory/"
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {member.token}"}, timeout=60)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        stored = await call(client, "memory_store_episode", content="Deployed v2 to staging", butler="ops")
        found = await call(client, "memory_search", query="staging deploy")
    assert found["results"][0]["id"] == stored["id"]
    row = await Memory.objects.aget(pk=stored["id"])
    assert row.tenant_id == member.caller.tenant_id

    # Another tenant's token over the same endpoint sees nothing of it.
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {outsider.token}"}, timeout=60)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        other = await call(client, "memory_search", query="staging deploy")
    assert other["results"] == []


def test_http_endpoint_rejects_missing_or_wrong_token(http_server, member):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    missing = httpx.post(f"{http_server}/mcp/memory", json=body, headers=headers, timeout=30)
    wrong = httpx.post(
        f"{http_server}/mcp/memory", json=body, headers={**headers, "Authorization": "Bearer mp_wrong"}, timeout=30
    )
    assert missing.status_code == wrong.status_code == 401
    # Refused, not missing (test_first_hour.py): only a missing token is sent to OAuth discovery.
    assert "resource_metadata" in missing.headers["www-authenticate"]
    assert "resource_metadata" not in wrong.headers["www-authenticate"] and "refused" in wrong.text
    admin = httpx.get(f"{http_server}/admin/login/", timeout=30)
    assert admin.status_code == 200 and "Log in" in admin.text
