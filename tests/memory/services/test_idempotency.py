"""memory.services.idempotency against real PostgreSQL: a duplicate that
arrives while the first request with its key still runs waits for it (and gets
a retryable error past the wait); a failed write keeps no key."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from memory.errors import InvalidArgument
from memory.models import IdempotencyKey
from memory.services.idempotency import IdempotentAnswer, KeyInFlight, KeyReused, idempotent

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_duplicate_waits_for_the_first_request_then_replays_its_answer(member, settings):
    settings.MEMPROJ = {**settings.MEMPROJ, "IDEMPOTENCY_WAIT_SECONDS": 0.5}
    started, release = threading.Event(), threading.Event()
    answers: list[IdempotentAnswer] = []

    def slow() -> dict:
        started.set()
        assert release.wait(10)
        return {"stored": 1}

    def first() -> None:
        try:
            answers.append(idempotent(caller=member.caller, scope="t:w", key="k", request={"a": 1}, run=slow))
        finally:
            connection.close()

    worker = threading.Thread(target=first)
    worker.start()
    assert started.wait(10)
    # Past the wait: a coded, retryable error, and the duplicate ran nothing.
    with pytest.raises(KeyInFlight) as waited:
        idempotent(caller=member.caller, scope="t:w", key="k", request={"a": 1}, run=lambda: {"stored": 2})
    assert waited.value.code == "TIMEOUT"
    # Within the wait: the duplicate gets the first answer once it commits.
    timer = threading.Timer(0.2, release.set)
    timer.start()
    settings.MEMPROJ = {**settings.MEMPROJ, "IDEMPOTENCY_WAIT_SECONDS": 10}
    replay = idempotent(caller=member.caller, scope="t:w", key="k", request={"a": 1}, run=lambda: {"stored": 3})
    worker.join(10)
    assert answers[0].answer == {"stored": 1} and not answers[0].replayed
    assert replay.answer == {"stored": 1} and replay.replayed
    assert IdempotencyKey.objects.count() == 1


def test_a_failed_write_keeps_no_key_and_other_arguments_conflict(member):
    def fails() -> dict:
        raise InvalidArgument("no")

    with pytest.raises(InvalidArgument):
        idempotent(caller=member.caller, scope="t:w", key="k", request={"a": 1}, run=fails)
    assert IdempotencyKey.objects.count() == 0
    done = idempotent(caller=member.caller, scope="t:w", key="k", request={"a": 1}, run=lambda: {"ok": True})
    assert done.answer == {"ok": True} and not done.replayed
    with pytest.raises(KeyReused) as reused:
        idempotent(caller=member.caller, scope="t:w", key="k", request={"a": 2}, run=lambda: {"ok": False})
    assert reused.value.code == "CONFLICT"
    with pytest.raises(InvalidArgument):
        idempotent(caller=member.caller, scope="t:w", key="x" * 256, request={"a": 1}, run=lambda: {})
