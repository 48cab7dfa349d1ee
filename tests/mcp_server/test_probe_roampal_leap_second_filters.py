"""roampal's date filters (created_at, timestamp, last_used in search_memory's
metadata and /api/search's metadata_filters) take an RFC 3339 leap second, as
the rest of memproj does (pce's provenance.at): ``23:59:60`` in the last minute
of a UTC day, in whatever offset it is written. Found through the MCP SDK
client: {"$lt": "2016-12-31T23:59:60Z"} was refused as no ISO date-time,
because datetime cannot hold second 60. The instant is PostgreSQL's reading of
it (the next day's 00:00:00 in UTC). A second 60 anywhere else stays refused.

The parsing lives in memory/selectors/collections.py (``_iso``); its cases
alone (no offset, fractions, the ends of Python's years) are in
tests/memory/selectors/test_iso_leap_second.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from asgiref.sync import sync_to_async

from mcp_server.dialect import ERROR_CODE_META_KEY
from memory import api
from memory.models import Memory
from tests.conftest import call

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = "Deploy window closed just before the leap second"
AFTER = "Deploy window opened just after the leap second"


def _store(caller: api.Caller) -> None:
    for text, when in (
        (BEFORE, datetime(2016, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC)),
        (AFTER, datetime(2017, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC)),
    ):
        memory = api.memory_bank_store(caller=caller, content=text)
        Memory.objects.filter(pk=memory.pk).update(created_at=when, occurred_at=when)


@pytest.mark.parametrize("leap", ["2016-12-31T23:59:60Z", "2016-12-31T18:59:60-05:00", "2016-12-31T23:59:60.5+00:00"])
async def test_a_leap_second_bounds_a_date_filter(member, mcp_client_for, leap):
    await sync_to_async(_store)(member.caller)
    async with mcp_client_for(member, "roampal") as client:
        before = await call(client, "search_memory", query="deploy window", metadata={"created_at": {"$lt": leap}})
        after = await call(client, "search_memory", query="deploy window", metadata={"created_at": {"$gte": leap}})
    assert [r["content"] for r in before["results"]] == [BEFORE]
    assert [r["content"] for r in after["results"]] == [AFTER]


@pytest.mark.parametrize("second_60", ["2016-12-31T12:00:60Z", "2016-12-31T23:59:60+01:00", "2016-12-31T23:59:61Z"])
async def test_a_second_60_outside_the_last_minute_of_a_utc_day_stays_refused(member, mcp_client_for, second_60):
    async with mcp_client_for(member, "roampal") as client:
        result = await client.call_tool(
            "search_memory", {"query": "deploy window", "metadata": {"created_at": {"$lt": second_60}}}
        )
    assert result.is_error
    assert (result.meta or {}).get(ERROR_CODE_META_KEY) == "INVALID_ARGUMENT"
