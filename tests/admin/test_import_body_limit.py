"""The admin's import page takes the upload its form promises (IMPORT_MAX_BYTES)
through the whole web stack: the HTTP edge's body limit for that page is the
form's, not the default every other route keeps; through the ASGI app
(memproj.asgi.application), as a browser's multipart POST with its session and
CSRF token."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.test import Client
from django.urls import reverse

from memory.admin import imports as admin_imports
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "http://127.0.0.1:8000"


def _memory_jsonl(size: int) -> bytes:
    """An MCP memory server's memory.jsonl of about ``size`` bytes."""
    lines, total, n = [], 0, 0
    while total < size:
        line = json.dumps(
            {
                "type": "entity",
                "name": f"e{n}",
                "entityType": "thing",
                "observations": [f"observation {n} " + "x" * 900],
            }
        )
        lines.append(line)
        total += len(line) + 1
        n += 1
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def session_cookie(admin_a) -> dict[str, str]:
    client = Client()
    client.force_login(admin_a.user)
    return {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}


@pytest.fixture
def staged(tmp_path, monkeypatch):
    monkeypatch.setattr(admin_imports, "_scratch_root", lambda: tmp_path / "staged")
    return tmp_path / "staged"


async def _form(client: httpx.AsyncClient, path: str) -> str:
    page = await client.get(path)
    assert page.status_code == 200, page.text[:500]
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert match is not None
    return match.group(1)


async def test_an_upload_past_the_default_body_limit_reaches_the_import_form(admin_a, session_cookie, staged):
    from memproj.asgi import application

    body = _memory_jsonl(3 * 1024 * 1024)
    assert len(body) > settings.MEMPROJ_HTTP["MAX_BODY_BYTES"]
    tenant_id = await sync_to_async(lambda: str(admin_a.tenant.pk))()
    path = reverse("admin:memory_memory_import")
    async with httpx.AsyncClient(
        transport=asgi_transport(application), base_url=BASE, cookies=session_cookie, timeout=120
    ) as client:
        token = await _form(client, path)
        answer = await client.post(
            path,
            data={"csrfmiddlewaretoken": token, "system": "mcp-memory", "tenant": tenant_id, "namespace": ""},
            files={"upload": ("memory.jsonl", body, "application/octet-stream")},
            headers={"Referer": BASE + path},
        )

        # The dry run answers on its page: every record of the upload was read.
        assert answer.status_code == 200, answer.text[:500]
        assert answer.headers["content-type"].startswith("text/html")
        assert "Dry run: mcp-memory store memory.jsonl" in answer.text
        # Each line is an entity with one observation: the observation a memory, the entity a graph node.
        created = re.search(r'<td id="import-created">([0-9]+)', answer.text)
        assert created is not None and int(created.group(1)) == body.count(b"\n")

        # Every other admin page keeps the default limit.
        other = await client.post(
            reverse("admin:memory_memory_changelist"),
            data={"csrfmiddlewaretoken": token},
            files={"upload": ("memory.jsonl", body, "application/octet-stream")},
        )
        assert other.status_code == 413
        assert other.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


async def test_a_body_past_the_import_forms_limit_is_refused_at_the_edge():
    from memproj.asgi import application, body_limit

    path = reverse("admin:memory_memory_import")
    assert body_limit.limit_for(path) == admin_imports.IMPORT_MAX_BODY_BYTES > admin_imports.IMPORT_MAX_BYTES
    # Only that page: not a path under it, nor its neighbours.
    assert body_limit.limit_for(path + "x/change/") == settings.MEMPROJ_HTTP["MAX_BODY_BYTES"]
    assert body_limit.limit_for(reverse("admin:memory_memory_add")) == settings.MEMPROJ_HTTP["MAX_BODY_BYTES"]
    async with httpx.AsyncClient(transport=asgi_transport(application), base_url=BASE) as client:
        refused = await client.post(path, content=b"x" * (admin_imports.IMPORT_MAX_BODY_BYTES + 1))
    assert refused.status_code == 413
