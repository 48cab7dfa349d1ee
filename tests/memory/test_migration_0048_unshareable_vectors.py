"""Migration 0048: a vector written before a turn's previous turn had to be of
the turn's boundary class, live and active (memory/embedtext.py) is dropped
when it may hold a previous turn that may not go in now, and the embedding
retry sweep makes it again from what is visible. A vector that holds only
what may go in is left as it is. Real database, real model, the real
migration run backwards (a no-op) and forwards."""

from __future__ import annotations

import importlib
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from memory import embedtext
from memory.embeddings import get_embedder
from memory.models import EmbeddingStatus, Memory, Validity
from memory.services.reembedding import embeddings_retry
from memproj.dbroles import as_owner
from tests.memory.test_previous_turn_boundary import OTHERS, QUESTION, REPLY, SECRET, imported, semantic, turn
from tests.memory.turn_vectors import embedded, made_from

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.real_embedder]

MIGRATION = "memory.migrations.0048_reembed_unshareable_previous_turns"

FORGOTTEN = "my bank PIN is 4417, the one for the savings account at the corner branch"
FORGOTTEN_REPLY = "sure, got it"
EXPIRED = "the wifi password at the lake cabin is moonlight42"
EXPIRED_REPLY = "thanks, will try"
# What a reader asks for each turn that may not go into the reply after it now, and that reply.
ASKED = {
    QUESTION: REPLY,
    "what is my bank PIN for the savings account": FORGOTTEN_REPLY,
    "the wifi password at the lake cabin": EXPIRED_REPLY,
}
LONG_SECRET = "the alarm code for the warehouse door is 7781 " * 8  # over PREVIOUS_CHARS: ctx1short leaves it out


def written_by_old_code(turn_id: uuid.UUID, content: str, previous: str) -> None:
    """The turn's vector as the code before the previous-turn rules wrote it:
    made from ``previous`` whatever its class or state."""
    identity = embedtext.embedding_identity(get_embedder().model_name, in_session=True)
    Memory.objects.filter(pk=turn_id).update(
        embedding=embedded(content, previous), embedding_model=identity, embedding_status=EmbeddingStatus.READY
    )


def stored_bytes(turn_id: uuid.UUID) -> tuple[object, ...]:
    """The row's vector as PostgreSQL holds it, with what says when and how it was made."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT embedding::text, embedding_model, embedding_status, updated_at FROM memory_memory WHERE id = %s",
            [turn_id],
        )
        return cursor.fetchone()


def test_the_migration_drops_vectors_made_from_a_previous_turn_that_may_not_go_in(member, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(importlib.import_module(MIGRATION), "BATCH_SIZE", 2)  # the table in several batches
    caller = member.caller
    for i, text in enumerate(OTHERS):
        imported(caller, tmp_path, [turn(text, "internal", minutes_ago=30, session=f"other-{i}")])
    # A secret turn and the public reply after it.
    _, reply = imported(
        caller, tmp_path, [turn(SECRET, "secret", minutes_ago=10), turn(REPLY, "public", minutes_ago=9)]
    )
    # A turn forgotten by the code before: the turn after it kept it in its vector.
    _, forgotten, forgotten_reply = imported(
        caller,
        tmp_path,
        [
            turn("Did you like Rome?", "internal", minutes_ago=8, session="s2"),
            turn(FORGOTTEN, "internal", minutes_ago=7, session="s2"),
            turn(FORGOTTEN_REPLY, "internal", minutes_ago=6, session="s2"),
        ],
    )
    # A turn past its TTL, of the reply's class.
    expired, expired_reply = imported(
        caller,
        tmp_path,
        [
            turn(EXPIRED, "internal", minutes_ago=5, session="s3"),
            turn(EXPIRED_REPLY, "internal", minutes_ago=4, session="s3"),
        ],
    )
    # Left alone: turns of one class, and a reply after a turn of another class
    # too long for ctx1short to take.
    _, same_class = imported(
        caller,
        tmp_path,
        [
            turn("the museum opens at nine", "public", minutes_ago=3, session="s4"),
            turn("great", "public", minutes_ago=2, session="s4"),
        ],
    )
    _, after_long = imported(
        caller,
        tmp_path,
        [
            turn(LONG_SECRET, "secret", minutes_ago=2, session="s5"),
            turn("fine", "internal", minutes_ago=1, session="s5"),
        ],
    )
    assert made_from(same_class, "great", previous="the museum opens at nine")
    assert made_from(after_long, "fine")

    written_by_old_code(reply, REPLY, previous=SECRET)
    written_by_old_code(forgotten_reply, FORGOTTEN_REPLY, previous=FORGOTTEN)
    Memory.objects.filter(pk=forgotten).update(validity=Validity.RETRACTED)
    written_by_old_code(expired_reply, EXPIRED_REPLY, previous=EXPIRED)
    Memory.objects.filter(pk=expired).update(expires_at=timezone.now() - timedelta(minutes=1))
    untouched = {pk: stored_bytes(pk) for pk in (same_class, after_long)}
    # The old state: a reader finds each reply by the words of a turn it may not
    # see (the secret's class, a forgotten turn, an expired one).
    for asked, found in ASKED.items():
        assert semantic(caller, asked)[:1] == [found], asked

    with as_owner():
        call_command("migrate", "memory", "0047", verbosity=0)
    try:
        assert made_from(reply, REPLY, previous=SECRET)  # backwards changes nothing
    finally:
        with as_owner():
            call_command("migrate", "memory", verbosity=0)

    for asked, found in ASKED.items():
        assert found not in semantic(caller, asked, limit=10), asked
    for pk in (reply, forgotten_reply, expired_reply):
        row = Memory.objects.get(pk=pk)
        assert (row.embedding, row.embedding_status, row.embedding_attempts) == (None, EmbeddingStatus.PENDING, 0)
    assert {pk: stored_bytes(pk) for pk in untouched} == untouched

    # The embedding retry sweep (the beat's embeddings-retry) makes them again
    # from what may go in now; these rows are past its grace period.
    later = timezone.now() + timedelta(hours=1)
    while embeddings_retry(now=later).more:
        pass
    assert made_from(reply, REPLY)
    assert made_from(forgotten_reply, FORGOTTEN_REPLY, previous="Did you like Rome?")
    assert made_from(expired_reply, EXPIRED_REPLY)
    for asked, found in ASKED.items():
        assert semantic(caller, found, limit=1) == [found]
        assert found not in semantic(caller, asked)[:1], asked
    assert {pk: stored_bytes(pk) for pk in untouched} == untouched
