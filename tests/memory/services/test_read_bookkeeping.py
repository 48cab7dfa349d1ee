"""A read's bookkeeping (recall's and get's reference counts, memento's and
langmem's access times) is one statement that takes its rows in primary-key
order: it loses no increment to a concurrent one, answers with what it
stored, touches no other tenant's rows, and never holds a higher row while it
waits for a lower one (the order every multi-row writer takes them in)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from memory.models import Memory
from memory.services.locks import memory_rows_lock
from memory.services.memories import episode_store, fact_store, memory_accessed_mark, memory_references_bump
from memory.services.referencing import memory_get, memory_recall
from tests.conftest import make_identity
from tests.memory.services.test_lock_order import assert_rows_free, in_other_session, wait_until_blocked

pytestmark = pytest.mark.django_db(transaction=True)


def _stored(member, n: int) -> list[Memory]:
    return [
        episode_store(caller=member.caller, butler="b1", content=f"Ana's bee hive number {i} swarmed in May")
        for i in range(n)
    ]


def test_concurrent_bumps_lose_no_increment_and_each_answers_what_it_stored(member):
    rows = _stored(member, 3)
    ids = [m.pk for m in rows]
    answers: list[object] = []

    def bump() -> None:
        try:
            answers.append(memory_references_bump(caller=member.caller, memory_ids=ids))
        except BaseException as exc:  # asserted below
            answers.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert not [a for a in answers if isinstance(a, BaseException)], answers
    assert sorted(Memory.objects.filter(pk__in=ids).values_list("reference_count", flat=True)) == [8, 8, 8]
    # Each bump saw its own increment: the counts it answered are 1..8 for every row.
    for pk in ids:
        assert sorted(answer[pk][0] for answer in answers) == list(range(1, 9))  # type: ignore[index]


def test_get_and_recall_answer_the_stored_count(member):
    memory = fact_store(
        caller=member.caller, subject="Ana", predicate="keeps", content="Ana keeps bees on the roof"
    ).memory
    first = memory_get(caller=member.caller, kind="fact", memory_id=memory.pk)
    second = memory_get(caller=member.caller, kind="fact", memory_id=memory.pk)
    assert (first.reference_count, second.reference_count) == (1, 2)
    stored = Memory.objects.get(pk=memory.pk)
    assert second.last_referenced_at == stored.last_referenced_at == stored.accessed_at
    recalled = {item.memory.pk: item.memory for item in memory_recall(caller=member.caller, topic="Ana keeps bees")}
    assert recalled[memory.pk].reference_count == Memory.objects.get(pk=memory.pk).reference_count == 3


def test_bookkeeping_never_touches_another_tenants_rows(member):
    [theirs] = _stored(make_identity("tenant-b", "outsider"), 1)
    assert memory_references_bump(caller=member.caller, memory_ids=[theirs.pk]) == {}
    memory_accessed_mark(caller=member.caller, memories=[Memory.objects.get(pk=theirs.pk)])
    untouched = Memory.objects.get(pk=theirs.pk)
    assert (untouched.reference_count, untouched.last_referenced_at) == (0, None)
    assert untouched.accessed_at == theirs.accessed_at


def test_an_access_time_is_written_once_a_minute(member):
    [memory] = _stored(member, 1)
    long_ago = timezone.now() - timedelta(hours=1)
    Memory.objects.filter(pk=memory.pk).update(accessed_at=long_ago)
    memory_accessed_mark(caller=member.caller, memories=[Memory.objects.get(pk=memory.pk)])
    marked = Memory.objects.get(pk=memory.pk).accessed_at
    assert marked is not None and marked > long_ago
    # A row another read marked a moment ago is not written again, even by a
    # reader whose copy still shows the old time.
    memory_accessed_mark(caller=member.caller, memories=[Memory(pk=memory.pk, accessed_at=long_ago)])
    assert Memory.objects.get(pk=memory.pk).accessed_at == marked


def test_a_bump_waits_for_its_lowest_row_holding_none_of_the_others(member):
    ids = sorted(m.pk for m in _stored(member, 4))
    lowest, others = ids[0], ids[1:]
    # Highest first: the statement must sort them itself.
    bumper, bumper_pid, outcome = in_other_session(
        lambda: memory_references_bump(caller=member.caller, memory_ids=list(reversed(ids)))
    )
    with transaction.atomic():
        memory_rows_lock([lowest])
        bumper.start()
        wait_until_blocked(bumper_pid)
        # The waiting bump holds none of the higher rows.
        assert_rows_free(others)
    bumper.join(timeout=60)
    [result] = outcome
    assert not isinstance(result, BaseException), result
    assert isinstance(result, dict), result
    assert set(result) == set(ids)


def _statements_sent(run) -> list[str]:  # type: ignore[no-untyped-def]
    sent: list[str] = []

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        run()
    return sent


def test_a_reads_bookkeeping_commits_without_waiting_for_the_disk_and_answers_what_it_stored(member):
    [memory] = _stored(member, 1)
    answers: list[dict] = []
    sent = _statements_sent(
        lambda: answers.append(memory_references_bump(caller=member.caller, memory_ids=[memory.pk]))
    )
    [bump] = [sql for sql in sent if "UPDATE memory_memory" in sql]
    assert bump.startswith("SET LOCAL synchronous_commit = off;"), bump
    # The UPDATE's RETURNING is read past the setting's empty result.
    assert answers == [{memory.pk: (1, Memory.objects.get(pk=memory.pk).last_referenced_at)}]


def test_bookkeeping_inside_a_callers_transaction_leaves_its_commit_durable(member):
    [memory] = _stored(member, 1)
    with transaction.atomic():
        memory_references_bump(caller=member.caller, memory_ids=[memory.pk])
        memory_accessed_mark(caller=member.caller, memories=[Memory(pk=memory.pk, accessed_at=None)])
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone()[0] == "on"
    assert Memory.objects.get(pk=memory.pk).reference_count == 1
