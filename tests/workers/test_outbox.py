"""Issue 15, failure 1: with the broker down, a committed write answers
success; its follow-up waits in the outbox (same transaction as the write) and
the drain sweep does it once the broker is back - exactly once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from memory.models import FollowUp, FollowUpKind, Memory, MemoryEvent
from memory.services.events import EventType
from memory.services.memories import fact_store, rule_store
from memory.services.pipeline import followups_drain
from memproj.celery import app
from tests.conftest import call, make_identity
from tests.workers.conftest import _reset_amqp
from workers import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker_down(tmp_path: Path) -> Iterator[None]:
    """Celery publishes for real, to a socket nobody listens on."""
    saved = (app.conf.task_always_eager, app.conf.broker_url)
    app.conf.task_always_eager = False
    # The conf reads broker_url from its "broker_url" key (a property without a setter in the stubs): set the key.
    app.conf["broker_url"] = f"redis+socket://{tmp_path / 'nobody-listens.sock'}"
    _reset_amqp()
    yield
    app.conf.task_always_eager, app.conf["broker_url"] = saved
    _reset_amqp()


# The drain's grace period in the test that drains inside it: each write's
# attempt to publish to the missing broker takes seconds, so on a loaded
# machine the writes can take longer than the default grace (60 s) and the
# first of them would already be due.
GRACE = timedelta(hours=1)


def later() -> datetime:
    return timezone.now() + 2 * GRACE  # past the drain's grace period (and the default one)


async def test_writes_answer_success_with_the_broker_down_and_are_followed_up_once(
    broker_down, mcp_client_for, settings
):
    from asgiref.sync import sync_to_async

    settings.MEMPROJ_PIPELINE = {
        **settings.MEMPROJ_PIPELINE,
        "FOLLOWUP_GRACE_SECONDS": int(GRACE.total_seconds()),
    }
    member = await sync_to_async(make_identity)("tenant-a", "member")
    older = await sync_to_async(rule_store)(caller=member.caller, content="Always name the customer in a reply")
    async with mcp_client_for(member) as client:
        newer = await call(client, "memory_store_rule", content="Always name the customer in a reply")
        rule = await call(client, "memory_store_rule", content="always confirm before sending")

    def check() -> None:
        # Both writes committed with their audit event and an open follow-up each.
        for memory_id in (newer["id"], rule["id"]):
            assert Memory.objects.get(pk=memory_id).validity == "active"
            assert MemoryEvent.objects.filter(memory_id=memory_id, event_type=EventType.STORED).count() == 1
            [followup] = FollowUp.objects.filter(memory_id=memory_id)
            assert (followup.kind, followup.done_at) == (FollowUpKind.CONFLICT_CHECK, None)
        # The older fact's follow-up was open too (the broker was down for it as well).
        assert FollowUp.objects.filter(done_at__isnull=True).count() == 3

    await sync_to_async(check)()
    return_to_eager = app.conf.task_always_eager = True  # the broker is back (eager: tasks run in-process)
    assert return_to_eager

    def drain_and_check() -> None:
        assert followups_drain(now=timezone.now()).processed == 0  # still inside the grace period
        result = followups_drain(now=later())
        assert (result.processed, result.failed, result.more) == (3, 0, False)
        assert not FollowUp.objects.filter(done_at__isnull=True).exists()
        # The conflict check ran: the older rule merged into its restatement, once.
        merged = Memory.objects.get(pk=older.id)
        assert (merged.validity, merged.superseded_by_id) == ("superseded", uuid.UUID(newer["id"]))
        assert MemoryEvent.objects.filter(memory_id=older.id, event_type=EventType.SUPERSEDED).count() == 1
        assert MemoryEvent.objects.filter(memory_id=newer["id"], event_type=EventType.CONFIRMED).count() == 1
        # A second drain, or the task redelivered late, finds nothing to do.
        assert followups_drain(now=later()).processed == 0
        assert tasks.memory_conflict_check_task.apply(args=[newer["id"]]).get()["skipped"] == "done"
        assert MemoryEvent.objects.filter(memory_id=newer["id"], event_type=EventType.CONFIRMED).count() == 1

    await sync_to_async(drain_and_check)()


def test_the_drain_runs_in_bounded_batches_and_leaves_pending_embeddings_to_their_sweep(broker_down, settings):
    from memory.models import EmbeddingStatus

    member = make_identity("tenant-a", "member")
    for n in range(3):
        fact_store(caller=member.caller, subject="user", predicate=f"p{n}", content=f"User fact number {n}")
    pending = fact_store(caller=member.caller, subject="user", predicate="pet", content="User has a cat").memory
    Memory.objects.filter(pk=pending.pk).update(embedding_status=EmbeddingStatus.PENDING, embedding=None)
    FollowUp.objects.filter(memory_id=pending.pk).update(kind=FollowUpKind.EMBED)
    app.conf.task_always_eager = True

    first = followups_drain(now=later(), batch_size=2)
    assert (first.processed, first.more) == (2, True)
    second = followups_drain(now=later(), batch_size=2)
    assert (second.processed, second.more) == (1, False)
    # The pending memory's embed follow-up stays open for the embedding retry sweep ...
    assert FollowUp.objects.get(memory_id=pending.pk).done_at is None
    # ... which embeds it, closes it and records its conflict check (the broker is back: enqueued and run).
    from memory.services.reembedding import embeddings_retry

    assert embeddings_retry(now=later()).processed == 1
    assert FollowUp.objects.get(memory_id=pending.pk, kind=FollowUpKind.EMBED).done_at is not None
    assert FollowUp.objects.get(memory_id=pending.pk, kind=FollowUpKind.CONFLICT_CHECK).done_at is not None
    assert not FollowUp.objects.filter(done_at__isnull=True).exists()


@pytest.mark.django_db(transaction=False)
def test_concurrent_eager_follow_ups_leave_no_join_block_behind(monkeypatch):
    """The root of an order-dependent failure ("Never call result.get() within a
    task" in a later test): Celery's eager ``apply_async`` sets a process-global
    flag for the task's duration and restores what it saw on entry, so two
    threads enqueueing at once could leave it set. Here thread A's task ends
    while thread B's runs - the order that left it set; the transport runs
    eager tasks without touching the flag."""
    import threading
    import uuid
    from types import SimpleNamespace

    from celery._state import task_join_will_block  # type: ignore[attr-defined]  # private, not in the stubs

    from memory.services import pipeline
    from memory.services.followups import followup_transport

    assert app.conf.task_always_eager
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    first_running, second_running, first_done = threading.Event(), threading.Event(), threading.Event()

    def check(*, memory_id: uuid.UUID) -> SimpleNamespace:
        if str(memory_id) == first:
            first_running.set()
            assert second_running.wait(10)
        else:
            second_running.set()
            assert first_done.wait(10)
        return SimpleNamespace(merged=[], candidates=[], skipped="")

    monkeypatch.setattr(pipeline, "followup_conflict_check_run", check)
    enqueue = followup_transport(FollowUpKind.CONFLICT_CHECK)
    assert enqueue is not None

    def run_first() -> None:
        enqueue([first], False)
        first_done.set()

    threads = [threading.Thread(target=run_first)]
    threads[0].start()
    assert first_running.wait(10)
    threads.append(threading.Thread(target=enqueue, args=([second], False)))
    threads[1].start()
    for thread in threads:
        thread.join(20)
    assert second_running.is_set() and first_done.is_set()
    assert task_join_will_block() is False
    assert tasks.memory_conflict_check_task.apply(args=[first]).get()["skipped"] == ""


def test_a_write_tries_a_refused_broker_once_and_leaves_the_rest_to_the_outbox(broker_down, monkeypatch):
    """A write's after-commit enqueue (``retry=False``) makes one connection
    attempt: kombu's default channel would otherwise retry a refused broker for
    its connection timeout, sleeping between attempts, and every write would
    answer seconds late for as long as the broker is down. The outbox row, not
    the retries, is what makes the follow-up happen."""
    from kombu.connection import Connection

    attempts: list[int] = []
    factory = Connection._connection_factory

    def counted(self: Connection) -> object:
        attempts.append(1)
        return factory(self)

    monkeypatch.setattr(Connection, "_connection_factory", counted)
    member = make_identity("tenant-a", "member")
    rule = rule_store(caller=member.caller, content="always confirm before sending")

    assert len(attempts) == 1, attempts
    assert Memory.objects.get(pk=rule.id).validity == "active"
    assert FollowUp.objects.filter(memory_id=rule.id, done_at__isnull=True).count() == 1
