"""An outcome that makes roampal's lifecycle delete a memory also drops the
vector of the turn after it, so the feedback writes two rows. It locks them
in primary-key order, as every writer of several rows does (a search's
bookkeeping, a vector write): locked memory first and turn after, a writer
holding the turn and waiting for the memory would deadlock with it. Real
concurrent transactions, each on its own connection, ordered by what
PostgreSQL reports waiting; real model."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import close_old_connections, connection, transaction

from memory.models import Memory
from memory.services.collections import working_store
from memory.services.feedback import memory_feedback
from tests.memory.turn_vectors import made_from

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.real_embedder]

WAIT = 60  # seconds: only a broken test waits this long


def _turns_in_descending_key_order(caller):  # type: ignore[no-untyped-def]
    """A working memory and the reply after it whose row sorts first by key
    (ids are random: a few conversations give one)."""
    for n in range(20):
        memory = working_store(
            caller=caller, content=f"we chose Lisbon for the offsite, plan {n}", conversation_id=f"c{n}"
        )
        reply = working_store(caller=caller, content="ok noted", conversation_id=f"c{n}")
        if reply.pk < memory.pk:
            return memory, reply
    raise AssertionError("no reply sorted before its memory in 20 conversations")


def _backend_waits_for_a_row_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def test_a_deleting_outcome_locks_the_turn_after_before_the_memory(member):
    memory, reply = _turns_in_descending_key_order(member.caller)
    # One failed outcome more and the lifecycle deletes it.
    Memory.objects.filter(pk=memory.pk).update(outcome_score=0.05)
    holding, release = threading.Event(), threading.Event()
    feedback_pid: list[int] = []
    errors: list[BaseException] = []

    def hold_the_reply() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT id FROM memory_memory WHERE id = %s FOR NO KEY UPDATE", [reply.pk])
                holding.set()
                assert release.wait(WAIT), "the test never released the reply"
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            close_old_connections()

    def send_the_outcome() -> None:
        try:
            feedback_pid.append(connection.cursor().connection.info.backend_pid)
            memory_feedback(caller=member.caller, memory_id=memory.pk, signal="failed")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            close_old_connections()

    holder = threading.Thread(target=hold_the_reply)
    holder.start()
    assert holding.wait(WAIT)
    sender = threading.Thread(target=send_the_outcome)
    sender.start()
    try:
        deadline = time.monotonic() + WAIT
        while not (feedback_pid and _backend_waits_for_a_row_lock(feedback_pid[0])):
            assert time.monotonic() < deadline and not errors, errors
            time.sleep(0.05)
        # The feedback waits for the reply's row; the memory's row is not yet its.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT id FROM memory_memory WHERE id = %s FOR NO KEY UPDATE NOWAIT", [memory.pk])
            assert cursor.fetchone() == (memory.pk,)
    finally:
        release.set()
        holder.join(WAIT)
        sender.join(WAIT)
    assert not errors, errors
    assert Memory.objects.get(pk=memory.pk).validity == "retracted"
    # Its vector dropped, then made again (the embed follow-up) without the deleted turn.
    assert Memory.objects.get(pk=reply.pk).embedding is None or made_from(reply.pk, "ok noted")
