"""Supersession cannot race: concurrent stores of one subject+predicate leave
exactly one active fact, and every other one superseded by a stored fact."""

from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections

from memory.models import Memory, MemoryEvent
from memory.services.memories import fact_store

pytestmark = pytest.mark.django_db(transaction=True)
WRITERS = 8


def test_concurrent_fact_stores_leave_exactly_one_active(member):
    barrier = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            fact_store(caller=member.caller, subject="user", predicate="city", content=f"City number {i}")
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    assert errors == []
    facts = list(Memory.objects.filter(tenant_id=member.caller.tenant_id, subject="user", predicate="city"))
    active = [f for f in facts if f.validity == "active"]
    assert len(facts) == WRITERS and len(active) == 1
    superseded = [f for f in facts if f.validity == "superseded"]
    assert len(superseded) == WRITERS - 1
    # The chain is whole: each superseded fact points at a stored fact, and
    # following the pointers from any of them ends at the one active fact.
    by_id = {f.id: f for f in facts}
    for fact in superseded:
        seen = set()
        current = fact
        while current.validity == "superseded":
            assert current.superseded_by_id in by_id and current.id not in seen
            seen.add(current.id)
            current = by_id[current.superseded_by_id]
        assert current.id == active[0].id
    assert MemoryEvent.objects.filter(event_type="superseded", tenant_id=member.caller.tenant_id).count() == WRITERS - 1


def test_partial_unique_index_is_the_backstop(member):
    """Even a writer that bypasses the service cannot create a second active fact."""
    from django.db import IntegrityError, transaction

    fact_store(caller=member.caller, subject="user", predicate="shoe_size", content="42")
    original = Memory.objects.get(predicate="shoe_size")
    with pytest.raises(IntegrityError), transaction.atomic():
        Memory.objects.create(
            tenant_id=original.tenant_id,
            kind="fact",
            content="43",
            content_hash="x",
            subject="user",
            predicate="shoe_size",
        )
