"""The drain sweep after a broker lost its messages: hundreds of open
conflict checks in one tenant run by the drain sweep. Writes to that tenant
meanwhile must not wait for the whole batch."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import FollowUp, FollowUpKind
from memory.services.followups import followup_register, followup_transport
from memory.services.memories import fact_store
from tests.conftest import make_identity
from tests.workers.conftest import wait_until
from workers import tasks

pytestmark = pytest.mark.worker

BACKLOG = 400


def test_writes_do_not_wait_for_a_whole_drain_batch(start_worker, broker_queue):
    member = make_identity("tenant-d", "member")
    real = followup_transport(FollowUpKind.CONFLICT_CHECK)
    assert real is not None
    followup_register(FollowUpKind.CONFLICT_CHECK, lambda ids, bulk: None)  # the broker lost them
    try:
        for i in range(BACKLOG):
            fact_store(
                caller=member.caller,
                subject=None,
                predicate=None,
                content=f"Ticket T-{i:04d} was closed by the on-call engineer",
            )
    finally:
        followup_register(FollowUpKind.CONFLICT_CHECK, real)
    FollowUp.objects.filter(done_at__isnull=True).update(created_at=timezone.now() - timedelta(minutes=5))
    assert FollowUp.objects.filter(done_at__isnull=True).count() == BACKLOG

    worker = start_worker()
    tasks.followups_drain_task.delay()
    latencies: list[float] = []
    deadline = time.monotonic() + 120
    n = 0
    while FollowUp.objects.filter(done_at__isnull=True, created_at__lt=timezone.now() - timedelta(minutes=1)).exists():
        assert time.monotonic() < deadline, worker.log_tail()
        n += 1
        started = time.monotonic()
        fact_store(caller=member.caller, subject="probe", predicate=f"p{n}", content=f"Probe write {n}")
        latencies.append(time.monotonic() - started)
        time.sleep(0.1)
    wait_until(
        lambda: not FollowUp.objects.filter(done_at__isnull=True).exists(), what="every follow-up", worker=worker
    )
    # Before: one transaction held the tenant's write lock for the whole batch (a write waited 46 s).
    assert latencies and max(latencies) < 5.0, latencies
