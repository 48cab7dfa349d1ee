"""The beat table, and its promise: every beat task run twice in a row changes
nothing the second time (tasks run eagerly here; the real-worker tests are in
test_worker.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.conf import settings
from django.utils import timezone

from memory.embeddings import get_embedder
from memory.models import ConflictCandidate, Memory, MemoryEvent, MemoryLink
from memory.services.feedback import memory_feedback
from memory.services.memories import episode_store, fact_store, rule_store
from memproj.celery import app
from tests.conftest import make_identity
from tests.workers.conftest import in_flight, wait_until
from workers.schedule import SCHEDULE, beat_schedule, expires_for, parse_crontab, shortest_period

DARK_MODE = [
    "User prefers dark mode in the editor",
    "The user likes dark mode for the editor",
    "User said they prefer dark mode in editors",
]


def test_every_entry_expires_just_under_its_period():
    table = beat_schedule({})
    assert set(table) == {entry.name for entry in SCHEDULE}
    for name, entry in table.items():
        period = shortest_period(entry["schedule"]).total_seconds()
        assert 0 < entry["options"]["expires"] < period, name
        assert entry["task"] in app.tasks, name
    assert settings.CELERY_BEAT_SCHEDULE.keys() == table.keys()


def test_cadences_are_overridable_and_can_be_switched_off():
    table = beat_schedule({"MEMPROJ_BEAT_DECAY": "*/10 * * * *", "MEMPROJ_BEAT_EXPIRE": "off"})
    assert "memories-expire" not in table
    assert table["facts-decay"]["schedule"] == parse_crontab("*/10 * * * *")
    assert table["facts-decay"]["options"]["expires"] == expires_for(timedelta(minutes=10))
    assert shortest_period(parse_crontab("0 9,21 * * 1-5")) == timedelta(hours=12)
    assert shortest_period(parse_crontab("0 9 * * 1")) == timedelta(days=7)
    with pytest.raises(ValueError):
        beat_schedule({"MEMPROJ_BEAT_DECAY": "every ten minutes"})


def _state():
    memories = sorted(
        (
            tuple(
                (f.attname, str(getattr(m, f.attname)))
                for f in Memory._meta.concrete_fields
                if f.attname != "search_vector"
            )
            for m in Memory.objects.all()
        ),
    )
    return {
        "memories": memories,
        "events": list(MemoryEvent.objects.order_by("id").values_list("id", "event_type", "memory_id")),
        "links": sorted(MemoryLink.objects.values_list("from_memory_id", "to_memory_id", "kind")),
        "conflicts": sorted(ConflictCandidate.objects.values_list("memory_id", "other_id", "status")),
    }


def _run_every_beat_task():
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        result = app.tasks[entry["task"]].apply()
        assert result.successful(), f"{name}: {result.traceback}"


def _seed_work_for_every_task():
    member = make_identity("tenant-a", "member")
    outsider = make_identity("tenant-b", "outsider")
    now = timezone.now()
    with time_machine.travel(now - timedelta(days=40)):
        expired = episode_store(caller=member.caller, content="Deploy failed", butler="ops", ttl=timedelta(days=1))
        fading = fact_store(
            caller=member.caller, subject="user", predicate="mood", content="User is tired", permanence="volatile"
        ).memory
        rule = rule_store(caller=outsider.caller, content="Run the migrations before the tests")
        for _ in range(15):
            memory_feedback(caller=outsider.caller, memory_id=rule.id, signal="helpful")
    with time_machine.travel(now - timedelta(minutes=10)):
        pending = fact_store(caller=member.caller, subject="user", predicate="os", content="User runs Debian").memory
    # As if the embedder had been down at write time and the write-time task had given up.
    Memory.objects.filter(pk=pending.pk).update(embedding=None, embedding_status="pending", embedding_attempts=13)
    stale = fact_store(
        caller=outsider.caller, subject="user", predicate="editor", content="User edits with Helix"
    ).memory
    Memory.objects.filter(pk=stale.pk).update(embedding_model="old-model-v1")
    for text in DARK_MODE:
        episode_store(caller=member.caller, content=text, butler="assistant")
    return {"expired": expired, "fading": fading, "rule": rule, "pending": pending, "stale": stale}


def _first_round_did_everything(seeded) -> bool:
    return (
        not Memory.objects.filter(pk=seeded["expired"].pk).exists()
        and MemoryEvent.objects.filter(memory_id=seeded["fading"].id, event_type="fact_state_changed").exists()
        and Memory.objects.get(pk=seeded["rule"].pk).maturity == "proven"
        and Memory.objects.get(pk=seeded["pending"].pk).embedding_status == "ready"
        and Memory.objects.get(pk=seeded["stale"].pk).embedding_model == get_embedder().model_name
        and Memory.objects.filter(kind="fact", source="consolidation").count() == 1
    )


def test_every_beat_task_twice_changes_nothing_the_second_time(transactional_db):
    seeded = _seed_work_for_every_task()
    _run_every_beat_task()
    assert _first_round_did_everything(seeded)  # the first round had work for every task ...

    after_first = _state()
    _run_every_beat_task()
    assert _state() == after_first  # ... and a second round finds none


def _succeeded(worker, task_name: str) -> int:
    """How many runs of a task the worker has logged as finished."""
    lines = worker.log.read_text(errors="replace").splitlines()
    return sum(1 for line in lines if f"Task {task_name}[" in line and " succeeded in " in line)


def _ready(worker) -> bool:
    """Has the worker logged that it consumes its queue?"""
    return any(line.endswith(" ready.") for line in worker.log.read_text(errors="replace").splitlines())


def _send_every_beat_task():
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        app.tasks[entry["task"]].apply_async(expires=entry["options"]["expires"])


@pytest.mark.worker
def test_every_beat_task_twice_in_a_real_worker(start_worker, broker_queue):
    seeded = _seed_work_for_every_task()
    worker = start_worker()
    # The tasks go out with the beat's expiry (30 s for the every-minute ones):
    # sent while the worker still starts, which on a loaded machine can take
    # about that long, they would be dropped unrun. Send them once it consumes.
    wait_until(lambda: _ready(worker), what="the worker to start", worker=worker)
    _send_every_beat_task()
    wait_until(lambda: _first_round_did_everything(seeded), what="the first round", worker=worker)
    names = [entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()]
    wait_until(lambda: all(_succeeded(worker, n) for n in names), what="the first round's tasks", worker=worker)
    wait_until(lambda: not in_flight(broker_queue), what="the first round's follow-ups", worker=worker)
    runs = {n: _succeeded(worker, n) for n in names}

    after_first = _state()
    _send_every_beat_task()
    wait_until(lambda: all(_succeeded(worker, n) == runs[n] + 1 for n in names), what="the second round", worker=worker)
    assert not in_flight(broker_queue)  # nothing re-enqueued: there was no more work
    assert _state() == after_first
