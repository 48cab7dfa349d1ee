"""An idempotency key names one request to one tool (docs/connecting.md): found
over real HTTP,

- langmem's namespace (a connection option, in the query string) was not part
  of the request the key identifies: the same key and content sent for user
  u-2 replayed u-1's "created memory <id>" and stored nothing in u-2's
  namespace, a write silently dropped. Another namespace is another request:
  a CONFLICT, as other arguments are;
- pce's tools answer under two spellings (pce.memory.activate and
  pce_memory_activate), one tool, but each spelling was a key scope of its
  own: a client retrying under the other spelling stored a second active context."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from memory.models import ActiveContext, Memory
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)


async def post(identity: Any, path: str, body: dict[str, Any], key: str) -> httpx.Response:
    from memproj.asgi import Router

    headers = {
        "Authorization": f"Bearer {identity.token}",
        "Content-Type": "application/json",
        "Idempotency-Key": key,
    }
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return await client.post(path, content=json.dumps(body), headers=headers)


async def test_the_same_key_for_another_langmem_namespace_is_a_conflict_not_a_replay(member):
    body = {"content": "the user drinks green tea"}
    first = await post(member, "/api/langmem/manage_memory?configurable.user_id=u-1", body, "tea-1")
    assert first.status_code == 200, first.text
    again = await post(member, "/api/langmem/manage_memory?configurable.user_id=u-1", body, "tea-1")
    assert again.json() == first.json()
    assert again.headers.get("Idempotent-Replayed") == "true"

    other = await post(member, "/api/langmem/manage_memory?configurable.user_id=u-2", body, "tea-1")
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] == "CONFLICT"
    assert await Memory.objects.filter(content=body["content"]).acount() == 1

    # A key of its own writes to u-2's namespace.
    fresh = await post(member, "/api/langmem/manage_memory?configurable.user_id=u-2", body, "tea-2")
    assert fresh.status_code == 200, fresh.text
    assert fresh.json() != first.json()
    assert await Memory.objects.filter(content=body["content"]).acount() == 2


async def test_a_key_sent_under_either_spelling_of_a_pce_tool_names_one_request(member):
    body = {"q": "tea", "scope": ["project"], "allow": ["answer:task"]}
    first = await post(member, "/api/pce/pce_memory_activate", body, "ctx-1")
    assert first.status_code == 200, first.text
    dotted = await post(member, "/api/pce/pce.memory.activate", body, "ctx-1")
    assert dotted.status_code == 200, dotted.text
    assert dotted.headers.get("Idempotent-Replayed") == "true"
    assert dotted.json() == first.json()
    assert await ActiveContext.objects.acount() == 1

    other = await post(member, "/api/pce/pce.memory.activate", {**body, "q": "coffee"}, "ctx-1")
    assert other.status_code == 409, other.text
    assert await ActiveContext.objects.acount() == 1
