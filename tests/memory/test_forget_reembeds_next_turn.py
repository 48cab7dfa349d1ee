"""A turn that leaves retrieval leaves every ranking: the turn after it in its
session was embedded with its text (memory/embedtext.py, PREVIOUS_CHARS), so
that turn loses its vector at once and is embedded again from what is visible
now: forget, supersession, a principal's purge, the TTL passing and the expiry
sweep's deletion alike. Real database, real model."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import EmbeddingStatus, Memory
from memory.selectors.memories import SearchQuery, memory_search
from memory.services import sweeps
from memory.services.memories import episode_store, memory_forget, memory_supersede
from memory.services.purge import principal_purge
from memproj.dbroles import as_owner
from tests.conftest import make_identity
from tests.memory.turn_vectors import embed_while, made_from, vector

pytestmark = [pytest.mark.django_db, pytest.mark.real_embedder]

SECRET = "my passport number is ZX-99, kept in the blue drawer of the hallway desk"
REPLY = "ok noted"
QUESTION = "where is my passport kept? blue drawer"
# Other sessions, so that a ranking has something to rank.
OTHERS = [
    "we booked the train to Lyon for Friday morning",
    "the dentist appointment moved to Tuesday",
    "remember to water the tomatoes twice a week",
    "my sister's birthday party is at the lake house",
]


def semantic(caller, text: str) -> list[str]:
    return [h.memory.content for h in memory_search(caller=caller, query=SearchQuery(text, mode="semantic", limit=3))]


def store(caller, content: str, session: str = "s1") -> Memory:
    return episode_store(caller=caller, content=content, butler="b", session_id=session)


@pytest.fixture
def others(member):
    return [store(member.caller, text, session=f"other-{i}") for i, text in enumerate(OTHERS)]


def test_forgetting_a_turn_takes_its_text_out_of_the_next_turns_vector(
    member, others, django_capture_on_commit_callbacks
):
    first = store(member.caller, SECRET)
    second = store(member.caller, REPLY)
    assert made_from(second, REPLY, previous=SECRET)  # the secret is in the reply's vector
    assert semantic(member.caller, QUESTION)[:2] == [SECRET, REPLY]

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        memory_forget(caller=member.caller, kind="episode", memory_id=first.pk)
    # At once, before any worker ran: the reply has no vector, so nothing ranks on the secret.
    row = Memory.objects.get(pk=second.pk)
    assert (row.embedding, row.embedding_status) == (None, EmbeddingStatus.PENDING)
    assert REPLY not in semantic(member.caller, QUESTION)
    # The reply is still found by its own words (keyword channel).
    assert REPLY in [h.memory.content for h in memory_search(caller=member.caller, query=SearchQuery(REPLY))]

    # The write's follow-up (the outbox's embed task, eager here) embeds it again, alone.
    for callback in callbacks:
        callback()
    assert made_from(second, REPLY)
    assert Memory.objects.get(pk=second.pk).embedding_model == "all-MiniLM-L6-v2+ctx1short"
    assert REPLY not in semantic(member.caller, QUESTION)


def test_the_next_turn_takes_the_turn_before_the_forgotten_one_and_never_a_hidden_or_foreign_one(
    member, outsider, django_capture_on_commit_callbacks
):
    expired = store(member.caller, "an expired question about holidays")
    retracted = store(member.caller, "a forgotten question about cars")
    foreign = store(outsider.caller, "another tenant's turn in a session of the same name")
    secret = store(member.caller, SECRET)
    reply = store(member.caller, REPLY)
    memory_forget(caller=member.caller, kind="episode", memory_id=retracted.pk)
    Memory.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert foreign.session_id == reply.session_id
    with django_capture_on_commit_callbacks(execute=True):
        memory_forget(caller=member.caller, kind="episode", memory_id=secret.pk)
    # Its previous turn now is the expired one (the latest active turn before
    # it), whose TTL passed: it is embedded alone.
    assert made_from(reply, REPLY)

    # The middle turn of three: the turn after it takes the one before it.
    first = store(member.caller, "Did you like Rome?", session="s2")
    middle = store(member.caller, SECRET, session="s2")
    last = store(member.caller, REPLY, session="s2")
    with django_capture_on_commit_callbacks(execute=True):
        memory_forget(caller=member.caller, kind="episode", memory_id=middle.pk)
    assert made_from(last, REPLY, previous="Did you like Rome?")
    assert made_from(first, "Did you like Rome?")


def test_forgetting_the_last_turn_of_a_session_changes_no_other_vector(member, others):
    first = store(member.caller, "Did you like Rome?")
    last = store(member.caller, SECRET)
    before = {m.pk: (m.embedding_status, vector(m)) for m in [first, *others]}
    memory_forget(caller=member.caller, kind="episode", memory_id=last.pk)
    assert {m.pk: (Memory.objects.get(pk=m.pk).embedding_status, vector(m)) for m in [first, *others]} == before
    # A last turn whose TTL passed is no one's previous turn either: a turn
    # stored after it is embedded alone.
    expiring = store(member.caller, SECRET, session="s2")
    Memory.objects.filter(pk=expiring.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    after = store(member.caller, REPLY, session="s2")
    assert made_from(after, REPLY)


def test_retrieval_of_the_other_turns_is_unchanged(member, others, django_capture_on_commit_callbacks):
    first = store(member.caller, "Did you like Rome?")
    store(member.caller, "Loved it, the food above all.")
    secret = store(member.caller, SECRET, session="s2")
    store(member.caller, REPLY, session="s2")
    queries = ["train to Lyon", "food in Rome", "birthday at the lake", "tomatoes"]
    before = {q: semantic(member.caller, q) for q in queries}
    assert semantic(member.caller, QUESTION)[:2] == [SECRET, REPLY]
    with django_capture_on_commit_callbacks(execute=True):
        memory_forget(caller=member.caller, kind="episode", memory_id=secret.pk)
    # Only what the forgotten turn brought is gone; every other ranking is as it was.
    assert {q: semantic(member.caller, q) for q in queries} == before
    assert SECRET not in semantic(member.caller, QUESTION) and REPLY not in semantic(member.caller, QUESTION)
    assert made_from(first, "Did you like Rome?")


def test_a_superseded_turn_leaves_the_next_turns_vector(member, django_capture_on_commit_callbacks):
    old = store(member.caller, SECRET)
    reply = store(member.caller, REPLY)
    correction = store(member.caller, "correction: it is in the red box", session="s2")
    with django_capture_on_commit_callbacks(execute=True):
        memory_supersede(caller=member.caller, old_id=old.pk, new_id=correction.pk)
    assert made_from(reply, REPLY)


@pytest.mark.django_db(transaction=True)
def test_purging_a_principal_reembeds_the_turns_of_others_after_theirs():
    """A purge runs as the database owner, committed (its follow-up then runs)."""
    member = make_identity("tenant-a", "member")
    assistant = make_identity("tenant-a", "assistant")
    secret = store(member.caller, SECRET)
    reply = store(assistant.caller, REPLY)
    assert member.caller.principal_id is not None
    with as_owner():
        principal_purge(principal_id=member.caller.principal_id)
    assert not Memory.objects.filter(pk=secret.pk).exists()
    assert made_from(reply, REPLY)
    assert REPLY not in semantic(assistant.caller, QUESTION)[:1]


def _as_if_embedded_before_it_expired(expired: Memory, expires_at, *turns: Memory) -> None:
    """The clock moved on: the turn's TTL passed after the turns after it got their vectors."""
    Memory.objects.filter(pk=expired.pk).update(expires_at=expires_at)
    Memory.objects.filter(pk__in=[t.pk for t in turns]).update(updated_at=expires_at - timedelta(hours=1))


def test_the_expiry_sweep_reembeds_the_turn_after_one_whose_ttl_passed(
    member, others, django_capture_on_commit_callbacks
):
    secret = store(member.caller, SECRET)
    reply = store(member.caller, REPLY)
    _as_if_embedded_before_it_expired(secret, timezone.now() - timedelta(minutes=5), reply)
    with django_capture_on_commit_callbacks(execute=True):
        sweeps.memories_expire()
    assert Memory.objects.filter(pk=secret.pk).exists()  # kept for the retention period
    assert made_from(reply, REPLY)
    assert REPLY not in semantic(member.caller, QUESTION)[:1]
    # Idempotent: the new vector was made after the TTL passed.
    assert sweeps.expired_turns_unembed().processed == 0


def test_the_expiry_sweeps_deletion_reembeds_what_the_first_look_missed(
    member, django_capture_on_commit_callbacks, settings
):
    secret = store(member.caller, SECRET)
    reply = store(member.caller, REPLY)
    long_ago = timezone.now() - timedelta(days=settings.MEMPROJ_PIPELINE["EXPIRED_RETENTION_DAYS"] + 2)
    _as_if_embedded_before_it_expired(secret, long_ago, reply)
    assert sweeps.expired_turns_unembed().processed == 0  # past the lookback
    with django_capture_on_commit_callbacks(execute=True):
        result = sweeps.memories_expire()
    assert result.ids == [secret.pk]
    assert made_from(reply, REPLY)


def test_a_vector_made_while_the_previous_turn_was_forgotten_is_not_written(member, settings, monkeypatch):
    """The worker read the previous turn, and a forget committed while the
    model ran: the vector is not written; the turn waits for its next embed."""
    settings.MEMPROJ = {**settings.MEMPROJ, "EMBED_MODE": "async"}
    secret = store(member.caller, SECRET)
    reply = store(member.caller, REPLY)
    # What a forget that commits while the model runs leaves: the turn retracted.
    embed_while(monkeypatch, reply, lambda: Memory.objects.filter(pk=secret.pk).update(validity="retracted"))
    assert made_from(reply, REPLY)
