"""Roampal answers as its clients expect them (roampal v0.3.5's hook server and
MCP tools), tried as a client would: the tools through a real MCP client, the
hook server through Django's test client.

- get-context's ``context_only`` is the KNOWN CONTEXT text without the scoring
  prompt (the OpenCode plugin puts it in the system prompt), not a flag.
- update_memory updates in place as far as a client can tell: the id it holds
  keeps naming the memory (update, delete, score, search by id), while the core
  keeps the previous text as a superseded version.
- /api/search with an id that names no memory answers an empty result.
- /api/ingest takes JSON content up to 10 MB (and upstream's other JSON
  fields), 413 above.
- A keyed fact stored through another dialect shows with its subject and
  predicate, not as a bare word."""

from __future__ import annotations

import json
import re

import pytest
from asgiref.sync import sync_to_async
from django.test import Client as DjangoClient

from memory import api
from memory.models import Memory
from tests.conftest import call

pytestmark = pytest.mark.django_db(transaction=True)

ID = re.compile(r"\[id:([a-z_]+_[0-9a-f]{12})\]")


def post(identity, path: str, body: object, **extra):
    raw = body if isinstance(body, (bytes, str)) else json.dumps(body, ensure_ascii=False)
    return DjangoClient().post(
        path, data=raw, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {identity.token}", **extra
    )


async def text_call(client, tool: str, **arguments):
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {result.content}"
    return result.content[0].text, result.structured_content


# --- get-context: context_only ---------------------------------------------------------------------


def test_context_only_is_the_known_context_block_without_the_scoring_prompt(member):
    empty = post(member, "/api/hooks/get-context", {"query": "anything", "conversation_id": "c"}).json()
    assert empty["context_only"] == "" and empty["formatted_injection"] == ""
    fact = api.memory_bank_store(caller=member.caller, content="User deploys with make release", always_inject=True)
    fid = api.display_id(fact)
    first = post(member, "/api/hooks/get-context", {"query": "how to deploy", "conversation_id": "c"}).json()
    assert isinstance(first["context_only"], str)
    assert first["context_only"].startswith("You have persistent memory about this user")
    assert "you DO remember.\n\n═══ KNOWN CONTEXT ═══\n• " in first["context_only"]
    assert first["context_only"].endswith("═══ END CONTEXT ═══")
    assert f"• User deploys with make release [id:{fid}] (0m, memory_bank)" in first["context_only"]
    assert first["context_only"] == first["formatted_injection"]  # no scoring turn: the same text
    post(member, "/api/hooks/stop", {"conversation_id": "c", "user_message": "how?", "assistant_response": "make"})
    second = post(member, "/api/hooks/get-context", {"query": "deploy again", "conversation_id": "c"}).json()
    assert second["scoring_required"] is True and second["scoring_prompt"]
    context = second["context_only"]
    assert context.startswith("You have persistent memory") and "<roampal-score-required>" not in context
    assert second["formatted_injection"] == second["scoring_prompt"] + "\n\n" + context


# --- update_memory keeps the id the client holds --------------------------------------------------


async def test_update_memory_keeps_the_id_for_every_tool(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        text, added = await text_call(client, "add_to_memory_bank", content="The staging server runs on port 8080")
        held = added["id"]
        text, updated = await text_call(client, "update_memory", id=held, new_content="Staging runs on port 9090")
        assert text == f"Updated memory (ID: {held})" and updated["id"] == held
        text, found = await text_call(client, "search_memory", id=held)
        assert found["count"] == 1 and found["results"][0]["id"] == held
        assert found["results"][0]["content"] == "Staging runs on port 9090"
        _, by_query = await text_call(client, "search_memory", query="staging port", collections=["memory_bank"])
        assert [r["id"] for r in by_query["results"]] == [held]
        context, _ = await text_call(client, "get_context_insights", query="staging port")
        assert f"[id:{held}]" in context
        # The newer upstream form (id + content) with the same id, twice.
        _, again = await text_call(client, "update_memory", id=held, content="Staging runs on port 7070")
        assert again["id"] == held
        scored = await call(client, "score_memories", memory_scores={held: "worked"})
        assert scored["scored"] == {held: "worked"} and scored["skipped"] == []
        scored = await call(client, "score_response", outcome="worked", memory_scores={held: "partial"})
        assert scored["scored"] == {held: "partial"}
        _, deleted = await text_call(client, "delete_memory", id=held)
        assert deleted == {"id": held, "deleted": True}
        _, gone = await text_call(client, "search_memory", id=held)
        assert gone["count"] == 0
    # The history is the core's: each earlier text is a superseded version pointing at the next.
    versions = [m async for m in Memory.objects.filter(collection="memory_bank").order_by("created_at")]
    assert [m.content for m in versions] == [
        "The staging server runs on port 8080",
        "Staging runs on port 9090",
        "Staging runs on port 7070",
    ]
    assert [m.validity for m in versions] == ["superseded", "superseded", "retracted"]
    assert versions[0].superseded_by_id == versions[1].id and versions[1].superseded_by_id == versions[2].id
    assert versions[2].applied_count == 2  # both scorings reached the current version


async def test_an_id_cached_before_an_update_by_content_still_resolves(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        _, added = await text_call(client, "add_to_memory_bank", content="User's editor is vim")
        _, updated = await text_call(client, "update_memory", old_content="User's editor is vim", new_content="nvim")
        assert updated["id"] == added["id"]
        hit = (await sync_to_async(post)(member, "/api/search", {"id": added["id"]})).json()
        assert hit["count"] == 1 and hit["results"][0]["content"] == "nvim" and hit["results"][0]["id"] == added["id"]


def test_a_pending_scoring_names_the_memory_by_the_id_the_model_saw(member):
    fact = api.memory_bank_store(caller=member.caller, content="User's shell is zsh", always_inject=True)
    held = api.display_id(fact)
    post(member, "/api/hooks/get-context", {"query": "shell", "conversation_id": "s"})
    post(member, "/api/hooks/stop", {"conversation_id": "s", "user_message": "shell?", "assistant_response": "zsh"})
    api.memory_bank_update(caller=member.caller, memory_id=fact.id, content="User's shell is fish")
    turn = post(member, "/api/hooks/get-context", {"query": "thanks", "conversation_id": "s"}).json()
    assert (
        turn["scoring_memories"][0]["id"] == held and turn["scoring_memories"][0]["content"] == "User's shell is fish"
    )
    assert f'"{held}": "___"' in turn["scoring_prompt"]


# --- /api/search with an unknown id -----------------------------------------------------------------


@pytest.mark.parametrize("ident", ["nope", "memory_bank_zzzzzzzz", "memory_bank_0123abcd", "x" * 200])
def test_search_by_an_id_that_is_no_memory_is_an_empty_result(member, ident):
    answer = post(member, "/api/search", {"id": ident})
    assert answer.status_code == 200 and answer.json()["count"] == 0 and answer.json()["results"] == []


async def test_search_memory_tool_by_an_unknown_id_finds_nothing(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        text, found = await text_call(client, "search_memory", id="nope")
    assert text == "No memories found." and found == {"count": 0, "results": []}


# --- /api/ingest: 10 MB of JSON content, upstream's fields ------------------------------------------


def test_ingest_json_content_up_to_ten_megabytes_and_413_above(member, monkeypatch):
    # Storing a few hundred chunks takes a minute with the eager worker; the
    # storage itself is the books tests'. Here: what reaches it, and what not.
    received: list[int] = []

    def book_ingest(*, caller, title, text, **_):
        received.append(len(text))
        return api.BookIngestResult(title=title)

    monkeypatch.setattr(api, "book_ingest", book_ingest)
    ten_megabytes = "x" * api.BOOK_MAX_BYTES
    assert post(member, "/api/ingest", {"title": "big", "content": ten_megabytes}).status_code == 202
    over_old_limit = "é" * 2_097_153
    assert post(member, "/api/ingest", {"title": "big", "content": over_old_limit}).status_code == 202
    assert received == [api.BOOK_MAX_BYTES, 2_097_153]
    # 10 MB counted in UTF-8: two-byte characters, fewer than 10 M of them.
    too_big = post(member, "/api/ingest", {"title": "huge", "content": "é" * (api.BOOK_MAX_BYTES // 2 + 1)})
    assert too_big.status_code == 413 and too_big.json()["code"] == "PAYLOAD_TOO_LARGE"
    one_more = post(member, "/api/ingest", {"title": "huge", "content": ten_megabytes + "x"})
    assert one_more.status_code == 413 and one_more.json()["code"] == "PAYLOAD_TOO_LARGE"
    assert len(received) == 2


def test_ingest_takes_upstream_json_fields(member):
    answer = post(
        member,
        "/api/ingest",
        {
            "content": "# Notes\n\nThe build host is ci-3.\n\n## More\n\nIt restarts nightly.",
            "source": "/home/user/notes.md",
            "chunk_size": 1000,
            "chunk_overlap": 200,
        },
    )
    assert answer.status_code == 202, answer.content
    body = answer.json()
    assert body["success"] is True and body["title"] == "Untitled" and body["chunks"] == len(body["doc_ids"]) == 2
    chunk = Memory.objects.filter(collection="books").order_by("created_at").first()
    assert chunk is not None
    assert chunk.metadata["title"] == "Untitled" and chunk.metadata["source"] == "/home/user/notes.md"
    assert post(member, "/api/ingest", {"content": ""}).status_code == 422


# --- A keyed fact from another dialect shows with its key -------------------------------------------


async def test_a_keyed_fact_shows_with_subject_and_predicate(member, mcp_client_for):
    async with mcp_client_for(member, "memory") as client:
        await call(client, "memory_store_fact", subject="user", predicate="city", content="Austin")
    async with mcp_client_for(member, "roampal") as client:
        text, listed = await text_call(client, "search_memory", days_back=1)
        assert listed["results"][0]["content"] == "user city: Austin"
        assert text.endswith("user city: Austin")
        text, found = await text_call(client, "search_memory", query="Austin")
        assert found["results"][0]["content"] == "user city: Austin"
        context, structured = await text_call(client, "get_context_insights", query="Austin")
        assert "• user city: Austin [id:memory_bank_" in context
        assert structured["user_facts"][0]["content"] == "user city: Austin"
        # roampal's own memory_bank entries stay bare text.
        await text_call(client, "add_to_memory_bank", content="User likes tacos")
        _, own = await text_call(client, "search_memory", query="tacos", collections=["memory_bank"])
        assert "User likes tacos" in [r["content"] for r in own["results"]]
    hook = (
        await sync_to_async(post)(member, "/api/hooks/get-context", {"query": "Austin", "conversation_id": "k"})
    ).json()
    assert "• user city: Austin [id:" in hook["context_only"]
    assert hook["user_facts"][0]["content"] == "user city: Austin"
    listed = (await sync_to_async(post)(member, "/api/search", {"days_back": 1})).json()
    assert "user city: Austin" in [r["content"] for r in listed["results"]]
