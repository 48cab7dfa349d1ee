"""pce-memory MCP Tools Spec v0.1, 2.2: "ordered by score descending (ties by
created_at descending)", as a client reads the answer. Two claims whose
scores differ below the places a score was shown at read as a tie, and were
ordered by the hidden digits: the older first."""

from __future__ import annotations

import pytest

from memory.models import Memory

pytestmark = pytest.mark.django_db(transaction=True)

AT = "2025-06-01T12:00:00Z"


def _in_spec_order(items: list[dict]) -> bool:
    keys = [(item["score"], item["claim"]["created_at"]) for item in items]
    return all(a[0] > b[0] or (a[0] == b[0] and a[1] >= b[1]) for a, b in zip(keys, keys[1:], strict=False))


@pytest.mark.real_embedder
async def test_shown_scores_are_ordered_as_the_spec_orders_them(member, mcp_client_for):
    async with mcp_client_for(member, "pce") as client:
        ids = []
        # The same words in another case: one vector, one keyword score.
        for text in ("Deploys run on Friday", "deploys run on friday"):
            stored = await client.call_tool("pce.memory.upsert", {"text": text, "provenance": {"at": AT}})
            assert not stored.is_error, stored.content
            ids.append(stored.structured_content["data"]["id"])
        # The older claim's utility a hair higher: its score is higher below six places.
        await Memory.objects.filter(pk=ids[0].removeprefix("clm_")).aupdate(utility=1e-6)
        searched = await client.call_tool("pce.memory.search", {"query": "deploys friday", "include_meta": True})
        activated = await client.call_tool("pce.memory.activate", {"q": "deploys friday", "include_meta": True})
    search = searched.structured_content["data"]["items"]
    claims = activated.structured_content["data"]["claims"]
    for items in (search, claims):
        assert [i["claim"]["id"] for i in items] == ids, items
        assert items[0]["scores"]["combined"] == items[1]["scores"]["combined"]
        assert _in_spec_order(items), [(i["score"], i["claim"]["created_at"]) for i in items]
