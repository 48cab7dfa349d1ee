"""A store embeds a new turn with its previous turn before its transaction
takes the tenant's write lock (the model must not run under it). A forget of
that previous turn committing in between must not leave the forgotten text
in the new turn's vector: the store checks under the lock that the text is
still the one it would make, and else stores the turn pending, for the
worker to embed from what is visible then. Real concurrent transactions
(each thread its own connection), ordered by events, real model."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from memory.models import EmbeddingStatus, Memory
from memory.services import memories
from memory.services.memories import episode_store, episodes_store_batches, episodes_store_bulk, memory_forget
from tests.conftest import make_identity
from tests.memory.turn_vectors import made_from

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.real_embedder]

SECRET = "my passport number is ZX-99, kept in the blue drawer of the hallway desk"
REPLY = "ok noted"
WAIT = 60  # seconds: only a broken test waits this long


def forget_in_the_window(monkeypatch, name: str, caller, memory_id) -> list[BaseException]:
    """Once the store has embedded (``memories.<name>`` returned), and before
    its transaction opens, another thread, on its own connection, forgets
    ``memory_id`` and commits; then the store goes on."""
    real: Callable[..., Any] = getattr(memories, name)
    embedded, forgotten = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def embed_then_wait(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        embedded.set()
        assert forgotten.wait(WAIT), "the forget did not commit"
        return out

    def forget() -> None:
        try:
            assert embedded.wait(WAIT), "the store did not embed"
            memory_forget(caller=caller, kind="episode", memory_id=memory_id)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connection.close()
            forgotten.set()

    monkeypatch.setattr(memories, name, embed_then_wait)
    threading.Thread(target=forget, daemon=True).start()
    return errors


@pytest.fixture
def member():
    return make_identity("tenant-a", "member")


def test_a_turn_forgotten_while_the_next_one_is_embedded_is_not_in_its_vector(member, monkeypatch):
    secret = episode_store(caller=member.caller, content=SECRET, butler="b", session_id="s1")
    errors = forget_in_the_window(monkeypatch, "_embed_for_store", member.caller, secret.pk)
    reply = episode_store(caller=member.caller, content=REPLY, butler="b", session_id="s1")
    assert errors == []
    assert Memory.objects.get(pk=secret.pk).validity == "retracted"
    # Stored pending, then embedded by its follow-up (committed: it ran) from what is visible: alone.
    assert Memory.objects.get(pk=reply.pk).embedding_status == EmbeddingStatus.READY
    assert made_from(reply.pk, REPLY)


def test_a_store_whose_previous_turn_stays_keeps_its_vector(member, monkeypatch):
    first = episode_store(caller=member.caller, content="Did you like Rome?", butler="b", session_id="s1")
    other = episode_store(caller=member.caller, content="unrelated", butler="b", session_id="s2")
    errors = forget_in_the_window(monkeypatch, "_embed_for_store", member.caller, other.pk)
    reply = episode_store(caller=member.caller, content="Loved it", butler="b", session_id="s1")
    assert errors == []
    assert made_from(reply.pk, "Loved it", previous=first.content)


def test_a_turn_forgotten_while_a_bulk_store_embeds_is_not_in_its_vectors(member, monkeypatch):
    secret = episode_store(caller=member.caller, content=SECRET, butler="b", session_id="s1")
    kept = episode_store(caller=member.caller, content="Did you like Rome?", butler="b", session_id="s2")
    errors = forget_in_the_window(monkeypatch, "_embed_many_for_store", member.caller, secret.pk)
    reply, second, rome = episodes_store_bulk(
        caller=member.caller,
        episodes=[
            {"content": REPLY, "butler": "b", "session_id": "s1"},
            {"content": "and the car keys?", "butler": "b", "session_id": "s1"},
            {"content": "Loved it", "butler": "b", "session_id": "s2"},
        ],
    )
    assert errors == []
    assert made_from(reply.pk, REPLY)
    # The others' texts did not change: written with the vectors made before the lock.
    assert made_from(second.pk, "and the car keys?", previous=REPLY)
    assert made_from(rome.pk, "Loved it", previous=kept.content)


def test_a_turn_forgotten_between_two_batches_of_a_stream_is_not_in_the_next_batchs_vectors(member):
    """The next batch's texts are made (from the turns of the batch before,
    not committed yet) while that batch is written; the forget commits once
    it is, before the next batch is written."""
    stream = episodes_store_batches(
        caller=member.caller,
        batches=[
            [{"content": SECRET, "butler": "b", "session_id": "s1"}],
            [{"content": REPLY, "butler": "b", "session_id": "s1"}],
        ],
    )
    (secret,) = next(stream)
    done: list[BaseException] = []

    def forget() -> None:
        try:
            memory_forget(caller=member.caller, kind="episode", memory_id=secret.pk)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            done.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=forget)
    thread.start()
    thread.join(WAIT)
    assert done == []
    (reply,) = next(stream)
    assert list(stream) == []
    assert made_from(reply.pk, REPLY)
