"""roampal's hook routes on a live server: a query parameter they do not take
is refused, never ignored. ``?tenant=other`` on ``/api/hooks/stop`` stored the
exchange in the token's tenant and answered 200, as if the parameter had
chosen one (docs/connecting.md: tenant selectors are refused, never silently
ignored)."""

from __future__ import annotations

import httpx
import pytest

from memory.models import Exchange, Memory
from tests.mcp_server.test_transports import http_server  # noqa: F401 - the live-server fixture

pytestmark = pytest.mark.django_db(transaction=True)

BODIES = {
    "/api/hooks/get-context": {"query": "deploys", "conversation_id": "c1"},
    "/api/hooks/stop": {"conversation_id": "c1", "user_message": "hi", "assistant_response": "hello"},
    "/api/search": {"query": "deploys"},
}


@pytest.mark.parametrize("query", ["tenant=tenant-b", "tenant=", "tenant", "elevate=true", "limit=5"])
def test_a_query_parameter_is_refused_on_every_hook_route(http_server, member, outsider, query):  # noqa: F811
    headers = {"Authorization": f"Bearer {member.token}"}
    for path, body in BODIES.items():
        answer = httpx.post(f"{http_server}{path}?{query}", json=body, headers=headers, timeout=60)
        assert answer.status_code == 422, (path, answer.text)
        refused = answer.json()
        assert refused["code"] == "INVALID_ARGUMENT" and "is not taken here" in refused["error"], refused
    assert Exchange.objects.count() == 0 and Memory.objects.count() == 0


def test_ingest_reads_title_alone_and_only_for_a_raw_document(http_server, member):  # noqa: F811
    headers = {"Authorization": f"Bearer {member.token}"}
    raw = {**headers, "Content-Type": "text/plain"}
    other = httpx.post(f"{http_server}/api/ingest?title=notes&tenant=tenant-b", content=b"A note.", headers=raw)
    assert other.status_code == 422 and "'tenant' is not taken here" in other.json()["error"], other.text
    # A JSON body names its own title: a ?title= beside it would be dropped unread.
    beside = httpx.post(f"{http_server}/api/ingest?title=x", json={"content": "A note.", "title": "y"}, headers=headers)
    assert beside.status_code == 422 and "JSON body takes no query parameter" in beside.json()["error"], beside.text
    assert Memory.objects.count() == 0
    # What the route does take still works.
    assert httpx.post(f"{http_server}/api/ingest?title=notes", content=b"A note.", headers=raw).status_code == 202
    assert (
        httpx.post(f"{http_server}/api/ingest", json={"content": "A note.", "title": "y"}, headers=headers).status_code
        == 202
    )
    assert httpx.post(f"{http_server}/api/search?", json={"query": "note"}, headers=headers).status_code == 200
