"""roampal's lifecycle sweep in a real worker: it catches what only time
changes and what was scored while the rules differed (a release that lowered
a promotion threshold). A memory whose TTL has passed is out of retrieval; the
sweep must not promote it back into it (a promotion sets a new TTL, or none)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from memory.models import Memory
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.collections import working_store
from tests.conftest import make_identity
from tests.workers.conftest import in_flight, wait_until
from workers import tasks

pytestmark = pytest.mark.worker


def test_the_lifecycle_sweep_does_not_promote_an_expired_memory_back_into_retrieval(start_worker, broker_queue):
    member = make_identity("tenant-a", "member")
    with time_machine.travel(timezone.now() - timedelta(days=3)):
        expired = working_store(caller=member.caller, content="Deploy token for staging is tk-7781")
        live = working_store(caller=member.caller, content="Deploy window for staging is Tuesday")
    live_until = timezone.now() + timedelta(hours=1)
    Memory.objects.filter(pk=live.pk).update(expires_at=live_until)
    # Counters that qualify both for history under today's rules (scored while they differed).
    Memory.objects.filter(pk__in=[expired.pk, live.pk]).update(outcome_score=0.8, applied_count=2)
    expired_at = Memory.objects.get(pk=expired.pk).expires_at
    assert expired_at is not None and expired_at < timezone.now()
    hits = memory_search(caller=member.caller, query=SearchQuery("deploy token staging", mode="keyword"))
    assert expired.pk not in {h.memory.pk for h in hits}  # out of retrieval since its TTL passed

    worker = start_worker()
    tasks.collections_lifecycle_task.delay()
    wait_until(lambda: Memory.objects.get(pk=live.pk).collection == "history", what="the promotion", worker=worker)
    wait_until(lambda: not in_flight(broker_queue), what="the sweep", worker=worker)

    row = Memory.objects.get(pk=expired.pk)
    assert (row.collection, row.expires_at) == ("working", expired_at)  # left to the expiry sweep
    hits = memory_search(caller=member.caller, query=SearchQuery("deploy token staging", mode="keyword"))
    assert expired.pk not in {h.memory.pk for h in hits}
