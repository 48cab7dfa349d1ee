"""Probes of the beat's sweeps and the worker's conflict check against a
user's write committing between what the background run read first and the
lock it then takes (the tenant's write lock). Each run reads its rows again
under that lock, so the user's write decides: these pass on the code as it
is and keep it so. The user's write commits from another thread (its own
connection) inside the window."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from memory.models import Memory, MemoryEvent, Validity
from memory.selectors.memories import SearchQuery, memory_search
from memory.services import conflicts, followups, sweeps
from memory.services.conflicts import memory_conflict_check
from memory.services.memories import fact_store, memory_confirm
from memory.services.sweeps import facts_decay
from tests.conftest import make_identity
from tests.harness.interleave import committed_in_another_thread

pytestmark = pytest.mark.django_db(transaction=True)


def before_the_lock(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, write: Any) -> list[int]:
    """``write`` commits once, just before ``module.<name>`` (a lock) is taken."""
    real = getattr(module, name)
    done: list[int] = []

    def lock_after_the_write(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(1)
            committed_in_another_thread(write)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, lock_after_the_write)
    return done


@pytest.fixture
def member():
    return make_identity("tenant-a", "member")


def test_a_fact_confirmed_as_the_decay_sweep_picks_it_is_not_recorded_as_decayed(member, monkeypatch):
    fact = fact_store(caller=member.caller, subject="user", predicate="team", content="User is on the search team")
    # Not confirmed for a year: due to be recorded expired.
    old = timezone.now() - timedelta(days=365)
    Memory.objects.filter(pk=fact.memory.pk).update(
        confidence=0.8, decay_rate=0.05, last_confirmed_at=old, fact_state_changes_at=old
    )
    done = before_the_lock(
        monkeypatch,
        sweeps,
        "memories_tenant_write_lock",
        lambda: memory_confirm(caller=member.caller, kind="fact", memory_id=fact.memory.pk),
    )
    facts_decay()
    assert done
    row = Memory.objects.get(pk=fact.memory.pk)
    # The confirmation wins: no decay recorded over it, and the next run finds it active.
    assert row.fact_state in ("", "active", None)
    assert not MemoryEvent.objects.filter(memory_id=fact.memory.pk, event_type="fact_state_changed").exists()
    facts_decay(now=timezone.now() + timedelta(seconds=5))
    assert Memory.objects.get(pk=fact.memory.pk).fact_state == "active"


def test_a_duplicate_updated_as_its_conflict_check_starts_keeps_the_users_new_text(member, monkeypatch):
    text = "Deploys are frozen during the quarterly audit"
    # Stored with no worker: the two copies' checks are still to run.
    monkeypatch.setattr(followups, "_TRANSPORT", {})
    older = fact_store(caller=member.caller, subject=None, predicate=None, content=text).memory
    newer = fact_store(caller=member.caller, subject=None, predicate=None, content=text).memory
    new_text = "Deploys are frozen during the yearly audit"
    updated: list[Memory] = []
    done = before_the_lock(
        monkeypatch,
        conflicts,
        "tenant_write_lock",
        lambda: updated.append(
            fact_store(caller=member.caller, subject=None, predicate=None, content=new_text, replaces=older.pk).memory
        ),
    )
    memory_conflict_check(memory_id=newer.pk)
    assert done and updated
    # The user's new version is active and found by its words; the copy the
    # check was about is active too; the replaced one stays replaced by the user's.
    assert Memory.objects.get(pk=updated[0].pk).validity == Validity.ACTIVE
    assert Memory.objects.get(pk=newer.pk).validity == Validity.ACTIVE
    assert Memory.objects.get(pk=older.pk).superseded_by_id == updated[0].pk
    hits = memory_search(caller=member.caller, query=SearchQuery("yearly audit", mode="keyword"))
    assert updated[0].pk in {hit.memory.id for hit in hits}
