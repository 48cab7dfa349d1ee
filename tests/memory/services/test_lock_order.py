"""Writers that change several memories take them in primary-key order, the
order readers' bookkeeping (recall's reference counts) takes them in, so the
two never wait on each other in a circle.

The duplicate merge is the case that broke: it merged a group pair by pair,
each pair in key order but the pairs in no order, and a recall bumping two
rows of the group in key order deadlocked with it under 32 writers."""

from __future__ import annotations

import threading
import uuid
from types import SimpleNamespace

import pytest
from django.db import close_old_connections, connection, transaction

from memory.services import followups, memories
from memory.services.conflicts import memory_conflict_check
from memory.services.locks import memory_rows_lock
from memory.services.memories import fact_store

pytestmark = pytest.mark.django_db(transaction=True)


def wait_until_blocked(pid_holder: list[int], timeout: float = 20.0) -> None:
    """Until the backend of that pid waits on a row lock."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid_holder:
            with connection.cursor() as cursor:
                cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid_holder[0]])
                row = cursor.fetchone()
            if row and row[0] == "Lock":
                return
        time.sleep(0.05)
    raise AssertionError("the other session never waited on the held row")


def in_other_session(fn) -> tuple[threading.Thread, list[int], list[object]]:  # type: ignore[no-untyped-def]
    """``fn`` in a thread of its own, with its own database session, not yet
    started; the list that will hold that session's backend pid (for
    ``wait_until_blocked``) and the one that will hold ``fn``'s result or the
    exception it raised."""
    pid: list[int] = []
    outcome: list[object] = []

    def run() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid.append(cursor.fetchone()[0])
            outcome.append(fn())
        except BaseException as exc:  # the test asserts on it
            outcome.append(exc)
        finally:
            close_old_connections()

    return threading.Thread(target=run), pid, outcome


def assert_rows_free(memory_ids: list[uuid.UUID]) -> None:
    """The current connection can lock every one of these rows at once (NOWAIT fails on
    a row another session holds)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM memory_memory WHERE id = ANY(%s::uuid[]) ORDER BY id FOR NO KEY UPDATE NOWAIT",
            [[str(pk) for pk in memory_ids]],
        )
        assert len(cursor.fetchall()) == len(memory_ids)


def test_duplicate_merge_waits_for_the_lowest_row_before_holding_any_other(member, monkeypatch):
    # Ids chosen so the merge's pair-by-pair order (newest duplicate first)
    # differs from key order: the oldest duplicate has the lowest key.
    ids = iter(uuid.UUID(f"00000000-0000-4000-8000-00000000000{n}") for n in (1, 2, 3, 9))
    monkeypatch.setattr(memories, "uuid", SimpleNamespace(uuid4=lambda: next(ids)))
    # The checks run here, by hand, not on commit.
    monkeypatch.setattr(followups, "_enqueue", lambda *args, **kwargs: None)
    stored = [
        fact_store(caller=member.caller, subject=None, predicate=None, content="Ana keeps bees on the roof").memory
        for _ in range(4)
    ]
    monkeypatch.undo()
    keeper = stored[-1]
    group = sorted(m.pk for m in stored)
    lowest, others = group[0], group[1:]
    assert lowest != keeper.pk

    checker, checker_pid, outcome = in_other_session(lambda: memory_conflict_check(memory_id=keeper.pk))
    with transaction.atomic():
        memory_rows_lock([lowest])  # a recall bumping the group holds its first row
        checker.start()
        wait_until_blocked(checker_pid)
        # While the checker waits for that row it must hold none of the others.
        assert_rows_free(others)
    checker.join(timeout=60)

    [result] = outcome
    assert not isinstance(result, BaseException), result
    assert sorted(result.merged) == sorted(m.pk for m in stored[:-1])  # type: ignore[attr-defined]
    assert result.merged_into == keeper.pk  # type: ignore[attr-defined]


def test_the_expiry_sweep_waits_for_the_lowest_row_before_holding_any_other(member, monkeypatch):
    """An expired fact's older versions go with it. The oldest version has the
    lowest key: the sweep must not hold the expired one while it waits for it."""
    from datetime import timedelta

    from django.utils import timezone

    from memory.models import Memory
    from memory.services import sweeps

    ids = iter(uuid.UUID(f"00000000-0000-4000-8000-00000000000{n}") for n in (1, 9))
    monkeypatch.setattr(memories, "uuid", SimpleNamespace(uuid4=lambda: next(ids)))
    monkeypatch.setattr(followups, "_enqueue", lambda *args, **kwargs: None)
    older = fact_store(caller=member.caller, subject="Ana", predicate="lives in", content="Ana lives in Porto").memory
    newer = fact_store(caller=member.caller, subject="Ana", predicate="lives in", content="Ana lives in Lisbon").memory
    monkeypatch.undo()
    assert Memory.objects.get(pk=older.pk).superseded_by_id == newer.pk and older.pk < newer.pk
    Memory.objects.filter(pk=newer.pk).update(expires_at=timezone.now() - timedelta(days=400))

    sweeper, sweeper_pid, outcome = in_other_session(sweeps.memories_expire)
    with transaction.atomic():
        memory_rows_lock([older.pk])  # a reader's bookkeeping holds the older version
        sweeper.start()
        wait_until_blocked(sweeper_pid)
        assert_rows_free([newer.pk])
    sweeper.join(timeout=60)

    [result] = outcome
    assert not isinstance(result, BaseException), result
    assert sorted(result.ids) == [older.pk, newer.pk]  # type: ignore[attr-defined]
    assert not Memory.objects.filter(pk__in=[older.pk, newer.pk]).exists()
