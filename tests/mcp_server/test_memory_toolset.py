"""Every scenario of the memory dialect, through the real MCP SDK (in-process client)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from memory.models import Memory, MemoryEvent
from memory.scoring import rule_effectiveness
from tests.conftest import call, call_error

pytestmark = pytest.mark.django_db(transaction=True)


async def test_store_episode_with_defaults(member, mcp_client_for):
    before = timezone.now()
    async with mcp_client_for(member) as client:
        out = await call(client, "memory_store_episode", content="User asked about recipes", butler="general")
    episode = await Memory.objects.aget(pk=out["id"])
    assert (episode.kind, episode.content, episode.butler, episode.importance) == (
        "episode",
        "User asked about recipes",
        "general",
        5.0,
    )
    expected = before + timedelta(days=7)
    assert episode.expires_at is not None
    assert abs((episode.expires_at - expected).total_seconds()) < 60
    assert episode.embedding_status == "ready" and episode.embedding is not None
    assert episode.tenant_id == member.caller.tenant_id


async def test_store_episode_with_custom_importance(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        out = await call(
            client, "memory_store_episode", content="User revealed severe allergy", butler="health", importance=9.0
        )
    assert (await Memory.objects.aget(pk=out["id"])).importance == 9.0


async def test_store_fact_supersedes_same_subject_and_predicate(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        first = await call(client, "memory_store_fact", subject="user", predicate="favorite_color", content="red")
        second = await call(client, "memory_store_fact", subject="user", predicate="favorite_color", content="blue")
        other = await call(client, "memory_store_fact", subject="user", predicate="favorite_food", content="pasta")
    assert second["superseded_ids"] == [first["id"]]
    assert other["superseded_ids"] == []
    old = await Memory.objects.aget(pk=first["id"])
    assert old.validity == "superseded" and str(old.superseded_by_id) == second["id"]
    assert (await Memory.objects.aget(pk=second["id"])).validity == "active"
    assert await MemoryEvent.objects.filter(memory_id=first["id"], event_type="superseded").aexists()


async def test_store_fact_permanence_maps_to_decay_rate(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        permanent = await call(
            client, "memory_store_fact", subject="user", predicate="name", content="John", permanence="permanent"
        )
        volatile = await call(
            client, "memory_store_fact", subject="user", predicate="mood", content="tired", permanence="volatile"
        )
    assert permanent["decay_rate"] == 0.0
    assert (await Memory.objects.aget(pk=permanent["id"])).decay_rate == 0.0
    assert volatile["decay_rate"] > 0.0


async def test_store_rule_is_a_candidate_at_half_confidence(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        out = await call(client, "memory_store_rule", content="Always confirm before sending messages", scope="global")
    rule = await Memory.objects.aget(pk=out["id"])
    assert (rule.kind, rule.maturity, rule.confidence, rule.scope) == ("rule", "candidate", 0.5, "global")
    assert (out["maturity"], out["confidence"]) == ("candidate", 0.5)


async def test_search_across_all_types_and_filtered_to_facts(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        episode = await call(
            client, "memory_store_episode", content="User talked about diet and vegan meals", butler="health"
        )
        fact = await call(
            client, "memory_store_fact", subject="user", predicate="diet", content="User follows a vegan diet"
        )
        rule = await call(client, "memory_store_rule", content="Suggest vegan recipes when the diet comes up")
        await call(client, "memory_store_fact", subject="user", predicate="car", content="User drives a red bicycle")
        everything = await call(client, "memory_search", query="diet preferences")
        facts_only = await call(client, "memory_search", query="diet", types=["fact"])
    found = {r["id"]: r for r in everything["results"]}
    assert {episode["id"], fact["id"], rule["id"]} <= set(found)
    for result in everything["results"]:
        assert set(result) >= {"type", "id", "content", "score", "confidence"}
    assert found[episode["id"]]["type"] == "episode" and found[episode["id"]]["confidence"] is None
    assert found[fact["id"]]["confidence"] == pytest.approx(1.0, abs=1e-3)
    assert facts_only["results"] and {r["type"] for r in facts_only["results"]} == {"fact"}
    assert facts_only["results"][0]["id"] == fact["id"]


async def test_search_modes_default_limit_and_min_confidence(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        for i in range(25):
            await call(client, "memory_store_episode", content=f"Note {i} about the garden and tomatoes", butler="home")
        hybrid = await call(client, "memory_search", query="garden tomatoes")
        keyword = await call(client, "memory_search", query="tomatoes", mode="keyword", limit=5)
        semantic = await call(client, "memory_search", query="vegetable gardening", mode="semantic", limit=5)
        low = await call(client, "memory_store_rule", content="Water the tomatoes in the morning")
        strict = await call(client, "memory_search", query="water tomatoes", types=["rule"], min_confidence=0.9)
        loose = await call(client, "memory_search", query="water tomatoes", types=["rule"], min_confidence=0.4)
        error = await call_error(client, "memory_search", query="x", mode="fuzzy")
    assert hybrid["count"] == 20  # the memory dialect: limit defaults to 20
    assert keyword["count"] == 5 and semantic["count"] == 5
    scores = [r["score"] for r in hybrid["results"]]
    assert scores == sorted(scores, reverse=True)
    assert strict["results"] == []  # candidate rule has confidence 0.5
    assert [r["id"] for r in loose["results"]] == [low["id"]]
    assert "mode" in error


async def test_recall_returns_facts_and_rules_in_scope_and_bumps_references(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        health = await call(
            client,
            "memory_store_fact",
            subject="user",
            predicate="allergy",
            content="User is allergic to peanuts",
            scope="health",
            importance=9,
        )
        glob = await call(client, "memory_store_rule", content="Check dietary needs before suggesting food")
        other = await call(
            client,
            "memory_store_fact",
            subject="user",
            predicate="diet_goal",
            content="User wants a low sugar diet",
            scope="fitness",
        )
        episode = await call(client, "memory_store_episode", content="User asked about dietary needs", butler="health")
        out = await call(client, "memory_recall", topic="user dietary needs", scope="health")
    ids = [r["id"] for r in out["results"]]
    assert health["id"] in ids and glob["id"] in ids
    assert other["id"] not in ids  # other scope
    assert episode["id"] not in ids  # recall never returns episodes
    assert {r["type"] for r in out["results"]} <= {"fact", "rule"}
    scores = [r["score"] for r in out["results"]]
    assert scores == sorted(scores, reverse=True)
    for pk in ids:
        assert (await Memory.objects.aget(pk=pk)).reference_count == 1


async def test_recall_composite_prefers_important_confident_memories(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        weak = await call(
            client,
            "memory_store_fact",
            subject="user",
            predicate="coffee_a",
            content="User drinks coffee in the morning",
            importance=1,
        )
        strong = await call(
            client,
            "memory_store_fact",
            subject="user",
            predicate="coffee_b",
            content="Every morning the user has a cup of coffee",
            importance=10,
        )
        out = await call(client, "memory_recall", topic="coffee habits")
    ids = [r["id"] for r in out["results"]]
    assert ids.index(strong["id"]) < ids.index(weak["id"])


async def test_get_returns_full_record_and_bumps_reference_count(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        fact = await call(client, "memory_store_fact", subject="user", predicate="city", content="Lives in Austin")
        first = await call(client, "memory_get", type="fact", id=fact["id"])
        second = await call(client, "memory_get", type="fact", id=fact["id"])
        missing = await call_error(client, "memory_get", type="fact", id="3f0c6a3e-7d8e-4a6b-9a54-9d0f4a1b2c3d")
        wrong_type = await call_error(client, "memory_get", type="rule", id=fact["id"])
        bad_id = await call_error(client, "memory_get", type="fact", id="not-a-uuid")
    assert first["content"] == "Lives in Austin" and first["subject"] == "user" and first["predicate"] == "city"
    assert {"confidence", "effective_confidence", "decay_rate", "validity", "created_at"} <= set(first)
    assert (first["reference_count"], second["reference_count"]) == (1, 2)
    assert "NOT_FOUND" in missing and "NOT_FOUND" in wrong_type
    assert "INVALID_ARGUMENT" in bad_id


async def test_confirm_resets_decay_clock_and_rejects_episodes(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        with time_machine.travel(timezone.now() - timedelta(days=60), tick=False):
            fact = await call(client, "memory_store_fact", subject="user", predicate="job", content="Works as a nurse")
        decayed = await call(client, "memory_get", type="fact", id=fact["id"])
        confirmed = await call(client, "memory_confirm", type="fact", id=fact["id"])
        episode = await call(client, "memory_store_episode", content="chatted", butler="general")
        error = await call_error(client, "memory_confirm", type="episode", id=episode["id"])
        with time_machine.travel(timezone.now() - timedelta(days=1), tick=False):
            forgotten = await call(client, "memory_store_fact", subject="user", predicate="pet", content="Has a cat")
        await call(client, "memory_forget", type="fact", id=forgotten["id"])
        refused = await call_error(client, "memory_confirm", type="fact", id=forgotten["id"])
    assert decayed["effective_confidence"] == pytest.approx(math.exp(-0.008 * 60), rel=1e-3)
    assert decayed["fact_state"] == "active"  # 0.62 is above the fading line (0.5)
    assert confirmed["effective_confidence"] == pytest.approx(confirmed["confidence"], rel=1e-6)
    row = await Memory.objects.aget(pk=fact["id"])
    assert row.last_confirmed_at is not None
    assert (timezone.now() - row.last_confirmed_at).total_seconds() < 60
    assert "episode" in error
    assert await MemoryEvent.objects.filter(memory_id=fact["id"], event_type="confirmed").aexists()
    # A forgotten fact is not brought back, nor told it was confirmed.
    assert "retracted" in refused and "cannot be confirmed" in refused
    assert not await MemoryEvent.objects.filter(memory_id=forgotten["id"], event_type="confirmed").aexists()
    row = await Memory.objects.aget(pk=forgotten["id"])
    assert (row.validity, row.last_confirmed_at) == ("retracted", row.created_at)


async def test_mark_helpful_increments_counts_and_promotes(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        rule = await call(client, "memory_store_rule", content="Summarise long threads before replying")
        await Memory.objects.filter(pk=rule["id"]).aupdate(success_count=4, applied_count=4)
        out = await call(client, "memory_mark_helpful", rule_id=rule["id"])
    assert (out["success_count"], out["applied_count"]) == (5, 5)
    assert out["effectiveness_score"] == pytest.approx(rule_effectiveness(5, 0))
    assert out["maturity"] == "established"  # 5 successes at effectiveness >= 0.6
    assert out["last_applied_at"] is not None


async def test_mark_harmful_recalculates_with_four_times_weight_and_inverts(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        rule = await call(client, "memory_store_rule", content="Reply in all caps")
        await Memory.objects.filter(pk=rule["id"]).aupdate(success_count=2, applied_count=2)
        out = await call(client, "memory_mark_harmful", rule_id=rule["id"], reason="caused incorrect response")
        assert out["harmful_count"] == 1 and out["applied_count"] == 3
        assert out["effectiveness_score"] == pytest.approx(2 / (2 + 4 * 1 + 0.01))
        await call(client, "memory_mark_harmful", rule_id=rule["id"])
        inverted = await call(client, "memory_mark_harmful", rule_id=rule["id"])
        not_a_rule = await call(client, "memory_store_fact", subject="s", predicate="p", content="c")
        error = await call_error(client, "memory_mark_harmful", rule_id=not_a_rule["id"])
    assert inverted["maturity"] == "anti_pattern"
    assert await MemoryEvent.objects.filter(
        memory_id=rule["id"], event_type="marked_harmful", payload__reason="caused incorrect response"
    ).aexists()
    assert "NOT_FOUND" in error


async def test_established_rule_is_demoted_by_harm(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        rule = await call(client, "memory_store_rule", content="Use bullet points")
        await Memory.objects.filter(pk=rule["id"]).aupdate(success_count=5, applied_count=5, maturity="established")
        out = await call(client, "memory_mark_harmful", rule_id=rule["id"])
    assert out["maturity"] == "candidate"  # 5 / (5 + 4 + 0.01) < 0.6


async def test_forget_fact_retracts_audits_and_hides_from_recall(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        fact = await call(
            client, "memory_store_fact", subject="user", predicate="pet", content="User has a cat named Tom"
        )
        before = await call(client, "memory_recall", topic="user pet cat")
        out = await call(client, "memory_forget", type="fact", id=fact["id"])
        after = await call(client, "memory_recall", topic="user pet cat")
        searched = await call(client, "memory_search", query="cat named Tom")
        still_visible = await call(client, "memory_get", type="fact", id=fact["id"])
    assert fact["id"] in [r["id"] for r in before["results"]]
    assert out["validity"] == "retracted"
    assert fact["id"] not in [r["id"] for r in after["results"]]
    assert fact["id"] not in [r["id"] for r in searched["results"]]
    assert still_visible["validity"] == "retracted"  # kept for audit and the dashboard
    assert await MemoryEvent.objects.filter(memory_id=fact["id"], event_type="retracted").aexists()


async def test_forget_rules_and_episodes_are_excluded_from_retrieval(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        rule = await call(client, "memory_store_rule", content="Prefer metric units in answers")
        episode = await call(client, "memory_store_episode", content="User prefers metric units", butler="general")
        await call(client, "memory_forget", type="rule", id=rule["id"])
        await call(client, "memory_forget", type="episode", id=episode["id"])
        found = await call(client, "memory_search", query="metric units")
    assert found["results"] == []


async def test_stats_counts_with_scope(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        await call(client, "memory_store_fact", subject="u", predicate="a", content="global fact")
        await call(client, "memory_store_fact", subject="u", predicate="b", content="health fact", scope="health")
        await call(client, "memory_store_fact", subject="u", predicate="c", content="work fact", scope="work")
        with time_machine.travel(timezone.now() - timedelta(days=200), tick=False):
            await call(
                client,
                "memory_store_fact",
                subject="u",
                predicate="d",
                content="old",
                scope="health",
                permanence="volatile",
            )
        await call(client, "memory_store_rule", content="health rule", scope="health")
        with time_machine.travel(timezone.now() - timedelta(days=8), tick=False):
            await call(client, "memory_store_episode", content="old episode", butler="health")
        await call(client, "memory_store_episode", content="new episode", butler="health")
        health = await call(client, "memory_stats", scope="health")
        everything = await call(client, "memory_stats")
    assert health["facts"]["total"] == 3  # global + health + old health; not work
    assert (health["facts"]["active"], health["facts"]["expired"]) == (2, 1)  # exp(-0.03*200) < 0.1
    assert health["rules"] == {"total": 1, "candidate": 1, "established": 0, "proven": 0, "anti_pattern": 0}
    assert health["episodes"]["total"] == 2 and health["episodes"]["expired"] == 1
    assert health["episodes"]["unconsolidated"] == 1
    assert 0 < health["episodes"]["backlog_age_seconds"] < 3600
    assert everything["facts"]["total"] == 4


async def test_context_has_three_sections_within_budget(member, mcp_client_for):
    from memory.tokenizer import count_tokens

    async with mcp_client_for(member) as client:
        await call(client, "memory_store_fact", subject="user", predicate="diet", content="Vegetarian", scope="health")
        await call(client, "memory_store_rule", content="Suggest high protein vegetarian meals", scope="health")
        await call(client, "memory_store_episode", content="User asked for a diet plan", butler="health")
        out = await call(
            client, "memory_context", trigger_prompt="Help user with diet", butler="health", token_budget=3000
        )
    text = out["text"]
    assert "## Facts" in text and "## Rules" in text and "## Recent episodes" in text
    assert "Vegetarian" in text and "high protein" in text and "diet plan" in text
    assert count_tokens(text) == out["token_count"] <= 3000


async def test_tenant_selector_from_non_admin_is_rejected(member, outsider, mcp_client_for):
    async with mcp_client_for(member) as client:
        own = await call_error(client, "memory_search", query="x", tenant="tenant-a")
        other = await call_error(
            client, "memory_store_fact", subject="s", predicate="p", content="c", tenant="tenant-b"
        )
    assert "PERMISSION_DENIED" in own and "PERMISSION_DENIED" in other
    assert not await Memory.objects.filter(tenant__slug="tenant-b").aexists()


async def test_admin_cross_tenant_needs_explicit_elevation_and_is_audited(owner, outsider, mcp_client_for):
    from tests.conftest import make_identity

    async with mcp_client_for(outsider) as client:
        target = await call(client, "memory_store_fact", subject="b", predicate="secret", content="tenant b data")
    async with mcp_client_for(owner) as client:  # admin, but no 'elevate' scope
        refused = await call_error(client, "memory_get", type="fact", id=target["id"], tenant="tenant-b", elevate=True)
    elevated = await make_identity_async(
        make_identity, "tenant-a", "root", "admin", ["read", "write", "admin", "elevate"]
    )
    async with mcp_client_for(elevated) as client:
        without_flag = await call_error(client, "memory_get", type="fact", id=target["id"], tenant="tenant-b")
        got = await call(client, "memory_get", type="fact", id=target["id"], tenant="tenant-b", elevate=True)
    assert "PERMISSION_DENIED" in refused and "elevation" in without_flag
    assert got["content"] == "tenant b data"
    audit = await MemoryEvent.objects.filter(event_type="tenant_elevation", tenant__slug="tenant-b").afirst()
    assert audit is not None and audit.actor_principal_id == elevated.caller.principal_id


async def make_identity_async(factory, *args):
    from asgiref.sync import sync_to_async

    return await sync_to_async(factory)(*args)


async def test_conflict_candidates_are_visible_to_tools(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        old = await call(
            client, "memory_store_fact", subject="user", predicate="home_city", content="User lives in Seattle"
        )
        new = await call(
            client, "memory_store_fact", subject="user", predicate="current_city", content="User lives in Austin"
        )
        got = await call(client, "memory_get", type="fact", id=new["id"])
        stats = await call(client, "memory_stats")
    # The background check (eager in tests) saw the same subject with different content.
    assert [c["other_memory_id"] for c in got["open_conflicts"]] == [old["id"]]
    assert got["open_conflicts"][0]["kind"] in ("contradiction", "duplicate")
    assert stats["open_conflicts"] == 1
