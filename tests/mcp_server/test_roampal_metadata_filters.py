"""roampal's ``metadata`` filter on its date fields, as roampal v0.3.5 reads
them (search_service.py: ``_extract_date_filters`` takes created_at,
timestamp and last_used out of the ChromaDB ``where`` and ``_apply_date_filters``
applies them; its tool description's example is ``created_at='2025-11-12'``):
a day (YYYY-MM-DD) is every instant of that day, another date-time string that
instant, and $gte/$gt/$lte/$lt bound it. Any other value there (``"2025"``, a
number, another operator) is refused with roampal's invalid argument and
changes nothing, rather than read as an equality on a metadata key that no
memory has. Through search_memory (by time and by meaning) and /api/search."""

from __future__ import annotations

import json
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client as DjangoClient
from django.utils import timezone

from mcp_server.dialect import ERROR_CODE_META_KEY
from memory import api
from memory.models import Memory, MemoryEvent
from tests.conftest import block_text, call

pytestmark = pytest.mark.django_db(transaction=True)

TEXTS = {
    "before": "Deploys to staging happen on Mondays",
    "first": "The deploy key is rotated every quarter",
    "noon": "Deploy logs are kept under /var/log/deploy",
    "last": "A rollback after a deploy needs a second approver",
    "after": "Deploy freezes start on the 20th of December",
}


def _day_start(days_ago: int) -> datetime:
    day = (timezone.now() - timedelta(days=days_ago)).astimezone(UTC).date()
    return datetime.combine(day, time(), tzinfo=UTC)


def _store(caller: Any, start: datetime) -> dict[str, str]:
    """One memory_bank entry per label, created around the day that begins at ``start``."""
    when = {
        "before": start - timedelta(microseconds=1),
        "first": start,
        "noon": start + timedelta(hours=12),
        "last": start + timedelta(days=1) - timedelta(microseconds=1),
        "after": start + timedelta(days=1),
    }
    ids = {}
    for label, text in TEXTS.items():
        memory = api.memory_bank_store(caller=caller, content=text)
        Memory.objects.filter(pk=memory.pk).update(created_at=when[label], occurred_at=when[label])
        ids[label] = api.display_id(memory)
    return ids


def _search(identity: Any, body: dict[str, Any]) -> Any:
    return DjangoClient().post(
        "/api/search",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {identity.token}",
    )


def _found(answer: dict[str, Any]) -> set[str]:
    return {r["id"] for r in answer["results"]}


async def test_a_day_finds_the_memories_of_that_day(member, mcp_client_for):
    start = _day_start(3)
    ids = await sync_to_async(_store)(member.caller, start)
    day = start.date().isoformat()
    async with mcp_client_for(member, "roampal") as client:
        by_time = await call(client, "search_memory", days_back=30, metadata={"created_at": day}, limit=20)
        by_meaning = await call(client, "search_memory", query="deploy", metadata={"created_at": day}, limit=20)
        # Upstream's other name of the field (history and patterns stored directly).
        by_alias = await call(client, "search_memory", days_back=30, metadata={"timestamp": day}, limit=20)
    hooked = await sync_to_async(_search)(member, {"query": "deploy", "metadata_filters": {"created_at": day}})
    that_day = {ids["first"], ids["noon"], ids["last"]}
    assert _found(by_time) == _found(by_meaning) == _found(by_alias) == that_day
    assert hooked.status_code == 200 and _found(hooked.json()) == that_day


async def test_a_date_time_finds_that_instant_and_ranges_still_bound(member, mcp_client_for):
    start = _day_start(3)
    ids = await sync_to_async(_store)(member.caller, start)
    async with mcp_client_for(member, "roampal") as client:
        everything = await call(client, "search_memory", days_back=30, limit=20)
        shown = {r["id"]: r["created_at"] for r in everything["results"]}
        # The created_at a result shows finds that memory.
        exact = await call(client, "search_memory", days_back=30, metadata={"created_at": shown[ids["noon"]]})
        ranged = await call(
            client,
            "search_memory",
            days_back=30,
            metadata={"created_at": {"$gte": start.isoformat(), "$lt": (start + timedelta(days=1)).isoformat()}},
            limit=20,
        )
    assert _found(exact) == {ids["noon"]}
    assert _found(ranged) == {ids["first"], ids["noon"], ids["last"]}


async def test_last_used_is_when_an_outcome_was_last_applied(member, mcp_client_for):
    start = _day_start(2)
    ids = await sync_to_async(_store)(member.caller, _day_start(5))
    found = await sync_to_async(api.collection_ids)(member.caller, [ids["noon"], ids["after"]])
    await Memory.objects.filter(pk=found[ids["noon"]].pk).aupdate(last_applied_at=start + timedelta(hours=9))
    await Memory.objects.filter(pk=found[ids["after"]].pk).aupdate(last_applied_at=start - timedelta(days=1))
    day = start.date().isoformat()
    async with mcp_client_for(member, "roampal") as client:
        on_the_day = await call(client, "search_memory", days_back=30, metadata={"last_used": day}, limit=20)
        since = await call(
            client, "search_memory", days_back=30, metadata={"last_used": {"$gte": start.isoformat()}}, limit=20
        )
    # Memories never used have no last_used: no date filter on it finds them.
    assert _found(on_the_day) == _found(since) == {ids["noon"]}


DATE_FILTER_REFUSAL = (
    "metadata.{key} takes a day (YYYY-MM-DD), an ISO date-time, or $gte/$gt/$lte/$lt with ISO dates or date-times."
)

REFUSED = [
    {"created_at": "2025"},
    {"created_at": "2025-11"},
    {"created_at": "yesterday"},
    {"created_at": "2025-02-30"},
    {"created_at": "20251112"},
    {"created_at": "２０２５-１１-１２"},
    {"created_at": 20251112},
    {"created_at": None},
    {"created_at": ["2025-11-12"]},
    {"created_at": {"$eq": "2025-11-12"}},
    {"created_at": {"$gte": 2025}},
    {"created_at": {"$gte": "2025"}},
    {"timestamp": "2025"},
    {"last_used": "2025"},
    {"last_used": {"$ne": "2025-11-12"}},
]


def _snapshot() -> tuple[list[Any], int]:
    return list(Memory.objects.order_by("pk").values()), MemoryEvent.objects.count()


@pytest.mark.parametrize("metadata", REFUSED, ids=[json.dumps(m, ensure_ascii=False) for m in REFUSED])
async def test_any_other_value_on_a_date_field_is_refused_and_changes_nothing(member, mcp_client_for, metadata):
    await sync_to_async(_store)(member.caller, _day_start(3))
    (key,) = metadata
    message = DATE_FILTER_REFUSAL.format(key=key)
    before = await sync_to_async(_snapshot)()
    async with mcp_client_for(member, "roampal") as client:
        by_time = await client.call_tool("search_memory", {"days_back": 30, "metadata": metadata})
        by_meaning = await client.call_tool("search_memory", {"query": "deploy", "metadata": metadata})
    hooked = await sync_to_async(_search)(member, {"query": "deploy", "metadata_filters": metadata})
    for result in (by_time, by_meaning):
        assert result.is_error, result.structured_content
        assert block_text(result) == f"Error: {message}" and len(result.content) == 1
        assert result.structured_content is None
        assert (result.meta or {}).get(ERROR_CODE_META_KEY) == "INVALID_ARGUMENT"
    assert hooked.status_code == 422 and hooked.json() == {"error": message, "code": "INVALID_ARGUMENT"}
    assert await sync_to_async(_snapshot)() == before


@pytest.mark.parametrize("metadata", [{"$where": "1"}, {"$or": [{"tags": "a"}, {"tags": "b"}]}, {"$and": []}])
async def test_an_operator_at_the_top_of_the_filter_is_refused_not_read_as_a_field(member, mcp_client_for, metadata):
    """ChromaDB's logical operators are not taken: refused, rather than read as
    a metadata field no memory has (which found nothing and said nothing)."""
    await sync_to_async(_store)(member.caller, _day_start(3))
    async with mcp_client_for(member, "roampal") as client:
        result = await client.call_tool("search_memory", {"query": "deploy", "metadata": metadata})
    hooked = await sync_to_async(_search)(member, {"query": "deploy", "metadata_filters": metadata})
    (key,) = metadata
    assert result.is_error and block_text(result).startswith("Error: metadata filter keys name metadata fields")
    assert repr(key) in block_text(result)
    assert hooked.status_code == 422 and hooked.json()["code"] == "INVALID_ARGUMENT"
