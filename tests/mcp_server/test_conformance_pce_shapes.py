"""pce-memory MCP Tools Spec v0.1, the shapes of read answers: every claim a
search or an activation shows is the spec's `definitions.claim` (kind one of
four) with `evidences` of `definitions.evidence` (`at` a date-time), whichever
dialect stored it. A claim's kind and provenance are metadata, and another
dialect's metadata may hold anything under those keys (a LangGraph item's
attributes): that made the whole read fail (INTERNAL) or answer a kind the
spec does not have."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from mcp_server.dialects.pce import schemas
from tests.mcp_server.test_langmem_store_batch import send

pytestmark = pytest.mark.django_db(transaction=True)

AT = "2025-06-01T12:00:00Z"
NS = ["memories", "u-1"]
# LangGraph items whose attributes carry pce's metadata keys with other values.
HOSTILE_VALUES: list[dict[str, Any]] = [
    {"content": "billing runs nightly", "claim_kind": "banana", "provenance": "a string"},
    {"content": "billing runs weekly", "claim_kind": {"x": 1}, "provenance": {"at": 5, "git": "nope", "url": 3}},
    {"content": "billing runs daily", "provenance": ["x"]},
    {"content": "billing runs hourly", "provenance": {"at": "yesterday", "git": {"commit": ["abc1234"]}}},
    {"content": "billing runs monthly", "claim_kind": None, "provenance": None},
]


def _is_date_time(value: str) -> bool:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None


def _check_items(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for item in items:
        assert item["claim"]["kind"] in schemas.KINDS, item
        for evidence in item["evidences"]:
            if "at" in evidence:
                assert isinstance(evidence["at"], str) and _is_date_time(evidence["at"]), evidence
            if "source_id" in evidence:
                assert isinstance(evidence["source_id"], str), evidence
    return {item["claim"]["text"]: item for item in items}


async def test_reads_shape_claims_whose_metadata_another_dialect_wrote(member, mcp_client_for):
    ops = [{"op": "put", "namespace": NS, "key": f"k{n}", "value": v} for n, v in enumerate(HOSTILE_VALUES)]
    stored = await send(member, ops)
    assert stored.status_code == 200, stored.text[:300]
    async with mcp_client_for(member, "pce") as client:
        own = await client.call_tool(
            "pce.memory.upsert",
            {"text": "billing runs on the 1st", "provenance": {"at": AT, "git": {"commit": "abc1234"}}},
        )
        assert not own.is_error, own.content
        searched = await client.call_tool("pce.memory.search", {"query": "billing runs", "top_k": 50})
        activated = await client.call_tool("pce_memory_activate", {"q": "billing runs", "top_k": 50})
    for result in (searched, activated):
        assert not result.is_error, result.content[0].text[:500]
    search = searched.structured_content["data"]
    activate = activated.structured_content["data"]
    Draft202012Validator(schemas.SEARCH_RESPONSE).validate(search)
    Draft202012Validator(schemas.ACTIVATE_RESPONSE).validate(activate)
    for items in (search["items"], activate["claims"]):
        shown = _check_items(items)
        assert len(shown) == 6
        assert all(shown[v["content"]]["claim"]["kind"] == "fact" for v in HOSTILE_VALUES)
        # pce's own claim keeps its evidence whole.
        assert shown["billing runs on the 1st"]["evidences"][0]["at"] == AT
        assert shown["billing runs on the 1st"]["evidences"][0]["source_id"] == "abc1234"
        assert shown["billing runs hourly"]["evidences"][0].keys() == {"id", "source_type", "snippet"}
        assert shown["billing runs daily"]["evidences"] == [] and shown["billing runs nightly"]["evidences"] == []
    assert all(isinstance(p, dict) for p in activate["provenance"])
