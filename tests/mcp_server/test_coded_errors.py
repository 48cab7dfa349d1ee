"""Errors that used to escape their codes (issue 23, point 6) and read-only
tokens that used to write (point 7, roampal's hooks): each case through the
real HTTP app (the ASGI router, Django, PostgreSQL) or a real MCP client. Every
answer is coded JSON with a 4xx status, the bad input changes nothing, and a
search whose query names a date the calendar cannot hold still answers."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from mcp_server.dialect import connection_options
from memory.models import Exchange, Memory
from memory.services.memories import fact_store
from tests.conftest import block_text, call, make_identity
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

IMPOSSIBLE_DATES = [
    "hiking in may 0000",
    "hiking in december 9999",
    "what did I do in dec 9999?",
    # A day named by its date: the last day there is, the first, one that does not exist.
    "where was I hiking on December 31, 9999?",
    "hiking on the 1st of January, 0001",
    "hiking on February 30th",
]


async def post(identity: Any, path: str, body: Any) -> httpx.Response:
    """A POST through the service's ASGI router (rate limiting aside); ``body``
    is JSON text when a str, so lone surrogates and NUL travel as JSON escapes."""
    from memproj.asgi import Router

    raw = body if isinstance(body, str) else json.dumps(body)
    headers = {"Authorization": f"Bearer {identity.token}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return await client.post(path, content=raw.encode(), headers=headers)


def coded(response: httpx.Response) -> str:
    """The error code of a JSON error answer, whatever the surface's shape."""
    assert response.headers["content-type"].startswith("application/json"), response.text[:200]
    body = response.json()
    error = body.get("error")
    code = error.get("code") if isinstance(error, dict) else body.get("code")
    assert isinstance(code, str) and code, body
    assert "Traceback" not in response.text
    return code


async def seed(member: Any) -> None:
    stored = await post(
        member,
        "/api/memory/memory_store_fact",
        {"subject": "trip", "predicate": "kind", "content": "hiking in the alps"},
    )
    assert stored.status_code == 200, stored.text


@pytest.mark.parametrize("query", IMPOSSIBLE_DATES)
async def test_a_query_naming_an_impossible_date_still_searches_on_every_surface(member, mcp_client_for, query):
    await seed(member)
    for path, body in [
        ("/api/search", {"query": query}),
        ("/api/hooks/get-context", {"query": query}),
        ("/api/memory/memory_search", {"query": query}),
        ("/api/memento/search_memories", {"query": query}),
        ("/api/roampal/search_memory", {"query": query}),
        ("/api/langmem/store/", {"ops": [{"op": "search", "namespace_prefix": [], "query": query}]}),
    ]:
        response = await post(member, path, body)
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
    token = connection_options.set({"configurable.user_id": "u-1"})
    try:
        async with mcp_client_for(member, "langmem") as client:
            found = await client.call_tool("search_memory", {"query": query})
    finally:
        connection_options.reset(token)
    assert not found.is_error, found.content


async def test_the_reserved_value_key_neither_breaks_nor_enters_the_store(member):
    reserved = {"content": "x", "_memproj_value": "json"}
    put = await post(
        member, "/api/langmem/store/", {"ops": [{"op": "put", "namespace": ["a"], "key": "k", "value": reserved}]}
    )
    assert put.status_code == 400 and coded(put) == "INVALID_ARGUMENT", put.text[:300]
    got = await post(member, "/api/langmem/store/", {"ops": [{"op": "get", "namespace": ["a"], "key": "k"}]})
    assert got.status_code == 200 and got.json() == {"results": [None]}
    # A fact carrying the key written by the core for another client: its namespace still reads.
    await sync_to_async(fact_store)(
        caller=member.caller,
        subject="k2",
        predicate=None,
        namespace=["a"],
        content="plain text",
        metadata={"_memproj_value": "json"},
    )
    for op in ({"op": "get", "namespace": ["a"], "key": "k2"}, {"op": "search", "namespace_prefix": ["a"]}):
        answer = await post(member, "/api/langmem/store/", {"ops": [op]})
        assert answer.status_code == 200, answer.text[:300]
        assert "plain text" in answer.text


HUGE_NAMESPACE = ["s" * 200] * 4000
BAD_INPUT = [
    # (path, JSON text)
    (
        "/api/langmem/store/",
        '{"ops": [{"op": "put", "namespace": ["b"], "key": "k", "value": {"content": "x\\ud800"}}]}',
    ),
    (
        "/api/langmem/store/",
        '{"ops": [{"op": "put", "namespace": ["b"], "key": "k", "value": {"content": "x", "a\\u0000": 1}}]}',
    ),
    ("/api/langmem/store/", '{"ops": [{"op": "get", "namespace": ["b\\u0000"], "key": "k"}]}'),
    ("/api/langmem/store/", '{"ops": [{"op": "search", "namespace_prefix": ["b\\u0000"]}]}'),
    ("/api/langmem/store/", '{"ops": [{"op": "search", "namespace_prefix": [], "filter": {"a\\u0000": 1}}]}'),
    ("/api/langmem/store/", '{"ops": [{"op": "list_namespaces", "prefix": ["b\\u0000"]}]}'),
    (
        "/api/langmem/store/",
        json.dumps({"ops": [{"op": "put", "namespace": HUGE_NAMESPACE, "key": "k", "value": {"content": "x"}}]}),
    ),
    ("/api/langmem/store/", json.dumps({"ops": [{"op": "get", "namespace": HUGE_NAMESPACE, "key": "k"}]})),
    ("/api/hooks/get-context", '{"query": "x", "conversation_id": "a\\u0000b"}'),
    ("/api/hooks/get-context", '{"query": "x\\ud800"}'),
    ("/api/hooks/stop", '{"conversation_id": "a\\u0000b", "assistant_response": "y"}'),
    ("/api/hooks/stop", '{"conversation_id": "c", "assistant_response": "y", "transcript": "t\\u0000"}'),
    ("/api/search", '{"query": "x", "metadata_filters": {"a\\u0000": 1}}'),
    ("/api/ingest", '{"title": "t", "content": "text \\udfff"}'),
    ("/api/memory/memory_store_episode", '{"content": "c", "butler": "b", "metadata": {"a\\u0000": 1}}'),
]


@pytest.mark.parametrize(("path", "raw"), BAD_INPUT, ids=[f"{p}-{i}" for i, (p, _) in enumerate(BAD_INPUT)])
async def test_bad_text_gets_a_validation_error_and_changes_nothing(member, path, raw):
    await seed(member)
    before = await Memory.objects.acount(), await Exchange.objects.acount()
    response = await post(member, path, raw)
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    assert coded(response) in {"INVALID_ARGUMENT", "INVALID_PARAMETER"}
    assert (await Memory.objects.acount(), await Exchange.objects.acount()) == before


@pytest.mark.parametrize("namespace", ["a\x00b", ",".join(["s" * 200] * 4000)])
async def test_a_bad_langmem_namespace_option_is_a_validation_error(member, namespace):
    from mcp import Client

    from mcp_server.dialect import connection_options
    from mcp_server.server import build_server

    token = connection_options.set({"namespace": namespace})
    try:
        async with Client(build_server("langmem", static_caller=member.caller)) as client:
            stored = await client.call_tool("manage_memory", {"content": "x", "action": "create"})
            searched = await client.call_tool("search_memory", {"query": "x"})
    finally:
        connection_options.reset(token)
    for result in (stored, searched):
        assert result.is_error and result.structured_content is None
        assert block_text(result).startswith("ValueError:")
    assert not await Memory.objects.aexists()


async def test_the_plain_http_route_answers_json_in_every_dialect(member):
    for path in ("/api/memory/memory_search", "/api/roampal/search_memory", "/api/langmem/search_memory"):
        response = await post(member, path, {"query": "q", "no_such_argument": 1})
        assert 400 <= response.status_code < 500 and coded(response) == "INVALID_ARGUMENT", response.text
    missing = await post(member, "/api/no/such/endpoint", {})
    assert missing.status_code == 404 and coded(missing) == "NOT_FOUND"


# --- read-only tokens write nothing through roampal's hooks --------------------------------------


async def test_get_context_with_a_read_only_token_opens_no_exchange(member):
    reader = await sync_to_async(make_identity)("tenant-a", "member", "member", ["read"])
    response = await post(reader, "/api/hooks/get-context", {"query": "anything", "conversation_id": "c1"})
    assert response.status_code == 200, response.text
    assert not await Exchange.objects.aexists()


async def test_score_response_with_a_read_only_token_marks_nothing_scored(member, mcp_client_for):
    await seed(member)
    for path, body in [
        ("/api/hooks/get-context", {"query": "hiking", "conversation_id": "c1"}),
        ("/api/hooks/stop", {"conversation_id": "c1", "user_message": "hiking?", "assistant_response": "the alps"}),
        ("/api/hooks/get-context", {"query": "more hiking", "conversation_id": "c1"}),
    ]:
        answer = await post(member, path, body)
        assert answer.status_code == 200, answer.text
    assert answer.json()["scoring_required"]
    reader = await sync_to_async(make_identity)("tenant-a", "member", "member", ["read"])
    async with mcp_client_for(reader, "roampal") as client:
        refused = await client.call_tool("score_response", {"outcome": "worked"})
    assert refused.is_error and refused.structured_content is None
    assert block_text(refused).startswith("Error: ")
    assert not await Exchange.objects.filter(scored_at__isnull=False).aexists()
    async with mcp_client_for(member, "roampal") as client:
        scored = await call(client, "score_response", outcome="worked")
    assert scored["exchange_id"] is not None
