"""roampal v0.3.5 in the core: the formulas (Wilson reference values, each
outcome delta, the time scaling), every lifecycle transition (with time travel),
TTLs, the beat sweeps, books ingestion and the prefixed ids."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.utils import timezone

from memory import api, scoring
from memory.models import Exchange, Memory, MemoryEvent
from memory.selectors.collections import id_range
from memory.services.collections import book_chunks
from workers import tasks
from workers.schedule import SCHEDULE

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    "successes, uses, expected", [(1, 1, 0.2065), (90, 100, 0.8256), (50, 100, 0.4038), (0, 0, 0.5), (3, 0, 0.5)]
)
def test_wilson_reference_values(successes, uses, expected):
    assert scoring.wilson_lower_bound(successes, uses) == pytest.approx(expected, abs=5e-5)


@pytest.mark.parametrize(
    "signal, score, success",
    [("worked", 0.7, 1.0), ("partial", 0.55, 0.5), ("failed", 0.2, 0.0), ("unknown", 0.5, 0.25)],
)
def test_each_outcome_delta_on_an_unscored_memory(member, signal, score, success):
    memory = api.memory_bank_store(caller=member.caller, content=f"fact scored {signal}")
    result = api.memory_feedback(caller=member.caller, memory_id=memory.id, signal=signal)
    row = result.memory
    assert row.outcome_score == pytest.approx(score)
    assert (row.success_count, row.applied_count) == (success, 1)


def test_deltas_scale_with_days_since_last_use_and_clamp(member):
    memory = api.memory_bank_store(caller=member.caller, content="Build host is ci-3")
    with time_machine.travel(timezone.now() + timedelta(days=30)):
        # 30 days since it was stored (never used): worked adds 0.2 / (1 + 30/30) = 0.1.
        row = api.memory_feedback(caller=member.caller, memory_id=memory.id, signal="worked").memory
        assert row.outcome_score == pytest.approx(0.6)
        for _ in range(5):
            row = api.memory_feedback(caller=member.caller, memory_id=memory.id, signal="worked").memory
    assert row.outcome_score == 1.0  # clamped
    assert scoring.outcome_score_after(0.1, -0.3, 0) == 0.0
    assert scoring.outcome_score_after(0.5, -0.3, 60) == pytest.approx(0.4)


def _set(memory: Memory, **fields) -> Memory:
    Memory.objects.filter(pk=memory.pk).update(**fields)
    memory.refresh_from_db()
    return memory


def test_working_to_history_at_07_with_two_uses_resets_counters(member):
    memory = api.working_store(caller=member.caller, content="Use uv for Python installs")
    api.memory_feedback(caller=member.caller, memory_id=memory.id, signal="partial")  # 0.55, 1 use
    row = api.memory_feedback(caller=member.caller, memory_id=memory.id, signal="worked").memory  # 0.75, 2 uses
    assert (row.collection, row.kind, row.applied_count, row.success_count) == ("history", "episode", 0, 0.0)
    assert row.outcome_score == pytest.approx(0.75)
    assert row.expires_at is not None
    assert abs(row.expires_at - (timezone.now() + scoring.HISTORY_TTL)) < timedelta(minutes=1)
    event = MemoryEvent.objects.get(memory_id=memory.id, event_type="collection_changed")
    assert event.payload == {"from": "working", "to": "history", "reason": "scored worked"}


def test_working_stays_below_the_thresholds(member):
    memory = api.working_store(caller=member.caller, content="not yet")
    assert (
        api.memory_feedback(caller=member.caller, memory_id=memory.id, signal="worked").memory.collection == "working"
    )
    memory = _set(api.working_store(caller=member.caller, content="low score"), applied_count=5, outcome_score=0.45)
    assert (
        api.memory_feedback(caller=member.caller, memory_id=memory.id, signal="partial").memory.collection == "working"
    )


def test_history_to_patterns_needs_score_uses_and_successes(member):
    memory = _set(
        api.working_store(caller=member.caller, content="Run tests with -p no:cacheprovider"),
        collection="history",
        applied_count=2,
        success_count=4.0,
        outcome_score=0.85,
    )
    row = api.memory_feedback(caller=member.caller, memory_id=memory.id, signal="partial").memory
    assert (row.collection, row.applied_count, row.success_count) == ("history", 3, 4.5)  # successes 4.5 < 5
    row = api.memory_feedback(caller=member.caller, memory_id=memory.id, signal="worked").memory
    assert (row.collection, row.kind, row.maturity, row.expires_at) == ("patterns", "rule", "established", None)


def test_patterns_demote_below_04_and_delete_below_02(member):
    pattern = _set(
        api.working_store(caller=member.caller, content="Always pin exact versions"),
        collection="patterns",
        kind="rule",
        expires_at=None,
        outcome_score=0.6,
    )
    row = api.memory_feedback(caller=member.caller, memory_id=pattern.id, signal="failed").memory  # 0.3
    assert (row.collection, row.kind, row.validity) == ("history", "episode", "active")
    assert row.expires_at is not None
    assert abs(row.expires_at - (timezone.now() + scoring.HISTORY_TTL)) < timedelta(minutes=1)
    with time_machine.travel(timezone.now() + timedelta(days=8)):
        # Older than 7 days: below 0.2 deletes (0.3 - 0.3 / (1 + 8/30) = 0.063 -> well below).
        row = api.memory_feedback(caller=member.caller, memory_id=pattern.id, signal="failed").memory
    assert row.validity == "retracted"
    event = MemoryEvent.objects.filter(memory_id=pattern.id, event_type="retracted").get()
    assert event.payload["collection"] == "history"
    assert api.collection_search(caller=member.caller, days_back=30) == []


def test_young_memories_get_more_room_then_the_sweep_deletes_them(member):
    memory = _set(api.working_store(caller=member.caller, content="young and wrong"), outcome_score=0.45)
    row = api.memory_feedback(caller=member.caller, memory_id=memory.id, signal="failed").memory  # 0.15
    assert row.validity == "active"  # at most 7 days old: deleted only below 0.1
    assert tasks.collections_lifecycle_task.delay().get() == 0
    _set(memory, expires_at=timezone.now() + timedelta(days=30), collection="history")
    with time_machine.travel(timezone.now() + timedelta(days=7, hours=1)):
        assert tasks.collections_lifecycle_task.delay().get() == 1
        assert tasks.collections_lifecycle_task.delay().get() == 0  # idempotent
    assert Memory.objects.get(pk=memory.pk).validity == "retracted"
    very_low = _set(api.working_store(caller=member.caller, content="young and very wrong"), outcome_score=0.35)
    row = api.memory_feedback(caller=member.caller, memory_id=very_low.id, signal="failed").memory  # 0.05
    assert row.validity == "retracted"


def test_memory_bank_and_books_are_never_deleted(member):
    fact = api.memory_bank_store(caller=member.caller, content="User's name is Ada")
    book = api.book_ingest(caller=member.caller, title="t", text="Chapter one.").chunk_ids[0]
    for _ in range(4):
        api.memory_feedback(caller=member.caller, memory_id=fact.id, signal="failed")
        api.memory_feedback(caller=member.caller, memory_id=book, signal="failed")
    assert Memory.objects.get(pk=fact.id).outcome_score == 0.0
    assert {m.validity for m in Memory.objects.filter(pk__in=[fact.id, book])} == {"active"}
    assert tasks.collections_lifecycle_task.delay().get() == 0


def test_lifecycle_sweep_promotes_what_scoring_left_behind(member):
    memory = _set(
        api.working_store(caller=member.caller, content="scored elsewhere"), applied_count=2, outcome_score=0.8
    )
    assert tasks.collections_lifecycle_task.delay().get() == 1
    assert Memory.objects.get(pk=memory.pk).collection == "history"
    names = {entry.task for entry in SCHEDULE}
    assert {"workers.tasks.collections_lifecycle_task", "workers.tasks.transcripts_retention_task"} <= names


def test_ttls_working_24h_history_30d(member):
    working = api.working_store(caller=member.caller, content="working memory about kettles")
    history = _set(
        api.working_store(caller=member.caller, content="history memory about kettles"),
        collection="history",
        expires_at=timezone.now() + scoring.HISTORY_TTL,
    )
    with time_machine.travel(timezone.now() + timedelta(hours=25)):
        assert [h.memory.id for h in api.collection_search(caller=member.caller, days_back=2)] == [history.id]
    with time_machine.travel(timezone.now() + timedelta(days=31)):
        assert api.collection_search(caller=member.caller, days_back=60) == []
    assert working.expires_at is not None
    assert abs(working.expires_at - working.created_at - scoring.WORKING_TTL) < timedelta(seconds=1)


def test_transcripts_are_kept_seven_days(member):
    with time_machine.travel(timezone.now() - timedelta(days=8)):
        old = api.exchange_open(caller=member.caller, conversation_id="c", user_message="old", surfaced_ids=[])
    with time_machine.travel(timezone.now() - timedelta(days=6)):
        kept = api.exchange_open(caller=member.caller, conversation_id="c", user_message="kept", surfaced_ids=[])
    assert tasks.transcripts_retention_task.delay().get() == 1
    assert list(Exchange.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not Exchange.objects.filter(pk=old.pk).exists()


def test_memory_bank_ranking_blends_wilson_after_three_uses():
    assert scoring.memory_bank_quality(0.9, 0.8, 0, 2) == pytest.approx(0.72)
    assert scoring.memory_bank_quality(0.9, 0.8, 3, 3) == pytest.approx(
        0.8 * 0.72 + 0.2 * scoring.wilson_lower_bound(3, 3)
    )
    # The learned score's weight grows as a memory proves itself.
    weights = [scoring.learned_weight(u, s) for u, s in [(0, 0.5), (1, 0.7), (3, 0.7), (5, 0.9)]]
    assert weights == sorted(weights) and weights[0] < weights[-1]
    proven = scoring.collection_rank(collection="patterns", similarity=0.5, score=1.0, uses=8)
    fresh = scoring.collection_rank(collection="working", similarity=0.5, score=0.5, uses=0)
    assert proven > fresh and scoring.collection_rank(collection="books", similarity=0.42, score=0, uses=0) == 0.42


def test_display_ids_map_back_to_the_uuid_range(member):
    memory = api.memory_bank_store(caller=member.caller, content="id test")
    shown = api.display_id(memory)
    low, high = id_range(shown)
    assert low <= memory.id <= high and shown == f"memory_bank_{memory.id.hex[:12]}"
    assert api.collection_get(member.caller, str(memory.id)).id == memory.id
    assert api.collection_get(member.caller, "patterns_" + memory.id.hex).id == memory.id  # prefix is informative
    with pytest.raises(api.InvalidArgument):
        id_range("memory_bank_xyz")


def test_markdown_chunking_keeps_headings_and_bounds():
    text = "# A\n\n" + "word " * 500 + "\n\n# B\n\nshort section"
    chunks = book_chunks(text, size=1000, overlap=100)
    assert chunks[0].startswith("# A") and chunks[-1] == "# B\n\nshort section"
    assert all(len(c) <= 1000 for c in chunks)


@pytest.mark.parametrize("overlap", [0, 100])
def test_chunks_carry_at_most_the_overlap_of_the_chunk_before(overlap):
    """With overlap 0 (what the ingest API allows) a chunk carried all of the
    one before it, which carried all of its own: a 99 kB book was stored as
    84 MB."""
    text = "\n\n".join(f"Paragraph {n} " + "about the deploy checklist " * 8 for n in range(200))
    chunks = book_chunks(text, size=1000, overlap=overlap)
    assert all(len(c) <= 1000 + overlap for c in chunks)
    assert sum(len(c) for c in chunks) <= len(text) + len(chunks) * (overlap + 2)
    for n in range(200):  # every paragraph is stored
        assert any(f"Paragraph {n} " in c for c in chunks)


def test_a_books_chunks_get_no_conflict_check(member):
    """Overlapping chunks of one text are near-duplicates of one another: checked,
    two small books left tens of thousands of open candidates and held the
    worker every tenant shares."""
    from memory.models import ConflictCandidate, FollowUp, FollowUpKind
    from memory.services.conflicts import memory_conflict_check

    text = "\n\n".join(f"Step {n}. " + "Run the deploy checklist before the release. " * 30 for n in range(6))
    chunk_ids = api.book_ingest(
        caller=member.caller, title="Runbook", text=text, chunk_size=500, chunk_overlap=100
    ).chunk_ids
    assert len(chunk_ids) > 3
    assert not FollowUp.objects.filter(memory_id__in=chunk_ids, kind=FollowUpKind.CONFLICT_CHECK).exists()
    assert {memory_conflict_check(memory_id=pk).skipped for pk in chunk_ids} == {"document"}
    assert not ConflictCandidate.objects.filter(memory_id__in=chunk_ids).exists()


def test_ingest_book_command_shows_progress(member, tmp_path):
    path = tmp_path / "guide.md"
    path.write_text("# Guide\n\nDeploy with make release.\n\n# Rollback\n\nUse make rollback.\n")
    out = io.StringIO()
    call_command("ingest_book", str(path), "--tenant", "tenant-a", "--tags", "ops", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "stored 2 chunks of 'guide.md' in books" and "embedded 2/2 chunks" in lines
    chunks = Memory.objects.filter(tenant_id=member.caller.tenant_id, collection="books")
    assert chunks.count() == 2 and all(c.tags == ["ops"] and c.embedding_status == "ready" for c in chunks)
    first = chunks.first()
    assert first is not None and first.metadata["title"] == "guide.md"


def test_every_book_chunk_has_its_own_stored_event(member):
    """The reliability suite's consistency check: every memory row with its
    'stored' audit event. A book records one event for the book and one per chunk."""
    text = "\n\n".join(f"Chapter {n}. " + "The deploy checklist comes first. " * 40 for n in range(4))
    chunk_ids = api.book_ingest(caller=member.caller, title="Handbook", text=text).chunk_ids
    assert len(chunk_ids) > 1
    stored = MemoryEvent.objects.filter(memory_id__in=chunk_ids, event_type="stored")
    assert sorted((e.memory_id for e in stored), key=str) == sorted(chunk_ids, key=str)
    assert {(e.memory_kind, e.payload["title"]) for e in stored} == {("document", "Handbook")}
    assert MemoryEvent.objects.filter(event_type="book_ingested", payload__chunks=len(chunk_ids)).count() == 1


def test_a_query_search_reranks_the_search_candidates_by_collection_rank(member):
    """collection_search ranks the hybrid search's first candidates again by the
    collection rank and loads only the rows it returns (issue 13): the answer must
    be the best of those candidates by final_rank_score, as when every candidate
    was loaded, and not simply the most relevant ones."""
    from memory.selectors.collections import rank_score
    from memory.selectors.memories import SearchQuery, memory_search

    caller = member.caller
    stored = [api.working_store(caller=caller, content=f"deploy checklist step {i} of the release") for i in range(8)]
    for i, memory in enumerate(stored):  # learned scores that disagree with the relevance order
        _set(memory, applied_count=(i * 3) % 7, success_count=float(i % 4), outcome_score=(i * 37 % 10) / 10)
    query = "deploy checklist release"
    found = memory_search(
        caller=caller, query=SearchQuery(query, types=["episode"], mode="hybrid", limit=40, collections=["working"])
    )
    similarity = {f.memory.id: max(0.0, f.hit.vector_similarity or f.relevance) for f in found}
    expected = sorted(
        found,
        key=lambda f: (
            -rank_score(f.memory, similarity[f.memory.id]),
            -f.memory.created_at.timestamp(),
            str(f.memory.id),
        ),
    )
    got = api.collection_search(caller=caller, query=query, collections=["working"], limit=3)
    assert [h.memory.id for h in got] == [f.memory.id for f in expected[:3]]
    assert [h.memory.id for h in got] != [f.memory.id for f in found[:3]]  # the learned scores reordered them
    assert [h.final_rank_score for h in got] == [rank_score(f.memory, similarity[f.memory.id]) for f in expected[:3]]


@pytest.mark.parametrize("query", [None, "offsite plan"])
def test_recency_orders_by_when_a_memory_happened(member, query):
    """roampal's days_back selects, and a memory's created_at shows, when it
    happened (occurred_at: an import keeps upstream's time); recency orders by
    it too, so a memory imported as ten days old never lists above one of today."""
    caller = member.caller
    today = api.working_store(caller=caller, content="offsite plan for the spring", conversation_id="c1")
    old = api.working_store(caller=caller, content="offsite plan from last year", conversation_id="c2")
    Memory.objects.filter(pk=old.pk).update(occurred_at=timezone.now() - timedelta(days=10))
    for sort_by in ("recency", "score"):
        hits = api.collection_search(caller=caller, query=query, collections=["working"], sort_by=sort_by, limit=5)
        assert [h.memory.pk for h in hits] == [today.pk, old.pk], sort_by
