"""A tool error on a dialect's plain HTTP route has the status of its code in
every dialect, not a 400 for everything: a REST client branches on it (404 to
stop looking, 403 to stop trying). memory and pce name their own statuses;
memento, langmem and roampal answer by the core code. (langmem's delete of an
unknown id answers "Deleted memory <id>", as the upstream's store delete does.)"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from tests.conftest import make_identity
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)


async def post(token: str, path: str, body: dict[str, Any]) -> httpx.Response:
    from memproj.asgi import Router

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return await client.post(path, json=body, headers=headers)


def _code(response: httpx.Response) -> str:
    """The error's code in the dialect's own vocabulary (memento's
    MEMORY_NOT_FOUND, memory's bracketed NOT_FOUND, ...)."""
    assert "Traceback" not in response.text
    body = response.json()
    error = body.get("error")
    return str(error.get("code") if isinstance(error, dict) else body.get("code"))


UNKNOWN = str(uuid.uuid4())
NOT_FOUND = [
    ("/api/memento/supersede_memory", {"old_memory_id": UNKNOWN, "new_memory_id": str(uuid.uuid4())}),
    ("/api/roampal/delete_memory", {"id": UNKNOWN}),
    ("/api/memory/memory_get", {"type": "fact", "id": UNKNOWN}),
]
WRITES = [
    ("/api/memento/store_memory", {"content": "a read-only token writes"}),
    ("/api/langmem/manage_memory?configurable.user_id=u1", {"content": "a read-only token writes"}),
    ("/api/roampal/add_to_memory_bank", {"content": "a read-only token writes"}),
    ("/api/memory/memory_store_episode", {"content": "a read-only token writes", "butler": "ops"}),
]


@pytest.mark.parametrize(("path", "body"), NOT_FOUND, ids=[p.split("/")[2] for p, _ in NOT_FOUND])
async def test_an_unknown_id_is_a_404(member, path, body):
    response = await post(member.token, path, body)
    assert response.status_code == 404 and "NOT_FOUND" in _code(response), response.text[:300]


@pytest.mark.parametrize(("path", "body"), WRITES, ids=[p.split("/")[2] for p, _ in WRITES])
async def test_a_write_with_a_read_only_token_is_a_403(path, body):
    reader = await sync_to_async(make_identity)("tenant-a", "reader", scopes=["read"])
    response = await post(reader.token, path, body)
    assert response.status_code == 403, response.text[:300]


async def test_a_bad_argument_is_still_a_400(member):
    response = await post(member.token, "/api/memento/store_memory", {"content": ""})
    assert response.status_code == 400 and _code(response) == "INVALID_PARAMETER", response.text[:300]


async def test_an_idempotency_key_reused_with_other_arguments_is_a_409(member):
    from memproj.asgi import Router

    headers = {"Authorization": f"Bearer {member.token}", "Idempotency-Key": f"k-{uuid.uuid4()}"}
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        first = await client.post("/api/memento/store_memory", json={"content": "first text"}, headers=headers)
        other = await client.post("/api/memento/store_memory", json={"content": "other text"}, headers=headers)
    assert first.status_code == 200, first.text[:300]
    assert other.status_code == 409, other.text[:300]
