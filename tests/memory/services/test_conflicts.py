"""Semantic conflict check: duplicates merge into the older memory, likely
conflicts become candidates, review accepts or dismisses, all inside one tenant.
(These tests call the check directly; with ``db`` the on-commit task does not run.)"""

import pytest

from memory.errors import InvalidArgument, NotFound
from memory.models import ConflictCandidate, Memory, MemoryEvent
from memory.services.conflicts import conflict_accept, conflict_dismiss, memory_conflict_check
from memory.services.memories import episode_store, fact_store, memory_forget, rule_store

# Similarity thresholds and clustering are tuned to the real model's vectors.
pytestmark = [pytest.mark.django_db, pytest.mark.real_embedder]


def fact(identity, subject, predicate, content, **kw):
    return fact_store(caller=identity.caller, subject=subject, predicate=predicate, content=content, **kw).memory


def state(memory):
    memory.refresh_from_db()
    return memory.validity, memory.superseded_by_id


def test_exact_duplicate_merges_into_the_older_memory(member):
    older = fact(member, "user", "allergy", "User is allergic to peanuts")
    newer = fact(member, "ana", "food allergy", "User is allergic to peanuts")
    confirmed_before = Memory.objects.get(pk=older.pk).last_confirmed_at

    result = memory_conflict_check(memory_id=newer.id)
    assert result.merged == [newer.id] and result.merged_into == older.id
    assert state(newer) == ("superseded", older.id)
    assert state(older) == ("active", None)
    assert Memory.objects.get(pk=older.pk).last_confirmed_at > confirmed_before  # restating confirms
    [event] = MemoryEvent.objects.filter(memory_id=newer.id, event_type="superseded")
    assert event.payload["reason"] == "duplicate"

    # Twice is harmless: the newer one is no longer active, the older finds nothing.
    count = MemoryEvent.objects.count()
    assert memory_conflict_check(memory_id=newer.id).skipped == "superseded"
    assert memory_conflict_check(memory_id=older.id).merged == []
    assert MemoryEvent.objects.count() == count


def test_near_identical_wording_merges_even_when_checked_from_the_older_side(member):
    older = fact(member, "user", "colour", "User's favourite colour is blue")
    newer = fact(member, "user", "favorite color", "User's favorite color is blue")
    # Whichever memory's check runs, the newer one is the one superseded.
    result = memory_conflict_check(memory_id=older.id)
    assert result.merged == [newer.id]
    assert state(newer) == ("superseded", older.id)


def test_same_subject_different_content_is_a_contradiction_candidate(member):
    older = fact(member, "user", "city", "User lives in Berlin")
    newer = fact(member, "user", "home town", "User lives in Munich")
    unrelated = fact(member, "user", "employer", "User works at Acme Corp")

    result = memory_conflict_check(memory_id=newer.id)
    [candidate] = ConflictCandidate.objects.filter(pk__in=result.candidates)
    assert (candidate.memory_id, candidate.other_id, candidate.kind) == (newer.id, older.id, "contradiction")
    assert candidate.status == "open" and candidate.similarity > 0.5
    assert not ConflictCandidate.objects.filter(memory=unrelated).exists()
    assert not ConflictCandidate.objects.filter(other=unrelated).exists()
    assert state(older) == ("active", None) and state(newer) == ("active", None)  # nothing merged

    # Idempotent from both sides: the pair has one row and one audit event.
    assert memory_conflict_check(memory_id=newer.id).candidates == []
    assert memory_conflict_check(memory_id=older.id).candidates == []
    assert ConflictCandidate.objects.count() == 1
    assert MemoryEvent.objects.filter(event_type="conflict_detected").count() == 1


def test_accept_supersedes_the_older_memory(member, outsider):
    older = fact(member, "user", "city", "User lives in Berlin")
    newer = fact(member, "user", "home town", "User lives in Munich")
    [candidate_id] = memory_conflict_check(memory_id=newer.id).candidates

    with pytest.raises(NotFound):
        conflict_accept(caller=outsider.caller, conflict_id=candidate_id)  # another tenant's conflict
    accepted = conflict_accept(caller=member.caller, conflict_id=candidate_id)
    assert accepted.status == "accepted" and accepted.resolved_by == member.caller.principal_id
    assert accepted.resolved_at is not None
    assert state(older) == ("superseded", newer.id)
    assert conflict_accept(caller=member.caller, conflict_id=candidate_id).status == "accepted"  # twice: no-op
    with pytest.raises(InvalidArgument):
        conflict_dismiss(caller=member.caller, conflict_id=candidate_id)
    assert MemoryEvent.objects.filter(event_type="conflict_accepted").count() == 1


def test_dismiss_keeps_both(member):
    older = rule_store(caller=member.caller, content="Always run the tests before committing")
    newer = rule_store(caller=member.caller, content="Run tests before every commit, always")
    [candidate_id] = memory_conflict_check(memory_id=newer.id).candidates
    candidate = ConflictCandidate.objects.get(pk=candidate_id)
    assert candidate.kind == "duplicate"  # similar, below the merge threshold
    conflict_dismiss(caller=member.caller, conflict_id=candidate_id)
    assert state(older) == ("active", None) and state(newer) == ("active", None)
    assert ConflictCandidate.objects.get(pk=candidate_id).status == "dismissed"
    assert memory_conflict_check(memory_id=newer.id).candidates == []  # not raised again


def test_no_merge_across_tenants_namespaces_or_kinds(member, outsider):
    mine = fact(member, "user", "allergy", "User is allergic to peanuts")
    theirs = fact(outsider, "user", "allergy", "User is allergic to peanuts")
    other_namespace = fact(member, "user", "allergy", "User is allergic to peanuts", namespace=["alice"])
    rule = rule_store(caller=member.caller, content="User is allergic to peanuts")
    episode = episode_store(caller=member.caller, content="User is allergic to peanuts", butler="chef")
    for memory in (theirs, other_namespace, rule, episode):
        result = memory_conflict_check(memory_id=memory.id)
        assert result.merged == [] and result.candidates == []
    assert set(Memory.objects.values_list("validity", flat=True)) == {"active"}
    assert memory_conflict_check(memory_id=mine.id).merged == []


def test_retracted_memories_are_left_alone(member):
    older = fact(member, "user", "allergy", "User is allergic to peanuts")
    newer = fact(member, "ana", "allergy", "User is allergic to peanuts")
    memory_forget(caller=member.caller, kind="fact", memory_id=older.id)
    assert memory_conflict_check(memory_id=newer.id).merged == []  # a retracted memory does not absorb
    assert memory_conflict_check(memory_id=older.id).skipped == "retracted"
