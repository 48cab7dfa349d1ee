"""Semantic conflict check: only the same statement merges (into the newest
memory), likely conflicts and near-identical facts become candidates, review
accepts or dismisses, all inside one tenant. (These tests call the check
directly; with ``db`` the on-commit task does not run.)"""

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.errors import InvalidArgument, NotFound
from memory.models import ConflictCandidate, Memory, MemoryEvent
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.conflicts import conflict_accept, conflict_dismiss, memory_conflict_check
from memory.services.memories import episode_store, fact_store, memory_forget, memory_restore, rule_store
from memory.statements import same_statement

# Similarity thresholds and clustering are tuned to the real model's vectors.
pytestmark = [pytest.mark.django_db, pytest.mark.real_embedder]


def fact(identity, subject, predicate, content, **kw):
    return fact_store(caller=identity.caller, subject=subject, predicate=predicate, content=content, **kw).memory


def state(memory):
    memory.refresh_from_db()
    return memory.validity, memory.superseded_by_id


def test_exact_duplicate_merges_into_the_newer_memory(member):
    older = fact(member, None, None, "User is allergic to peanuts")
    newer = fact(member, None, None, "User is allergic to peanuts")
    confirmed_before = Memory.objects.get(pk=newer.pk).last_confirmed_at

    result = memory_conflict_check(memory_id=newer.id)
    assert result.merged == [older.id] and result.merged_into == newer.id
    assert state(older) == ("superseded", newer.id)
    assert state(newer) == ("active", None)
    confirmed_after = Memory.objects.get(pk=newer.pk).last_confirmed_at
    assert confirmed_before is not None and confirmed_after is not None
    assert confirmed_after > confirmed_before  # restating confirms
    [event] = MemoryEvent.objects.filter(memory_id=older.id, event_type="superseded")
    assert event.payload["reason"] == "duplicate"

    # Twice is harmless: the older one is no longer active, the newer finds nothing.
    count = MemoryEvent.objects.count()
    assert memory_conflict_check(memory_id=older.id).skipped == "superseded"
    assert memory_conflict_check(memory_id=newer.id).merged == []
    assert MemoryEvent.objects.count() == count

    # Reversible: the admin's restore brings the older one back.
    memory_restore(caller=member.caller, memory_id=older.id)
    assert state(older) == ("active", None)


def test_the_same_statement_merges_whichever_side_is_checked(member):
    older = fact(member, None, None, "The user's favourite  colour is blue.")
    newer = fact(member, None, None, "The user's favourite colour is blue")
    result = memory_conflict_check(memory_id=older.id)
    assert result.merged == [older.id] and result.merged_into == newer.id
    assert state(older) == ("superseded", newer.id) and state(newer) == ("active", None)


@pytest.mark.parametrize(
    ("older_reach", "newer_reach"),
    [
        ({"boundary_class": "public"}, {"boundary_class": "secret"}),
        ({"tags": ["ops"]}, {"tags": ["billing"]}),
        ({"collection": "memory_bank"}, {"collection": "patterns"}),
        ({"source": "import"}, {"source": ""}),
        ({"metadata": {"category": "door"}}, {"metadata": {}}),
    ],
)
def test_the_same_text_that_another_read_finds_is_never_merged(member, older_reach, newer_reach):
    """A merge keeps the newest copy's boundary class, tags, collection,
    source and metadata: a reader, a filter or a collection that found the
    older copy would find nothing."""
    older = fact(member, None, None, "The office door code is 4471", **older_reach)
    newer = fact(member, None, None, "The office door code is 4471", **newer_reach)
    for memory in (newer, older):
        assert memory_conflict_check(memory_id=memory.id).merged == []
    assert state(older) == ("active", None) and state(newer) == ("active", None)
    assert ConflictCandidate.objects.filter(memory=newer, other=older, status="open").exists()


def test_a_copy_that_would_outlive_the_newest_is_not_merged_into_it(member):
    older = fact(member, None, None, "Ana's passport number ends in 4471")
    newer = fact(member, None, None, "Ana's passport number ends in 4471")
    soon = timezone.now() + timedelta(hours=1)
    Memory.objects.filter(pk=newer.pk).update(expires_at=soon)
    for memory in (older, newer):
        assert memory_conflict_check(memory_id=memory.id).merged == []
    assert state(older) == ("active", None) and state(newer) == ("active", None)
    # Both expiring, the newest later: the older merges into it, as a restatement does.
    Memory.objects.filter(pk=older.pk).update(expires_at=soon - timedelta(minutes=5))
    assert memory_conflict_check(memory_id=newer.id).merged == [older.id]


@pytest.mark.parametrize(
    ("older_key", "newer_key", "content"),
    [
        (("alice", "employer"), ("bob", "employer"), "Acme"),
        (("user", "home_city"), ("user", "birth_city"), "Austin"),
        ((None, None), ("user", "employer"), "User works at Acme"),
        (("user", "employer"), (None, None), "User works at Acme"),
    ],
)
def test_the_same_content_under_another_key_is_another_statement(member, older_key, newer_key, content):
    """A keyed fact says its content of its subject and predicate: Acme is
    alice's employer, not bob's. Only its own key's newer write replaces it;
    a merge would make a get by key answer another fact."""
    older = fact(member, older_key[0], older_key[1], content)
    newer = fact(member, newer_key[0], newer_key[1], content)
    for memory in (newer, older):
        assert memory_conflict_check(memory_id=memory.id).merged == []
    assert state(older) == ("active", None) and state(newer) == ("active", None)
    # Left for review: identical content is the nearest of neighbours.
    assert ConflictCandidate.objects.filter(memory=newer, other=older, status="open").exists()


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            "The staging database password was rotated on 2026-11-02",
            "The staging database password was rotated on 2026-11-09",
        ),
        ("Invoice 4411 from Acme was paid on March 3", "Invoice 4412 from Acme was paid on March 3"),
        ("Alice approved the deployment of build 7f3a", "Bob approved the deployment of build 7f3a"),
        ("The API rate limit is 500 requests per minute", "The API rate limit is 5000 requests per minute"),
        ("User's favourite colour is blue", "User's favorite color is blue"),
    ],
)
def test_near_identical_facts_that_differ_both_stay_active(member, first, second):
    """Embedding similarity cannot tell "same" from "differs in one number,
    date, name or id": such pairs are open candidates, never merged."""
    older = fact(member, None, None, first)
    newer = fact(member, None, None, second)
    for memory in (newer, older):
        assert memory_conflict_check(memory_id=memory.id).merged == []
    assert state(older) == ("active", None) and state(newer) == ("active", None)
    # What a user sees: a search for each text finds it.
    for memory in (older, newer):
        hits = memory_search(caller=member.caller, query=SearchQuery(memory.content, limit=5))
        assert memory.id in [hit.memory.id for hit in hits]
    # Highly similar pairs are open for review, naming what differs.
    for candidate in ConflictCandidate.objects.filter(memory=newer, other=older):
        assert candidate.kind == "duplicate" and candidate.status == "open"
        assert "differs in" in candidate.reason
    assert not same_statement(first, second)


def test_the_same_statement_sets_aside_only_what_cannot_change_a_meaning():
    assert same_statement("The user likes tea.", "The user likes tea")
    assert same_statement(" The user\tlikes  tea ", "The user likes tea.")
    assert same_statement("Caf\u00e9 opens at 9", "Cafe\u0301 opens at 9")  # one character, two encodings (NFC)
    assert not same_statement("Alice paid Bob", "Bob paid Alice")
    assert not same_statement("It is -5 degrees", "It is 5 degrees")
    assert not same_statement("It costs $5", "It costs €5")
    assert not same_statement("The user is not vegan", "The user is vegan")
    assert not same_statement("I wonder...", "I wonder")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("The vault password for staging is Xk9pQzT", "The vault password for staging is xk9pqzt"),  # case
        ("The deposit is 10³ dollars", "The deposit is 103 dollars"),  # compatibility forms (NFKC)
        ("The invoice total is 1,500 USD", "The invoice total is 1.500 USD"),  # separators
        ("Sam got an A in chemistry", "Sam got an in chemistry"),  # a letter is no article here
        ("The patient has hepatitis A", "The patient has hepatitis"),
        ("Deploy 42 finished", "Deploy 42 finished?"),  # a question is no statement
        ("Ｖｅｒｓｉｏｎ ２ is live", "version 2 is live"),
    ],
)
def test_texts_that_differ_in_a_sign_a_case_or_a_letter_are_never_merged(member, first, second):
    """What a duplicate check that folds case, compatibility forms, punctuation
    or articles merged: the older text was retired and its own search found it
    no more."""
    assert not same_statement(first, second)
    older = fact(member, None, None, first)
    newer = fact(member, None, None, second)
    for memory in (newer, older):
        assert memory_conflict_check(memory_id=memory.id).merged == []
    assert state(older) == ("active", None) and state(newer) == ("active", None)
    hits = memory_search(caller=member.caller, query=SearchQuery(first, limit=5))
    assert older.id in [hit.memory.id for hit in hits]


def test_same_subject_different_content_is_a_contradiction_candidate(member):
    older = fact(member, "user", "city", "User lives in Berlin")
    newer = fact(member, "user", "home town", "User lives in Munich")
    unrelated = fact(member, "user", "employer", "User works at Acme Corp")

    result = memory_conflict_check(memory_id=newer.id)
    [candidate] = ConflictCandidate.objects.filter(pk__in=result.candidates)
    assert (candidate.memory_id, candidate.other_id, candidate.kind) == (newer.id, older.id, "contradiction")
    assert candidate.status == "open" and candidate.similarity is not None and candidate.similarity > 0.5
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
