"""roampal v0.3.5 through the real MCP SDK: every tool, the display formats,
the id round trip, the normalized memory shape and roampal's texts."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from mcp_server.dialects.roampal import texts as roampal
from memory.models import Memory, MemoryEvent
from tests.conftest import call_error

pytestmark = pytest.mark.django_db(transaction=True)

ID = re.compile(r"\[id:([a-z_]+_[0-9a-f]{12})\]")


async def text_call(client, tool: str, **arguments):
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {result.content}"
    return result.content[0].text, result.structured_content


async def test_tool_list_and_seed_descriptions(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {
        "get_context_insights",
        "search_memory",
        "score_response",
        "score_memories",
        "record_response",
        "add_to_memory_bank",
        "update_memory",
        "delete_memory",
    }
    insights = tools["get_context_insights"].description
    assert insights.startswith("You have outcome-based persistent memory that learns across sessions.")
    assert "MEMORY HYGIENE (your responsibility):" in insights
    assert insights.index("YOUR ROLE:") < insights.index("MEMORY HYGIENE") < insights.index("WORKFLOW:")
    assert "score ≥0.9 + uses ≥3 + 5 proven successes → patterns (permanent)" in insights
    search = tools["search_memory"].description
    assert search.index("READING RESULTS:") < search.index("VERIFICATION USE:")
    score = tools["score_response"].description
    assert "FINDING MEMORY IDs:" in score and "You are the gardener. Pull the weeds." in score
    assert score.index("PER-MEMORY SCORING:") < score.index("ACTIVE MEMORY MANAGEMENT:") < score.index("CRITICAL")
    assert "STORAGE DISCIPLINE:" in tools["add_to_memory_bank"].description
    schema = tools["search_memory"].input_schema
    assert schema.get("required", []) == [] and schema["additionalProperties"] is False
    days = schema["properties"]["days_back"]
    assert "Can be used alone (no query needed)" in str(days)
    assert "patterns_abc123" in str(schema["properties"]["id"])


async def test_search_needs_query_days_back_or_id(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        assert await call_error(client, "search_memory") == "Error: Provide at least one of: query, days_back"
        assert "days_back must be <= 365" in await call_error(client, "search_memory", days_back=366)
        assert "limit must be <= 20" in await call_error(client, "search_memory", query="x", limit=21)
        assert "sort_by" in await call_error(client, "search_memory", query="x", sort_by="best")
        assert "unknown argument 'related'" in await call_error(client, "search_memory", query="x", related=["a"])


async def test_memory_bank_add_display_and_id_round_trip(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        text, out = await text_call(
            client,
            "add_to_memory_bank",
            content="User prefers direct communication style, concise answers.",
            tags=["preference"],
            importance=0.9,
            confidence=0.8,
        )
        ident = out["id"]
        assert re.fullmatch(r"memory_bank_[0-9a-f]{12}", ident)
        assert text == f"Added to memory bank (ID: {ident})"
        text, found = await text_call(client, "search_memory", query="how does the user like answers?")
        assert f"1. [memory_bank] (0m, imp:0.9, conf:0.8) [id:{ident}] User prefers direct" in text
        shape = found["results"][0]
        assert shape["id"] == ident and shape["collection"] == "memory_bank"
        assert shape["tags"] == ["preference"] and shape["importance"] == 0.9 and shape["confidence"] == 0.8
        assert {"embedding_similarity", "final_rank_score", "wilson_score", "outcome_history"} <= set(shape)
        # The [id:...] tag round-trips through search_memory(id=...).
        tag = ID.search(text)
        assert tag is not None, text
        tagged = tag.group(1)
        text, direct = await text_call(client, "search_memory", id=tagged)
        assert direct["count"] == 1 and direct["results"][0]["content"].startswith("User prefers direct")
        assert "embedding_similarity" not in direct["results"][0]
        _, missing = await text_call(client, "search_memory", id="patterns_000000000000")
        assert missing == {"count": 0, "results": []}
        # Not even an id's shape: nothing found, as upstream's lookup answers.
        _, nonsense = await text_call(client, "search_memory", id="nonsense!")
        assert nonsense == {"count": 0, "results": []}


async def test_record_response_stores_working_memory_at_07(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        text, out = await text_call(client, "record_response", key_takeaway="Wilson needs success_count and uses")
        assert text == "Recorded: Wilson needs success_count and uses"
        text, found = await text_call(client, "search_memory", days_back=1, collections=["working"])
    row = await Memory.objects.aget(content="Key takeaway: Wilson needs success_count and uses")
    assert (row.kind, row.collection, row.outcome_score) == ("episode", "working", 0.7)
    assert row.expires_at is not None
    assert abs((row.expires_at - row.created_at) - timedelta(hours=24)) < timedelta(seconds=5)
    assert f"1. [working] (0m, s:0.70, w:0.50, 0 uses) [id:{out['id']}] Key takeaway: Wilson" in text
    shape = found["results"][0]
    assert "importance" not in shape and shape["tags"] == [] and shape["wilson_score"] == 0.5


async def test_score_response_applies_each_delta_and_formats_history(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        _, a = await text_call(client, "record_response", key_takeaway="alpha")
        _, b = await text_call(client, "record_response", key_takeaway="beta")
        text, out = await text_call(
            client, "score_response", outcome="worked", memory_scores={a["id"]: "worked", b["id"]: "partial"}
        )
        assert text == "Scored (outcome=worked, 2 memories updated)"
        await text_call(client, "score_response", outcome="failed", memory_scores={b["id"]: "failed"})
        await text_call(client, "score_response", outcome="unknown", memory_scores={b["id"]: "unknown"})
        text, found = await text_call(client, "search_memory", id=b["id"])
    row_b = await Memory.objects.aget(content="Key takeaway: beta")
    # 0.7 + 0.05 - 0.3 + 0 (same day: scale 1); successes 0.5 + 0 + 0.25; uses 3.
    assert row_b.outcome_score == pytest.approx(0.45)
    assert (row_b.success_count, row_b.applied_count) == (0.75, 3)
    assert found["results"][0]["outcome_history"] == "[~N?]" and found["results"][0]["last_outcome"] == "unknown"
    assert "s:0.45, w:" in text and "3 uses, [~N?])" in text
    row_a = await Memory.objects.aget(content="Key takeaway: alpha")
    assert row_a.outcome_score == pytest.approx(0.9) and row_a.success_count == 1.0


async def test_scoring_promotes_working_to_history_and_resets_counters(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        _, a = await text_call(client, "record_response", key_takeaway="promote me")
        await text_call(client, "score_response", outcome="worked", memory_scores={a["id"]: "worked"})
        row = await Memory.objects.aget(content="Key takeaway: promote me")
        assert row.collection == "working"  # one use is not enough
        _, out = await text_call(client, "score_response", outcome="worked", memory_scores={a["id"]: "worked"})
        # The old id (working_...) still resolves: the hex part is the memory.
        text, found = await text_call(client, "search_memory", id=a["id"])
    row = await Memory.objects.aget(pk=row.pk)
    assert (row.collection, row.kind, row.applied_count, row.success_count) == ("history", "episode", 0, 0.0)
    assert row.expires_at is not None
    assert abs((row.expires_at - timezone.now()) - timedelta(days=30)) < timedelta(minutes=1)
    assert found["results"][0]["id"] == "history_" + row.id.hex[:12]
    assert await MemoryEvent.objects.filter(memory_id=row.pk, event_type="collection_changed").aexists()


async def test_books_are_not_scored(member, mcp_client_for):
    from memory import api

    chunk_ids = (await _ingest(member, "Reference: the deploy port is 8443.")).chunk_ids
    ident = "books_" + chunk_ids[0].hex[:12]
    async with mcp_client_for(member, "roampal") as client:
        _, out = await text_call(client, "score_response", outcome="worked", memory_scores={ident: "worked"})
        text, found = await text_call(client, "search_memory", query="deploy port", collections=["books"])
    assert out["skipped"] == [ident] and out["updated"] == 0
    assert text.startswith("Found 1 memories:\n\n1. [books] (0m) [id:books_")
    assert api.BOOK_MAX_BYTES == 10 * 1024 * 1024


async def _ingest(identity, text):
    from asgiref.sync import sync_to_async

    from memory import api

    return await sync_to_async(api.book_ingest)(caller=identity.caller, title="ref", text=text)


async def test_update_and_delete_memory_by_id_and_by_content(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        _, first = await text_call(client, "add_to_memory_bank", content="The staging server runs on port 8080")
        text, updated = await text_call(
            client, "update_memory", id=first["id"], new_content="The staging server runs on port 9090"
        )
        assert updated["id"] == first["id"] and text == f"Updated memory (ID: {first['id']})"  # in place, as upstream
        _, again = await text_call(
            client,
            "update_memory",
            old_content="staging server port",
            new_content="The staging server runs on port 7070",
        )
        assert again["id"] == first["id"]
        _, newer = await text_call(
            client, "update_memory", id=again["id"], content="The staging server runs on port 7070"
        )
        assert newer["id"] == first["id"]  # the newer upstream form: id + content
        text, deleted = await text_call(client, "delete_memory", content="The staging server runs on port 7070")
        assert deleted == {"id": newer["id"], "deleted": True}
        _, found = await text_call(client, "search_memory", query="staging server port")
        assert found["count"] == 0
        assert "Provide id or old_content" in await call_error(client, "update_memory", new_content="x")
        _, w = await text_call(client, "record_response", key_takeaway="working note")
        assert "memory_bank entries" in await call_error(client, "update_memory", id=w["id"], new_content="y")
        _, gone = await text_call(client, "delete_memory", id=w["id"])
    assert gone["deleted"] is True
    old = await Memory.objects.aget(content="The staging server runs on port 8080")
    assert old.validity == "superseded"
    assert (await Memory.objects.aget(content="Key takeaway: working note")).validity == "retracted"


async def test_score_memories_newer_form(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        _, a = await text_call(client, "record_response", key_takeaway="gamma")
        text, out = await text_call(
            client,
            "score_memories",
            memory_scores={a["id"]: "worked"},
            exchange_summary="Explained Wilson scoring",
            exchange_outcome="worked",
            noun_tags=["wilson"],
            facts=["User's project is called memproj"],
        )
    assert out["scored"] == {a["id"]: "worked"} and len(out["stored"]) == 2
    assert text.startswith("Scored (1 memories updated); stored working_")
    assert await Memory.objects.filter(collection="memory_bank", content="User's project is called memproj").aexists()
    summary = await Memory.objects.aget(content="Explained Wilson scoring")
    assert summary.collection == "working" and summary.tags == ["wilson"]


async def test_score_memories_without_an_exchange_outcome(member, mcp_client_for):
    """Only summaries and facts, no outcome (found by the isolation suite: the
    answer once failed the output schema and came back as an internal error)."""
    async with mcp_client_for(member, "roampal") as client:
        text, out = await text_call(client, "score_memories", memory_scores={}, facts=["User drinks tea"])
    assert text.startswith("Scored (0 memories updated); stored memory_bank_")
    assert "outcome" not in out and len(out["stored"]) == 1


async def test_get_context_insights_and_self_audit(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        for fact in ("User's name is Ada", "User codes in Rust", "User's editor is Helix"):
            await text_call(client, "add_to_memory_bank", content=fact, always_inject=True)
        await text_call(client, "record_response", key_takeaway="Ada's Rust build uses cargo nextest")
        text, out = await text_call(client, "get_context_insights", query="how does Ada run Rust tests?")
    assert text.startswith("Known Context for 'how does Ada run Rust tests?':")
    assert len(out["user_facts"]) == 3 and out["relevant_memories"][0]["content"].startswith("Key takeaway: Ada")
    assert out["self_audit"] is True and roampal.SELF_AUDIT in text
    assert re.search(r"• User's name is Ada \[id:memory_bank_[0-9a-f]{12}\] \(0m, memory_bank\)", text)


async def test_a_bidirectional_override_in_a_memory_cannot_reorder_the_id_tags_of_its_line(member, mcp_client_for):
    """U+202E (right-to-left override) in a memory's text would display the
    [id:...] tag after it reversed in KNOWN CONTEXT and in search results: the
    lines show the text without explicit bidirectional controls; the memory
    itself (its structured content) keeps what was stored."""
    stored = "User prefers tea \u202eeeffoc\u202c and \u2067biscuits\u2069"
    async with mcp_client_for(member, "roampal") as client:
        await text_call(client, "add_to_memory_bank", content=stored, always_inject=True)
        context, _ = await text_call(client, "get_context_insights", query="what does the user drink?")
        found, out = await text_call(client, "search_memory", query="tea")
    for text in (context, found):
        assert not any(0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069 for c in text), text
    assert "• User prefers tea eeffoc and biscuits [id:memory_bank_" in context, context
    assert re.search(r"\[id:memory_bank_[0-9a-f]{12}\] User prefers tea eeffoc and biscuits", found), found
    assert out["results"][0]["content"] == stored


async def test_days_back_window_and_sort_by_score(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        with time_machine.travel(timezone.now() - timedelta(days=10)):
            await text_call(client, "add_to_memory_bank", content="old fact about tea")
        _, low = await text_call(client, "record_response", key_takeaway="low")
        _, high = await text_call(client, "record_response", key_takeaway="high")
        await text_call(client, "score_response", outcome="failed", memory_scores={low["id"]: "failed"})
        _, recent = await text_call(client, "search_memory", days_back=3)
        _, by_score = await text_call(client, "search_memory", days_back=3, sort_by="score")
        _, wide = await text_call(client, "search_memory", days_back=30, collections=["memory_bank"])
    assert [r["id"] for r in recent["results"]] == [high["id"], low["id"]]
    assert [r["id"] for r in by_score["results"]] == [high["id"], low["id"]]
    assert by_score["results"][1]["score"] == pytest.approx(0.4)
    assert [r["content"] for r in wide["results"]] == ["old fact about tea"]
