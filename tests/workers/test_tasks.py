"""Task wiring, eagerly: what a write enqueues on commit, sweeps re-enqueueing
themselves while more remains, and tasks given ids of rows that are gone."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from memory.models import Memory, MemoryEvent
from memory.services.memories import episode_store, fact_store
from tests.conftest import make_identity
from workers import tasks

pytestmark = pytest.mark.django_db


def test_a_write_enqueues_the_conflict_check_on_commit(django_capture_on_commit_callbacks):
    member = make_identity("tenant-a", "member")
    older = fact_store(caller=member.caller, subject=None, predicate=None, content="User is allergic to peanuts")
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        newer = fact_store(caller=member.caller, subject=None, predicate=None, content="User is allergic to peanuts")
    assert len(callbacks) == 1
    # The check ran: the restatement keeps the newer memory and retires the older one.
    older.memory.refresh_from_db()
    assert (older.memory.validity, older.memory.superseded_by_id) == ("superseded", newer.memory.id)


def test_episodes_enqueue_no_conflict_check(django_capture_on_commit_callbacks):
    member = make_identity("tenant-a", "member")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        episode_store(caller=member.caller, content="Talked about peanuts", butler="chef")
    assert callbacks == []  # embedded at write time, and episodes are consolidated, not conflict-checked


def test_a_sweep_re_enqueues_itself_until_its_backlog_is_done(settings):
    settings.MEMPROJ_PIPELINE = {**settings.MEMPROJ_PIPELINE, "SWEEP_BATCH": 2, "SWEEP_PER_TENANT": 1}
    tenants = [make_identity(f"tenant-{i}", "member") for i in range(3)]
    start = timezone.now()
    with time_machine.travel(start - timedelta(days=60)):
        for identity in tenants:
            for n in range(2):
                episode_store(caller=identity.caller, content=f"old note {n}", butler="b", ttl=timedelta(days=1))
    # One batch holds at most 2 rows and 1 per tenant; the task keeps re-enqueueing
    # (eagerly here) until all 6 are gone.
    assert tasks.memories_expire_task.apply().get() == 2
    assert not Memory.objects.filter(kind="episode").exists()
    assert MemoryEvent.objects.filter(event_type="expired_deleted").count() == 6


def test_tasks_for_rows_that_are_gone_do_nothing():
    missing = str(uuid.uuid4())
    assert tasks.embed_memory_task.apply(args=[missing]).get() is False
    assert tasks.memory_conflict_check_task.apply(args=[missing]).get()["skipped"] == "missing"
