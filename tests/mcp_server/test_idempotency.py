"""Idempotency keys of writes, against the real service under uvicorn: the
memory dialect over a real MCP client (the key in the request's ``_meta``) and
the plain HTTP route (the ``Idempotency-Key`` header). A write retried with the
same key stores one row and answers as the first time; the same key with other
arguments is a coded conflict; concurrent duplicates store one row; without a
key every call stores, as before."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, cast

import httpx
import httpx2
import pytest
from django.utils import timezone
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import RequestParamsMeta

from memory.models import Exchange, IdempotencyKey, Memory
from memory.services.sweeps import idempotency_keys_expire
from tests.conftest import block_text
from tests.mcp_server.test_transports import http_server  # noqa: F401 - the live-server fixture

pytestmark = pytest.mark.django_db(transaction=True)

REPLAYED = "io.memproj/idempotent-replay"


def mcp(base: str, identity, toolset: str = "memory") -> tuple[httpx2.AsyncClient, Client]:
    session = httpx2.AsyncClient(headers={"Authorization": f"Bearer {identity.token}"}, timeout=300)
    return session, Client(streamable_http_client(f"{base}/mcp/{toolset}/", http_client=session))


def request_meta(fields: dict[str, Any]) -> RequestParamsMeta:
    """A request's ``_meta``. RequestParamsMeta is an open map (extra keys of any
    type), which mypy cannot model yet: it accepts only the declared keys."""
    return cast(RequestParamsMeta, fields)


async def rows(content: str) -> int:
    return await Memory.objects.filter(content=content).acount()


async def test_mcp_retry_with_the_same_key_stores_once_and_replays_the_answer(http_server, member):  # noqa: F811
    content = "Deployed v7 to staging on Tuesday"
    session, client = mcp(http_server, member)
    async with session, client:
        first = await client.call_tool(
            "memory_store_episode",
            {"content": content, "butler": "ops"},
            meta=request_meta({"idempotency_key": "deploy-7"}),
        )
        retry = await client.call_tool(
            "memory_store_episode",
            {"content": content, "butler": "ops"},
            meta=request_meta({"idempotency_key": "deploy-7"}),
        )
        # The namespaced spelling names the same key.
        spelled = await client.call_tool(
            "memory_store_episode",
            {"content": content, "butler": "ops"},
            meta=request_meta({"io.memproj/idempotency-key": "deploy-7"}),
        )
    assert not first.is_error and not retry.is_error and not spelled.is_error
    assert retry.structured_content == first.structured_content == spelled.structured_content
    assert [block_text(retry, i) for i in range(len(retry.content))] == [
        block_text(first, i) for i in range(len(first.content))
    ]
    assert not (first.meta or {}).get(REPLAYED)
    assert retry.meta and retry.meta.get(REPLAYED) is True
    assert await rows(content) == 1
    key = await IdempotencyKey.objects.aget(key="deploy-7")
    assert key.tenant_id == member.caller.tenant_id and key.principal_id == member.caller.principal_id
    assert key.scope == "mcp:memory.memory_store_episode"


async def test_mcp_same_key_with_other_arguments_is_a_coded_conflict(http_server, member):  # noqa: F811
    session, client = mcp(http_server, member)
    async with session, client:
        first = await client.call_tool(
            "memory_store_fact",
            {"subject": "user", "predicate": "editor", "content": "Uses Neovim"},
            meta=request_meta({"idempotency_key": "fact-1"}),
        )
        other = await client.call_tool(
            "memory_store_fact",
            {"subject": "user", "predicate": "editor", "content": "Uses Emacs"},
            meta=request_meta({"idempotency_key": "fact-1"}),
        )
        too_long = await client.call_tool(
            "memory_store_fact",
            {"subject": "user", "predicate": "shell", "content": "Uses fish"},
            meta=request_meta({"idempotency_key": "k" * 256}),
        )
    assert not first.is_error
    assert other.is_error and block_text(other).startswith("[CONFLICT] ")
    assert other.structured_content is None
    assert too_long.is_error and block_text(too_long).startswith("[INVALID_ARGUMENT] ")
    assert "255" in block_text(too_long)
    assert await rows("Uses Neovim") == 1
    assert await rows("Uses Emacs") == 0 and await rows("Uses fish") == 0


async def test_mcp_concurrent_duplicates_store_one_row(http_server, member):  # noqa: F811
    content = "Rotated the staging database password"
    arguments = {"content": content, "butler": "ops"}

    async def attempt() -> dict:
        session, client = mcp(http_server, member)
        async with session, client:
            result = await client.call_tool(
                "memory_store_episode", arguments, meta=request_meta({"idempotency_key": "rotate-1"})
            )
        assert not result.is_error, result.content
        return result.structured_content or {}

    answers = await asyncio.gather(*(attempt() for _ in range(8)))
    assert len({json.dumps(a, sort_keys=True) for a in answers}) == 1
    assert await rows(content) == 1


async def test_mcp_without_a_key_every_call_stores(http_server, member):  # noqa: F811
    content = "Standup moved to 9:30"
    session, client = mcp(http_server, member)
    async with session, client:
        first = await client.call_tool("memory_store_episode", {"content": content, "butler": "ops"})
        second = await client.call_tool("memory_store_episode", {"content": content, "butler": "ops"})
    assert first.structured_content["id"] != second.structured_content["id"]
    assert await rows(content) == 2


async def test_mcp_read_tools_ignore_the_key(http_server, member):  # noqa: F811
    session, client = mcp(http_server, member)
    async with session, client:
        await client.call_tool("memory_store_episode", {"content": "Lunch at noon", "butler": "ops"})
        first = await client.call_tool(
            "memory_search", {"query": "lunch"}, meta=request_meta({"idempotency_key": "read-1"})
        )
        await client.call_tool("memory_store_episode", {"content": "Lunch moved to one", "butler": "ops"})
        second = await client.call_tool(
            "memory_search", {"query": "lunch"}, meta=request_meta({"idempotency_key": "read-1"})
        )
    assert len(second.structured_content["results"]) == len(first.structured_content["results"]) + 1
    assert not (second.meta or {}).get(REPLAYED)
    assert await IdempotencyKey.objects.acount() == 0


def post(base: str, identity, tool: str, body: dict, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {identity.token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return httpx.post(f"{base}/api/memory/{tool}", json=body, headers=headers, timeout=120)


def count(content: str) -> int:
    return Memory.objects.filter(content=content).count()


def test_http_retry_with_the_same_key_stores_once_and_replays_the_answer(http_server, member):  # noqa: F811
    body = {"content": "Invoice 4411 from Acme was paid on March 3", "butler": "billing"}
    first = post(http_server, member, "memory_store_episode", body, key="invoice-4411")
    retry = post(http_server, member, "memory_store_episode", body, key="invoice-4411")
    assert first.status_code == retry.status_code == 200
    assert retry.json() == first.json()
    assert "Idempotent-Replayed" not in first.headers
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert count(body["content"]) == 1
    # The key is the caller's: another tenant's token with the same key writes its own row.
    assert IdempotencyKey.objects.get(key="invoice-4411").scope == "http:memory.memory_store_episode"


def test_http_same_key_with_other_arguments_is_a_409(http_server, member):  # noqa: F811
    first = post(
        http_server, member, "memory_store_episode", {"content": "Invoice 4412 paid", "butler": "ops"}, key="inv"
    )
    other = post(
        http_server, member, "memory_store_episode", {"content": "Invoice 4413 paid", "butler": "ops"}, key="inv"
    )
    empty = post(http_server, member, "memory_store_episode", {"content": "Invoice 4414 paid", "butler": "ops"}, key="")
    assert first.status_code == 200
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "CONFLICT"
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "INVALID_ARGUMENT"
    assert count("Invoice 4412 paid") == 1 and count("Invoice 4413 paid") == 0 and count("Invoice 4414 paid") == 0


def test_http_concurrent_duplicates_store_one_row(http_server, member):  # noqa: F811
    body = {"content": "The on-call rotation starts Monday", "butler": "ops"}
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(
            pool.map(lambda _: post(http_server, member, "memory_store_episode", body, key="oncall"), range(8))
        )
    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
    assert len({a.text for a in answers}) == 1
    assert count(body["content"]) == 1


def test_http_keys_are_scoped_to_the_caller(http_server, member, outsider):  # noqa: F811
    body = {"content": "Quarterly report is due Friday", "butler": "ops"}
    mine = post(http_server, member, "memory_store_episode", body, key="report")
    theirs = post(http_server, outsider, "memory_store_episode", body, key="report")
    assert mine.status_code == theirs.status_code == 200
    assert mine.json()["id"] != theirs.json()["id"]
    assert "Idempotent-Replayed" not in theirs.headers
    assert count(body["content"]) == 2


def test_http_without_a_key_every_call_stores(http_server, member):  # noqa: F811
    body = {"content": "Backups run at 02:00", "butler": "ops"}
    first = post(http_server, member, "memory_store_episode", body)
    second = post(http_server, member, "memory_store_episode", body)
    assert first.status_code == second.status_code == 200
    assert first.json()["id"] != second.json()["id"]
    assert count(body["content"]) == 2


def test_expired_keys_are_taken_over_and_swept(http_server, member):  # noqa: F811
    body = {"content": "Renew the TLS certificate", "butler": "ops"}
    first = post(http_server, member, "memory_store_episode", body, key="tls")
    IdempotencyKey.objects.filter(key="tls").update(expires_at=timezone.now() - timedelta(seconds=1))
    # An expired key replays nothing: the write runs again under it.
    again = post(http_server, member, "memory_store_episode", body, key="tls")
    assert again.status_code == 200 and "Idempotent-Replayed" not in again.headers
    assert again.json()["id"] != first.json()["id"]
    post(http_server, member, "memory_store_episode", {"content": "Rotate the API keys", "butler": "ops"}, key="keys")
    IdempotencyKey.objects.filter(key="tls").update(expires_at=timezone.now() - timedelta(seconds=1))
    swept = idempotency_keys_expire()
    assert swept.processed == 1 and not swept.more
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["keys"]


def hook(base: str, identity, path: str, body: dict, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {identity.token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return httpx.post(f"{base}{path}", json=body, headers=headers, timeout=120)


def test_roampal_hooks_that_write_replay_with_the_same_key(http_server, member):  # noqa: F811
    stop = {"conversation_id": "c-1", "user_message": "Which port?", "assistant_response": "Port 8443 it is"}
    first = hook(http_server, member, "/api/hooks/stop", stop, key="stop-1")
    retry = hook(http_server, member, "/api/hooks/stop", stop, key="stop-1")
    other = hook(http_server, member, "/api/hooks/stop", {**stop, "assistant_response": "Port 9443"}, key="stop-1")
    assert first.status_code == retry.status_code == 200
    assert retry.json() == first.json() and retry.headers["Idempotent-Replayed"] == "true"
    assert other.status_code == 409 and other.json()["code"] == "CONFLICT"
    assert Memory.objects.filter(content__contains="Port 8443 it is").count() == 1
    assert Memory.objects.filter(content__contains="Port 9443").count() == 0

    # get-context opens an exchange: its retry opens none.
    asked = [hook(http_server, member, "/api/hooks/get-context", {"query": "port?", "conversation_id": "c-2"}, "ctx-1")]
    asked.append(
        hook(http_server, member, "/api/hooks/get-context", {"query": "port?", "conversation_id": "c-2"}, "ctx-1")
    )
    assert [a.status_code for a in asked] == [200, 200] and asked[1].json() == asked[0].json()
    assert Exchange.objects.filter(conversation_id="c-2").count() == 1

    book = {"title": "Runbook", "content": "Restart the ingest worker with systemctl restart memproj-worker."}
    books = [hook(http_server, member, "/api/ingest", book, key="book-1") for _ in range(2)]
    assert [b.status_code for b in books] == [202, 202]
    assert books[1].json() == books[0].json() and books[1].headers["Idempotent-Replayed"] == "true"
    assert Memory.objects.filter(content__contains="systemctl restart memproj-worker").count() == 1


def test_langgraph_store_put_replays_with_the_same_key(http_server, member):  # noqa: F811
    def put(content: str, key: str | None) -> httpx.Response:
        op = {"op": "put", "namespace": ["notes"], "key": "deploy", "value": {"content": content}}
        headers = {"Authorization": f"Bearer {member.token}"}
        if key is not None:
            headers["Idempotency-Key"] = key
        return httpx.post(f"{http_server}/api/langmem/store/", json={"ops": [op]}, headers=headers, timeout=120)

    first, retry = put("Deploys go out on Thursdays", "put-1"), put("Deploys go out on Thursdays", "put-1")
    other = put("Deploys go out on Fridays", "put-1")
    assert first.status_code == retry.status_code == 200
    assert retry.json() == first.json() and retry.headers["Idempotent-Replayed"] == "true"
    assert other.status_code == 409 and other.json()["error"]["code"] == "CONFLICT"
    # One row: the retry did not store the value again (a second put supersedes the first).
    assert Memory.objects.filter(subject="deploy").count() == 1
    put("Deploys go out on Thursdays", None)
    assert Memory.objects.filter(subject="deploy").count() == 2
