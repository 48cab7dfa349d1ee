"""The clock a vector write checks a previous turn's TTL against. The write
waits for the turn's row lock inside its transaction, and PostgreSQL's
``now()`` is the time that transaction began: a previous turn whose TTL
passed during the wait still counted as retrievable, and the vector holding
its text was written, dated after the TTL, where the expiry sweep (which drops
vectors made before a TTL passed) does not look. The TTL is made to pass by
the writer holding the lock, committing it as it lets go."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from memory.models import EmbeddingStatus, Memory
from memory.services.locks import memory_rows_lock
from memory.services.memories import episode_store
from memory.services.vectors import memory_embed_batch
from tests.conftest import make_identity
from tests.memory.turn_vectors import made_from

pytestmark = pytest.mark.django_db(transaction=True)

PREVIOUS = "the gate code for the garden shed is 8812"
REPLY = "got it, thanks"
WAIT = 60  # seconds: only a broken test waits this long


def waiting_for_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row and row[0])


def test_a_previous_turn_whose_ttl_passes_while_the_vector_write_waits_for_the_row_is_not_written():
    member = make_identity("tenant-a", "member")
    previous = episode_store(
        caller=member.caller, content=PREVIOUS, butler="b", session_id="s1", ttl=timedelta(hours=1)
    )
    reply = episode_store(caller=member.caller, content=REPLY, butler="b", session_id="s1")
    Memory.objects.filter(pk=reply.pk).update(embedding=None, embedding_status=EmbeddingStatus.PENDING)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        writer = cursor.fetchone()[0]
    held, errors = threading.Event(), []

    def hold_the_reply_while_the_ttl_passes() -> None:
        try:
            with transaction.atomic():
                memory_rows_lock([reply.pk])
                held.set()
                deadline = time.monotonic() + WAIT
                while not waiting_for_a_lock(writer) and time.monotonic() < deadline:
                    time.sleep(0.01)
                Memory.objects.filter(pk=previous.pk).update(expires_at=timezone.now())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            held.set()
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_reply_while_the_ttl_passes)
    holder.start()
    assert held.wait(WAIT)
    written = memory_embed_batch(memory_ids=[reply.pk])
    holder.join(WAIT)
    assert errors == []
    assert written == 0, "a vector holding the expired turn's text was written"
    assert Memory.objects.get(pk=reply.pk).embedding_status != EmbeddingStatus.READY
    # Embedded again (as the retry sweep does), the reply holds its own words only.
    assert memory_embed_batch(memory_ids=[reply.pk]) == 1
    assert made_from(reply.pk, REPLY) and not made_from(reply.pk, REPLY, previous=PREVIOUS)
