"""A turn is embedded with its previous turn (memory/embedtext.py) only when
every reader who can see the turn can see that previous turn too: when both
are of the same boundary class. A ``secret`` turn (its class hidden from every
read by the default policy) followed by a short ``internal`` or ``public``
reply must not make the reply findable by the secret's words through the
vector channel. Every path that builds the text: the store, the bulk store,
the worker's embed batch (an import's turns, the retry sweep), the re-embed
sweep. Turns of one class (every benchmark's data) are embedded as before.
Real database, real model."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from memory.models import EmbeddingStatus, Memory
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.imports import memories_import
from memory.services.memories import episode_store, episodes_store_bulk, memory_forget
from memory.services.reembedding import memories_mark_stale, memories_reembed
from tests.memory.turn_vectors import embed_while, made_from

pytestmark = [pytest.mark.django_db, pytest.mark.real_embedder]

SECRET = "my passport number is ZX-99, kept in the blue drawer of the hallway desk"
REPLY = "ok noted"
QUESTION = "where is my passport kept? blue drawer"
OTHERS = [
    "we booked the train to Lyon for Friday morning",
    "the dentist appointment moved to Tuesday",
    "remember to water the tomatoes twice a week",
    "my sister's birthday party is at the lake house",
]
HEADER = {"type": "header", "format": "memproj-export/1", "tenant": "{}"}


def semantic(caller, text: str, limit: int = 3) -> list[str]:
    hits = memory_search(caller=caller, query=SearchQuery(text, mode="semantic", limit=limit))
    return [h.memory.content for h in hits]


def turn(content: str, boundary_class: str, minutes_ago: float, session: str = "s1", **fields: Any) -> dict:
    at = (timezone.now() - timedelta(minutes=minutes_ago)).isoformat()
    return {
        "type": "memory",
        "id": str(uuid.uuid4()),
        "kind": "episode",
        "content": content,
        "session_id": session,
        "butler": "b",
        "boundary_class": boundary_class,
        "created_at": at,
        "expires_at": (timezone.now() + timedelta(days=7)).isoformat(),
        **fields,
    }


def imported(caller, tmp_path: Path, rows: list[dict]) -> list[uuid.UUID]:
    """Store turns of given boundary classes the way they arrive in a tenant
    (an import of memproj's own export keeps each memory's class): pending,
    embedded by the worker from the stored rows."""
    path = tmp_path / f"export-{uuid.uuid4().hex[:6]}.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [HEADER, *rows]) + "\n")
    memories_import(caller=caller, system="memproj", location=str(path))
    return [Memory.objects.get(pk=r["id"]).pk for r in rows]


@pytest.fixture
def others(member):
    return [
        episode_store(caller=member.caller, content=text, butler="b", session_id=f"other-{i}")
        for i, text in enumerate(OTHERS)
    ]


def _reader_sees_no_secret(caller) -> None:
    # The default policy: secret is hidden from every read; the reply is found only by its own words.
    assert SECRET not in semantic(caller, QUESTION, limit=10)
    assert REPLY not in semantic(caller, QUESTION)[:1]


def test_a_secret_turn_is_not_in_the_vector_of_the_reply_stored_after_it(
    member, others, tmp_path, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        (secret,) = imported(member.caller, tmp_path, [turn(SECRET, "secret", minutes_ago=1)])
    assert made_from(secret, SECRET)
    reply = episode_store(caller=member.caller, content=REPLY, butler="b", session_id="s1")
    assert reply.boundary_class == "internal"
    _reader_sees_no_secret(member.caller)
    assert made_from(reply.pk, REPLY)


def test_a_secret_turn_is_not_in_the_vectors_of_a_bulk_store(
    member, others, tmp_path, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        imported(member.caller, tmp_path, [turn(SECRET, "secret", minutes_ago=1)])
    first, second = episodes_store_bulk(
        caller=member.caller,
        episodes=[
            {"content": REPLY, "butler": "b", "session_id": "s1"},
            {"content": "and the car keys?", "butler": "b", "session_id": "s1"},
        ],
    )
    assert made_from(first.pk, REPLY)
    # The turns of the batch are of one class: the second still takes the first.
    assert made_from(second.pk, "and the car keys?", previous=REPLY)
    _reader_sees_no_secret(member.caller)


def test_the_worker_embeds_a_public_reply_without_the_secret_turn_before_it(
    member, others, tmp_path, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        secret, reply = imported(
            member.caller,
            tmp_path,
            [turn(SECRET, "secret", minutes_ago=2), turn(REPLY, "public", minutes_ago=1)],
        )
    assert Memory.objects.get(pk=reply).embedding_status == EmbeddingStatus.READY
    _reader_sees_no_secret(member.caller)
    assert made_from(reply, REPLY)
    # Nor does re-embedding (a model or text version change) bring it in.
    memories_mark_stale(tenant_id=member.caller.tenant_id)
    while memories_reembed(tenant_id=member.caller.tenant_id).more:
        pass
    assert made_from(reply, REPLY)
    assert made_from(secret, SECRET)


def test_turns_of_one_class_are_embedded_with_their_previous_turn_as_before(
    member, tmp_path, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        _, pii_reply, _, public_reply = imported(
            member.caller,
            tmp_path,
            [
                turn("call Ann on 555-0100 about the lease", "pii", minutes_ago=4),
                turn(REPLY, "pii", minutes_ago=3),
                turn("the museum opens at nine", "public", minutes_ago=2, session="s2"),
                turn("great", "public", minutes_ago=1, session="s2"),
            ],
        )
    assert made_from(pii_reply, REPLY, previous="call Ann on 555-0100 about the lease")
    assert made_from(public_reply, "great", previous="the museum opens at nine")
    assert Memory.objects.get(pk=public_reply).embedding_model == "all-MiniLM-L6-v2+ctx1short"
    # And a store after a turn of its own class (internal, episode_store's) takes it.
    first = episode_store(caller=member.caller, content="Did you like Rome?", butler="b", session_id="s3")
    second = episode_store(caller=member.caller, content="Loved it", butler="b", session_id="s3")
    assert made_from(first.pk, "Did you like Rome?")
    assert made_from(second.pk, "Loved it", previous="Did you like Rome?")


def test_forgetting_a_turn_of_another_class_reembeds_the_next_turn_from_the_visible_one(
    member, tmp_path, django_capture_on_commit_callbacks
):
    """The turn before a forgotten one may be of the next turn's class again:
    the next turn is embedded with it (``following_turns`` does not skip a
    next turn of another class)."""
    with django_capture_on_commit_callbacks(execute=True):
        _, secret, reply = imported(
            member.caller,
            tmp_path,
            [
                turn("Did you like Rome?", "internal", minutes_ago=3),
                turn(SECRET, "secret", minutes_ago=2),
                turn(REPLY, "internal", minutes_ago=1),
            ],
        )
    assert made_from(reply, REPLY)
    with django_capture_on_commit_callbacks(execute=True):
        memory_forget(caller=member.caller, kind="episode", memory_id=secret)
    assert made_from(reply, REPLY, previous="Did you like Rome?")


def test_a_vector_made_while_the_previous_turn_changed_class_is_not_written(member, settings, monkeypatch):
    """The worker read a previous turn of the turn's own class, and its class
    changed while the model ran: the vector is not written; the turn waits for
    its next embed, which leaves the previous turn out."""
    settings.MEMPROJ = {**settings.MEMPROJ, "EMBED_MODE": "async"}
    first = episode_store(caller=member.caller, content=SECRET, butler="b", session_id="s1")
    reply = episode_store(caller=member.caller, content=REPLY, butler="b", session_id="s1")
    embed_while(monkeypatch, reply, lambda: Memory.objects.filter(pk=first.pk).update(boundary_class="secret"))
    assert made_from(reply.pk, REPLY)
