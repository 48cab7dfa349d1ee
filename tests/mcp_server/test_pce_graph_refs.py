"""pce upsert relations whose ends name nothing: the refusal quotes a short
excerpt of the ref, never the client's whole value (a 60 KB src_id came back
whole in the error), and stores nothing."""

from __future__ import annotations

import pytest

from tests.mcp_server.test_write_inputs_hostile import AT, entity, refused

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("end", ["src_id", "dst_id"])
async def test_an_unknown_relation_end_is_quoted_short(member, mcp_client_for, end):
    relation = {"id": "r", "src_id": "e1", "dst_id": "e1", "type": "mentions", end: "x" * 60000}
    async with mcp_client_for(member, "pce") as client:
        text = await refused(
            client,
            "pce.memory.upsert",
            {"text": "a claim", "provenance": {"at": AT}, "entities": [entity()], "relations": [relation]},
            "INVALID_ARGUMENT",
        )
    assert "relation end" in text
    assert len(text) < 1000
    assert "x" * 200 not in text
