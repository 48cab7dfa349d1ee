"""roampal v0.3.5's MCP tools against its release notes, read literally, and
against upstream's code where the notes are silent (each test says which).

- The system overview's lifecycle names the patterns criterion ``uses ≥3``
  (the notes' audit fix: "Added `uses ≥3` to lifecycle description").
- ``NN% proven`` in a KNOWN CONTEXT line is the Wilson lower bound, shown from
  0.7 (upstream's ``get_context_for_injection``): the notes call Wilson the
  measure of "more proven useful"; a memory scored once is not proven.
- The KNOWN CONTEXT preamble comes before the block ("The context below..."),
  whose header is followed by the memories, as every example in the notes has it.
- A memory's ``created_at`` and ``age`` are the time ``days_back`` and the
  ``created_at`` filter select on and recency sorts by.
- Ages past a month read in months and past a year in years (upstream's
  ``_humanize_age``).
- get_context_insights refuses an empty query (upstream: "'query' is required").
- score_response applies one outcome to a memory however many of its ids the
  model names (the prefix a scoring prompt listed and the one it has after a
  promotion, its UUID), the exchange's outcome included.
- The tools the notes do not rewrite keep upstream's descriptions, the notes'
  additions "after the existing ALWAYS_INJECT and SIZE GUIDANCE sections"
  included, and the parameters upstream's words."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.test import Client as DjangoClient
from django.utils import timezone

from mcp_server.dialects.roampal import texts
from memory.models import Memory
from tests.conftest import call_error

pytestmark = pytest.mark.django_db(transaction=True)


async def text_call(client, tool: str, **arguments):
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {result.content}"
    return result.content[0].text, result.structured_content


def post(identity, path: str, body: object):
    return DjangoClient().post(
        path, data=json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {identity.token}"
    )


# --- Feature 3 / Feature 5: the system overview ---------------------------------------------------


async def test_the_lifecycle_names_uses_at_least_3_for_patterns(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    overview = tools["get_context_insights"].description
    line = (
        "• working (new, 24h) → score ≥0.7 + 2 uses → history (30d) → score ≥0.9 + uses ≥3 + 5 proven successes "
        "→ patterns (permanent)"
    )
    assert line in overview.splitlines()


# --- Feature 1: the KNOWN CONTEXT line's "NN% proven" ---------------------------------------------


async def test_proven_is_the_wilson_lower_bound_from_70_percent(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        _, once = await text_call(client, "record_response", key_takeaway="Deploys run through make release")
        _, tried = await text_call(client, "record_response", key_takeaway="Deploys need a signed release tag")
        await text_call(client, "score_response", outcome="unknown", memory_scores={once["id"]: "worked"})
        # Wilson(10, 10) = 0.7225: proven; Wilson(6, 10) = 0.3127: used often, not proven.
        await Memory.objects.filter(content="Key takeaway: Deploys need a signed release tag").aupdate(
            applied_count=10, success_count=10.0, outcome_score=0.95
        )
        text, _ = await text_call(client, "get_context_insights", query="how do deploys run?")
        await Memory.objects.filter(content="Key takeaway: Deploys need a signed release tag").aupdate(
            success_count=6.0
        )
        later, _ = await text_call(client, "get_context_insights", query="how do deploys run?")
    # Scored worked once: score 0.9, Wilson 0.2065, not "90% proven".
    assert f"[id:{once['id']}] (0m, working)" in text, text
    assert f"[id:{tried['id']}] (0m, 72% proven, working)" in text, text
    assert f"[id:{tried['id']}] (0m, working)" in later, later


# --- Feature 1 / Feature 4: the block -------------------------------------------------------------


def test_the_preamble_comes_before_the_known_context_block(member):
    post(member, "/api/hooks/get-context", {"query": "q", "conversation_id": "c"})
    from memory import api

    fact = api.memory_bank_store(caller=member.caller, content="User deploys with make release", always_inject=True)
    answer = post(member, "/api/hooks/get-context", {"query": "how to deploy", "conversation_id": "c"}).json()
    expected = (
        texts.PREAMBLE
        + "\n\n═══ KNOWN CONTEXT ═══\n"
        + f"• User deploys with make release [id:{api.display_id(fact)}] (0m, memory_bank)\n"
        + "═══ END CONTEXT ═══"
    )
    assert answer["context_only"] == expected
    assert answer["formatted_injection"] == expected


# --- Feature 2: created_at and age are the time days_back selects on ------------------------------


async def test_created_at_and_age_are_the_time_days_back_filters_on(member, mcp_client_for):
    """A memory dated when it happened (an import keeps upstream's created_at;
    a butlers fact its valid_at) shows that date, the one days_back and the
    created_at filter select on, not when the row was written."""
    async with mcp_client_for(member, "roampal") as client:
        _, note = await text_call(client, "record_response", key_takeaway="The release train leaves on Tuesdays")
        happened = timezone.now() - timedelta(days=10)
        await Memory.objects.filter(content__endswith="leaves on Tuesdays").aupdate(occurred_at=happened)
        _, recent = await text_call(client, "search_memory", days_back=3)
        text, wide = await text_call(client, "search_memory", days_back=30)
        _, by_filter = await text_call(
            client, "search_memory", query="release train", metadata={"created_at": happened.date().isoformat()}
        )
        context, _ = await text_call(client, "get_context_insights", query="when does the release train leave?")
    assert recent["count"] == 0
    shown = wide["results"][0]
    assert shown["id"] == note["id"] and shown["age"] == "10d"
    assert shown["created_at"] == happened.isoformat()
    assert f"1. [working] (10d, s:0.70, w:0.50, 0 uses) [id:{note['id']}]" in text
    assert by_filter["results"][0]["created_at"] == happened.isoformat()
    assert f"[id:{note['id']}] (10d, working)" in context


# --- ages: months and years (upstream _humanize_age) ----------------------------------------------


@pytest.mark.parametrize(
    ("days", "shown"), [(30, "30d"), (31, "1mo"), (45, "1mo"), (365, "12mo"), (366, "1y"), (800, "2y")]
)
def test_ages_past_a_month_read_in_months_and_past_a_year_in_years(days, shown):
    now = timezone.now()
    assert texts.age(now - timedelta(days=days, minutes=1), now) == shown


async def test_an_old_memory_bank_fact_shows_its_age_in_years(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        with time_machine.travel(timezone.now() - timedelta(days=400)):
            _, fact = await text_call(client, "add_to_memory_bank", content="User's first language is Portuguese")
        text, found = await text_call(client, "search_memory", query="first language Portuguese")
    assert found["results"][0]["age"] == "1y"
    assert f"1. [memory_bank] (1y, imp:0.7, conf:0.7) [id:{fact['id']}]" in text


# --- get_context_insights: a query is required ----------------------------------------------------


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
async def test_get_context_insights_refuses_an_empty_query(member, mcp_client_for, query):
    async with mcp_client_for(member, "roampal") as client:
        await text_call(client, "add_to_memory_bank", content="User's name is Ada", always_inject=True)
        assert await call_error(client, "get_context_insights", query=query) == "Error: 'query' is required"
        text, _ = await text_call(client, "get_context_insights", query="who am I?")
    assert re.search(r"• User's name is Ada \[id:memory_bank_[0-9a-f]{12}\] \(0m, memory_bank\)", text)


# --- score_response: one outcome per memory -------------------------------------------------------


async def test_one_outcome_per_memory_whatever_ids_name_it(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        _, note = await text_call(client, "record_response", key_takeaway="Staging deploys need VPN access")
        row = await Memory.objects.aget(content="Key takeaway: Staging deploys need VPN access")
        names = {
            note["id"]: "worked",
            "history_" + note["id"].removeprefix("working_"): "worked",  # its id once promoted
            str(row.id): "failed",
            "working_" + row.id.hex: "partial",
        }
        text, out = await text_call(client, "score_response", outcome="unknown", memory_scores=names)
    row = await Memory.objects.aget(pk=row.pk)
    assert (row.applied_count, row.success_count, round(row.outcome_score, 4)) == (1, 1.0, 0.9)
    assert out["scored"] == {note["id"]: "worked"} and out["skipped"] == list(names)[1:]
    assert text == "Scored (outcome=unknown, 1 memories updated)" and out["updated"] == 1


async def test_the_exchange_outcome_skips_the_exchange_scored_under_another_id(member, mcp_client_for):
    stop = {"conversation_id": "c", "user_message": "port?", "assistant_response": "8443"}
    await sync_to_async(post)(member, "/api/hooks/stop", stop)
    await sync_to_async(post)(member, "/api/hooks/get-context", {"query": "thanks", "conversation_id": "c"})
    exchange = await Memory.objects.aget(content__startswith="User: port?")
    async with mcp_client_for(member, "roampal") as client:
        _, out = await text_call(
            client, "score_response", outcome="worked", memory_scores={"working_" + exchange.id.hex: "failed"}
        )
    exchange = await Memory.objects.aget(pk=exchange.pk)
    assert exchange.applied_count == 1 and exchange.success_count == 0.0  # the model's "failed" only
    assert out["updated"] == 1


# --- the notes' texts, word for word (held before this audit; no test pinned them) ---------------

SEED_LEAN_PROMPT = """<roampal-score-required>
Score the previous exchange before responding.

Look at your previous response and the user's follow-up below.
The memories injected last turn had IDs shown in [id:...] tags in KNOWN CONTEXT.

Score each memory:

Call score_response(
    outcome="worked|failed|partial|unknown",
    memory_scores={
        "{doc_id_1}": "___",
        "{doc_id_2}": "___",
        "{doc_id_3}": "___"
    }
)

SCORING GUIDE:
• worked = this memory was helpful
• partial = somewhat helpful
• unknown = didn't use this memory
• failed = this memory was MISLEADING

You MUST score every memory listed above.
</roampal-score-required>"""

SEED_SIMPLE_PROMPT = """<roampal-score-required>
Score the memories listed in SCORING REFERENCE above.

Call score_response(
    outcome="worked|failed|partial|unknown",
    memory_scores={
        "patterns_abc123": "___",
        "history_def456": "___"
    }
)
</roampal-score-required>"""

SEED_PREAMBLE = (
    "You have persistent memory about this user via Roampal. Scored memories include Wilson confidence and outcome "
    "history. [id:...] tags can be looked up with search_memory(id=...). Memories may be outdated or wrong. Verify "
    "before treating as ground truth. The context below was retrieved from past conversations. If the user "
    "references past interactions or asks if you remember them, use this context — you DO remember."
)

SEED_SELF_AUDIT = """SELF-AUDIT: Review any memory_bank items in KNOWN CONTEXT.
If any look outdated, wrong, or redundant, use update_memory or
delete_memory to clean them up. Good assistants maintain their own memory."""


def test_the_scoring_prompts_preamble_and_self_audit_are_the_notes_words():
    assert texts.scoring_prompt(["{doc_id_1}", "{doc_id_2}", "{doc_id_3}"]) == SEED_LEAN_PROMPT
    assert texts.scoring_prompt_simple(["patterns_abc123", "history_def456"]) == SEED_SIMPLE_PROMPT
    assert texts.PREAMBLE == SEED_PREAMBLE
    assert texts.SELF_AUDIT == SEED_SELF_AUDIT
    # The OpenCode scoring reference's content hint: 30 characters.
    assert texts.content_hint("User prefers direct communication style") == "User prefers direct communicat..."


async def test_the_self_audit_text_closes_the_answer_when_it_is_due(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        for fact in ("User's name is Ada", "User codes in Rust", "User's editor is Helix"):
            await text_call(client, "add_to_memory_bank", content=fact, always_inject=True)
        text, out = await text_call(client, "get_context_insights", query="what editor does Ada use?")
    assert out["self_audit"] is True and text.endswith("\n\n" + SEED_SELF_AUDIT)


# --- where the notes are silent: upstream's descriptions ------------------------------------------

UPSTREAM_PARAMETERS = {
    ("get_context_insights", "query"): "Query/topic you're considering (use user's exact words)",
    ("search_memory", "query"): "Search query - use the users EXACT words/phrases, do NOT simplify or extract keywords",
    ("search_memory", "days_back"): (
        "Only return memories from the last N days. Can be used alone (no query needed) or combined with a "
        "semantic query."
    ),
    ("search_memory", "id"): (
        "Look up a specific memory by its doc_id (e.g., 'patterns_abc123'). Returns the full memory with all "
        "metadata. Bypasses semantic search."
    ),
    ("search_memory", "collections"): (
        "Which collections to search. Omit for auto-routing (recommended). Manual: books, working, history, "
        "patterns, memory_bank"
    ),
    ("search_memory", "limit"): "Number of results (1-20)",
    ("add_to_memory_bank", "content"): "The fact to remember",
    ("add_to_memory_bank", "tags"): "Categories: identity, preference, goal, project, system_mastery, agent_growth",
    ("add_to_memory_bank", "importance"): "How critical (0.0-1.0)",
    ("add_to_memory_bank", "confidence"): "How certain (0.0-1.0)",
    (
        "add_to_memory_bank",
        "always_inject",
    ): "If true, this memory appears in EVERY context (use for core identity only)",
    ("update_memory", "old_content"): "Old/incorrect fact to find",
    ("update_memory", "new_content"): "Corrected/updated fact",
    ("delete_memory", "content"): "Memory to delete (semantic match)",
    ("score_response", "outcome"): "Exchange outcome based on user's reaction",
    ("score_response", "memory_scores"): (
        "Score for each memory: doc_id -> outcome. MUST include all cached memories. MAY include extras from context."
    ),
    ("record_response", "key_takeaway"): "1-2 sentence summary of the important learning",
}


async def test_parameters_and_descriptions_the_notes_leave_as_they_were(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    described = {
        (name, parameter): tools[name].input_schema["properties"][parameter].get("description")
        for name, parameter in UPSTREAM_PARAMETERS
    }
    assert described == UPSTREAM_PARAMETERS
    bank = tools["add_to_memory_bank"].description
    assert bank.startswith("Store PERMANENT facts that help maintain continuity across sessions.")
    sections = ["WHAT BELONGS HERE:", "TAG MEANINGS:", "ALWAYS_INJECT:", "SIZE GUIDANCE:", "STORAGE DISCIPLINE:"]
    assert [bank.index(s) for s in sections] == sorted(bank.index(s) for s in sections)
    assert "• identity - name, role, background (REQUIRED for cold start detection)" in bank.splitlines()
    record = tools["record_response"].description
    assert record.startswith("Store a key takeaway when the transcript alone won't capture important learning.")
    assert record.endswith(
        "Scoring happens via score_response on the next turn: +0.2 worked, +0.05 partial, -0.3 failed."
    )
    assert tools["update_memory"].description.startswith(
        "Update existing memory when information changes or needs correction.\n\nWHEN TO USE:"
    )
    assert tools["delete_memory"].description.startswith("Delete outdated/irrelevant memories from memory_bank.")
