"""roampal's metadata filter (search_memory's ``metadata``, /api/search's
``metadata_filters``) sets at most ``MAX_METADATA_KEYS`` keys. Each key is a
condition the read builds and the database tests; within the filter's JSON
size limit (64 KB) a client could name thousands of fields no memory has, and
every search by time or meaning built and ran them all. Over the bound the
call is refused, coded, in roampal's words, the same over MCP and HTTP, before
anything is read; at the bound it runs."""

from __future__ import annotations

import re
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mcp_server.dialect import ERROR_CODE_META_KEY
from mcp_server.dialects.roampal import tools as roampal
from memory import api
from tests.conftest import block_text
from tests.mcp_server.test_roampal_metadata_filters import _search

pytestmark = pytest.mark.django_db(transaction=True)

REFUSAL = f"metadata allows at most {roampal.MAX_METADATA_KEYS} entries."


def keys(count: int) -> dict[str, Any]:
    return {f"field{i}": True for i in range(count)}


@pytest.mark.parametrize("count", [roampal.MAX_METADATA_KEYS + 1, 3000])
async def test_a_filter_over_the_key_bound_is_refused_in_roampals_words(member, mcp_client_for, count):
    await sync_to_async(api.memory_bank_store)(caller=member.caller, content="The deploy key rotates quarterly")
    metadata = keys(count)
    async with mcp_client_for(member, "roampal") as client:
        results = [
            await client.call_tool("search_memory", {"days_back": 30, "metadata": metadata}),
            await client.call_tool("search_memory", {"query": "deploy", "metadata": metadata}),
            # An id lookup ignores the filter, but a filter over the bound is refused all the same.
            await client.call_tool("search_memory", {"id": "memory_bank_0", "metadata": metadata}),
        ]
    for result in results:
        assert result.is_error, result.structured_content
        assert block_text(result) == f"Error: {REFUSAL}" and len(result.content) == 1
        assert result.structured_content is None
        assert (result.meta or {}).get(ERROR_CODE_META_KEY) == "INVALID_ARGUMENT"
    for body in ({"days_back": 30}, {"query": "deploy"}):
        hooked = await sync_to_async(_search)(member, {**body, "metadata_filters": metadata})
        assert hooked.status_code == 422
        assert hooked.json() == {"error": REFUSAL, "code": "INVALID_ARGUMENT"}


def test_over_the_bound_no_memory_is_read(member):
    """The bound is checked before the filter is read: no statement on the memories runs."""
    with CaptureQueriesContext(connection) as queries, pytest.raises(api.InvalidArgument, match=re.escape(REFUSAL)):
        roampal.find(
            member.caller,
            query="deploy",
            days_back=30,
            id=None,
            collections=None,
            metadata=keys(roampal.MAX_METADATA_KEYS + 1),
            sort_by=None,
            limit=5,
            now=timezone.now(),
        )
    assert not [q for q in queries if "memory_memory" in q["sql"]]


async def test_a_filter_at_the_bound_runs(member, mcp_client_for):
    stored = await sync_to_async(api.memory_bank_store)(
        caller=member.caller, content="The deploy key rotates quarterly", tags=["ops"]
    )
    metadata = {**keys(roampal.MAX_METADATA_KEYS - 1), "tags": "ops"}
    async with mcp_client_for(member, "roampal") as client:
        result = await client.call_tool("search_memory", {"query": "deploy", "metadata": metadata})
        schema = next(t for t in (await client.list_tools()).tools if t.name == "search_memory").input_schema
    assert not result.is_error, block_text(result)
    # No memory has the fields named: nothing found, and nothing refused.
    assert result.structured_content == {"count": 0, "results": []}
    hooked = await sync_to_async(_search)(member, {"query": "deploy", "metadata_filters": {"tags": "ops"}})
    assert hooked.status_code == 200 and hooked.json()["count"] == 1, hooked.json()
    assert hooked.json()["results"][0]["id"] == await sync_to_async(api.display_id)(stored)
    # The schema says so too.
    assert schema["properties"]["metadata"]["anyOf"][0]["maxProperties"] == roampal.MAX_METADATA_KEYS
