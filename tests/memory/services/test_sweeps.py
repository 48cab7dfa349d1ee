"""Lifecycle sweeps (in-process; tests/workers runs them in a real worker):
TTL expiry with retention, decay states, rule maturity by age, and tenant
fairness."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from memory.models import Kind, Memory, MemoryEvent
from memory.selectors.memories import SearchQuery, memory_search
from memory.services import reembedding, sweeps
from memory.services.feedback import memory_feedback
from memory.services.memories import episode_store, fact_store, memory_confirm, rule_store

pytestmark = pytest.mark.django_db


def events(memory_id, event_type):
    return list(MemoryEvent.objects.filter(memory_id=memory_id, event_type=event_type).order_by("id"))


def test_fair_batch_serves_every_tenant(member, outsider, embedder_outage):
    for i in range(12):
        episode_store(caller=member.caller, content=f"busy tenant note {i}", butler="b")
    quiet = [episode_store(caller=outsider.caller, content=f"quiet tenant note {i}", butler="b") for i in range(2)]
    ids = sweeps.fair_batch(
        Memory.objects.filter(embedding_status="pending"), order_by=["created_at", "id"], batch_size=5, per_tenant=3
    )
    tenants = list(Memory.objects.filter(pk__in=ids).values_list("tenant_id", flat=True))
    assert len(ids) == 5
    assert set(ids) >= {q.pk for q in quiet}  # the quiet tenant is not starved by the busy one
    assert tenants.count(member.caller.tenant_id) == 3  # per-tenant cap


def test_expired_episodes_leave_retrieval_then_rows_go_after_retention(member):
    start = timezone.now()
    episode = episode_store(
        caller=member.caller, content="The deploy of the billing service failed", butler="ops", ttl=timedelta(days=1)
    )
    kept = episode_store(
        caller=member.caller, content="The billing service dashboard moved", butler="ops", ttl=timedelta(days=60)
    )
    assert {h.memory.id for h in memory_search(caller=member.caller, query=SearchQuery("billing service"))} == {
        episode.id,
        kept.id,
    }

    with time_machine.travel(start + timedelta(days=2)):
        hits = memory_search(caller=member.caller, query=SearchQuery("billing service"))
        assert [h.memory.id for h in hits] == [kept.id]  # expired: out of retrieval at once
        assert sweeps.memories_expire().processed == 0  # but the row stays for the retention period
        assert Memory.objects.filter(pk=episode.pk).exists()

    with time_machine.travel(start + timedelta(days=32)):
        first = sweeps.memories_expire()
        assert first.processed == 1 and first.ids == [episode.id]
        assert not Memory.objects.filter(pk=episode.pk).exists()
        assert Memory.objects.filter(pk=kept.pk).exists()
        [audit] = events(episode.id, "expired_deleted")
        assert audit.payload["content_hash"] == episode.content_hash
        assert sweeps.memories_expire().processed == 0  # safe to run twice


def test_decay_records_fact_state_transitions_once(member):
    start = timezone.now()
    volatile = fact_store(
        caller=member.caller, subject="user", predicate="mood", content="User is tired", permanence="volatile"
    ).memory
    permanent = fact_store(
        caller=member.caller, subject="user", predicate="name", content="User is Ana", permanence="permanent"
    ).memory
    assert sweeps.facts_decay().processed == 0

    with time_machine.travel(start + timedelta(days=30)):  # 1 * exp(-0.03 * 30) = 0.41 -> fading
        assert sweeps.facts_decay().ids == [volatile.id]
        assert sweeps.facts_decay().processed == 0
    with time_machine.travel(start + timedelta(days=80)):  # exp(-2.4) = 0.09 -> expired
        assert sweeps.facts_decay().processed == 1
        memory_confirm(caller=member.caller, kind="fact", memory_id=volatile.id)
        assert sweeps.facts_decay().processed == 1  # confirmed: active again
        assert sweeps.facts_decay().processed == 0
    transitions = [(e.payload["from"], e.payload["to"]) for e in events(volatile.id, "fact_state_changed")]
    assert transitions == [("active", "fading"), ("fading", "expired"), ("expired", "active")]
    assert events(permanent.id, "fact_state_changed") == []


def test_rule_maturity_sweep_promotes_by_age(member):
    start = timezone.now()
    rule = rule_store(caller=member.caller, content="Run the migrations before the tests")
    for _ in range(15):
        memory_feedback(caller=member.caller, memory_id=rule.id, signal="helpful")
    rule.refresh_from_db()
    assert rule.maturity == "established"  # 15 successes, but not 30 days old yet
    assert sweeps.rules_maturity().processed == 0

    with time_machine.travel(start + timedelta(days=31)):
        assert sweeps.rules_maturity().ids == [rule.id]
        assert sweeps.rules_maturity().processed == 0
    rule.refresh_from_db()
    assert rule.maturity == "proven" and rule.confidence == pytest.approx(0.9)
    assert events(rule.id, "maturity_changed")[-1].payload["to"] == "proven"


def test_sweeps_only_touch_what_they_should(member, outsider):
    rule_store(caller=outsider.caller, content="Tenant B rule")
    fact_store(caller=outsider.caller, subject="x", predicate="y", content="Tenant B fact", permanence="permanent")
    for sweep in (
        sweeps.memories_expire,
        sweeps.facts_decay,
        sweeps.rules_maturity,
        reembedding.embeddings_retry,
    ):
        assert sweep().processed == 0
    assert Memory.objects.filter(kind=Kind.FACT).count() == 1
