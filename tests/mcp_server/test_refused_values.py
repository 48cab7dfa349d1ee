"""A value the database cannot hold is the request's fault, not the store's:
a time-zone offset Python reads but PostgreSQL refuses (+-16:00 .. +-23:59)
filters by the same instant in UTC, and a value the database still refuses is
answered as the dialect's invalid argument (4xx, no Retry-After), never as a
retryable storage error that a client would retry for ever."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from mcp_server.dialect import ERROR_CODE_META_KEY
from memory.selectors import collections
from memory.services.memories import fact_store
from tests.conftest import block_text
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

OFFSET_FILTERS = [
    {"created_at": {"$gte": "2024-01-01T00:00:00+23:59"}},
    {"created_at": {"$lte": "2999-01-01T00:00:00-16:00"}},
    {"timestamp": {"$gte": "2024-01-01T00:00:00-23:59"}},
]


def _offset_in(text: str) -> timedelta | None:
    """The UTC offset of the instant ``text`` filters by."""
    instant = collections._iso(text)
    assert instant is not None, text
    return instant.utcoffset()


def test_an_offset_postgresql_cannot_hold_is_the_same_instant_in_utc():
    assert collections._iso("2024-01-01T00:00:00+23:59") == datetime(2023, 12, 31, 0, 1, tzinfo=UTC)
    assert collections._iso("2024-01-01T00:00:00-16:00") == datetime(2024, 1, 1, 16, 0, tzinfo=UTC)
    # Equal instants compare equal whatever their offsets: the offset sent on is UTC's.
    assert {_offset_in(f"2024-01-01T00:00:00{offset}") for offset in ("+23:59", "-16:00", "")} == {timedelta(0)}
    # Past the years Python holds in UTC: the end of that range.
    assert collections._iso("0001-01-01T00:00:00+23:59") == datetime.min.replace(tzinfo=UTC)
    assert collections._iso("9999-12-31T23:59:59-23:59") == datetime.max.replace(tzinfo=UTC)


async def post(identity: Any, path: str, body: dict[str, Any]) -> httpx.Response:
    from memproj.asgi import Router

    headers = {"Authorization": f"Bearer {identity.token}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return await client.post(path, content=json.dumps(body).encode(), headers=headers)


@pytest.mark.parametrize("metadata", OFFSET_FILTERS)
async def test_a_search_filtered_by_such_an_offset_answers(member, mcp_client_for, metadata):
    await sync_to_async(fact_store)(caller=member.caller, subject=None, predicate=None, content="Ana drinks green tea")
    async with mcp_client_for(member, "roampal") as client:
        result = await client.call_tool("search_memory", {"query": "tea", "metadata": metadata})
    assert not result.is_error, block_text(result)
    response = await post(member, "/api/search", {"query": "tea", "metadata_filters": metadata})
    assert response.status_code == 200, response.text
    timeline = await post(member, "/api/search", {"query": "", "metadata_filters": metadata})
    assert timeline.status_code in (200, 422), timeline.text  # an empty query is upstream's own 422
    assert "retry-after" not in timeline.headers


async def test_a_value_the_database_refuses_is_an_invalid_argument_on_every_surface(
    member, mcp_client_for, monkeypatch
):
    """The database's own refusal (psycopg's DataError), reached by sending
    the offset as it came, which is what the filter did before it converted
    to UTC."""
    monkeypatch.setattr(collections, "_iso", lambda raw: datetime.fromisoformat(raw) if isinstance(raw, str) else None)
    metadata = OFFSET_FILTERS[0]
    before = await sync_to_async(lambda: list(collections.Memory.objects.values_list("id", "validity")))()
    async with mcp_client_for(member, "roampal") as client:
        refused = await client.call_tool("search_memory", {"query": "tea", "metadata": metadata})
        # The dialect's own invalid argument, for comparison: neither a query nor days_back.
        invalid = await client.call_tool("search_memory", {})
    assert refused.is_error and invalid.is_error
    code = (refused.meta or {}).get(ERROR_CODE_META_KEY)
    assert code == (invalid.meta or {}).get(ERROR_CODE_META_KEY) and code != "STORAGE_ERROR"
    assert "time zone displacement out of range" in block_text(refused)
    assert "unavailable" not in block_text(refused) and "Traceback" not in block_text(refused)

    response = await post(member, "/api/search", {"query": "tea", "metadata_filters": metadata})
    assert 400 <= response.status_code < 500, response.text
    assert "retry-after" not in response.headers
    assert "STORAGE_ERROR" not in response.text and "Traceback" not in response.text
    # Nothing changed.
    assert await sync_to_async(lambda: list(collections.Memory.objects.values_list("id", "validity")))() == before
