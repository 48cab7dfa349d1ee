"""Every review action of the memory detail page: its effect on the row and the
audit event it leaves (Django test client, tenant admin of tenant A)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from memory.models import EmbeddingStatus, Memory, MemoryEvent, Validity
from memory.services.memories import fact_store, memory_forget, rule_store

pytestmark = pytest.mark.django_db


def review(client, memory: Memory, action: str, **data: str):
    url = reverse("admin:memory_memory_review", args=[memory.pk])
    return client.post(url, {"action": action, **data})


def events(memory: Memory, event_type: str) -> list[MemoryEvent]:
    return list(MemoryEvent.objects.filter(memory_id=memory.pk, event_type=event_type).order_by("id"))


@pytest.fixture
def client_a(client, admin_a):
    client.force_login(admin_a.user)
    return client


def test_confirm_resets_decay_clock_and_is_audited(client_a, admin_a):
    fact = fact_store(caller=admin_a.caller, subject="user", predicate="city", content="Lives in Lyon").memory
    long_ago = timezone.now() - timedelta(days=90)
    Memory.objects.filter(pk=fact.pk).update(last_confirmed_at=long_ago)

    response = review(client_a, fact, "confirm")

    assert response.status_code == 302
    fact.refresh_from_db()
    assert fact.last_confirmed_at is not None and fact.last_confirmed_at > long_ago + timedelta(days=89)
    [event] = events(fact, "confirmed")
    assert event.actor_principal_id == admin_a.principal.id
    assert event.tenant_id == admin_a.tenant.pk


def test_retract_hides_memory_and_is_audited(client_a, admin_a):
    fact = fact_store(caller=admin_a.caller, subject="user", predicate="pet", content="Has a cat").memory

    review(client_a, fact, "retract")

    fact.refresh_from_db()
    assert fact.validity == Validity.RETRACTED
    [event] = events(fact, "retracted")
    assert event.payload["previous_validity"] == "active"
    assert event.actor_principal_id == admin_a.principal.id


def test_restore_brings_back_a_retracted_memory_and_is_audited(client_a, admin_a):
    rule = rule_store(caller=admin_a.caller, content="Always run the linter before committing")
    memory_forget(caller=admin_a.caller, kind="rule", memory_id=rule.pk)

    review(client_a, rule, "restore")

    rule.refresh_from_db()
    assert rule.validity == Validity.ACTIVE
    [event] = events(rule, "restored")
    assert event.payload["previous_validity"] == "retracted"


def test_restore_refuses_when_another_fact_holds_the_key(client_a, admin_a):
    old = fact_store(caller=admin_a.caller, subject="user", predicate="editor", content="Uses vim").memory
    fact_store(caller=admin_a.caller, subject="user", predicate="editor", content="Uses helix")

    response = review(client_a, old, "restore")

    old.refresh_from_db()
    assert old.validity == Validity.SUPERSEDED
    assert events(old, "restored") == []
    messages = [str(m) for m in response.wsgi_request._messages]
    assert any("active for the same subject and predicate" in m for m in messages)


def test_supersede_by_another_memory_and_is_audited(client_a, admin_a):
    old = fact_store(caller=admin_a.caller, subject="team", predicate="standup", content="Standup at 9").memory
    new = fact_store(caller=admin_a.caller, subject="team", predicate="meeting", content="Standup moved to 10").memory

    review(client_a, old, "supersede", replacement=str(new.pk))

    old.refresh_from_db()
    assert old.validity == Validity.SUPERSEDED
    assert old.superseded_by_id == new.pk
    [event] = events(old, "superseded")
    assert event.payload["superseded_by"] == str(new.pk)
    assert event.actor_principal_id == admin_a.principal.id


def test_supersede_with_a_bad_id_changes_nothing(client_a, admin_a):
    old = fact_store(caller=admin_a.caller, subject="team", predicate="size", content="Five people").memory

    review(client_a, old, "supersede", replacement="not-a-uuid")

    old.refresh_from_db()
    assert old.validity == Validity.ACTIVE
    assert events(old, "superseded") == []


def test_promote_and_demote_rule_and_both_are_audited(client_a, admin_a):
    rule = rule_store(caller=admin_a.caller, content="Prefer small pull requests")
    assert rule.maturity == "candidate"

    review(client_a, rule, "set_maturity", maturity="proven")
    rule.refresh_from_db()
    assert rule.maturity == "proven"
    assert rule.confidence == pytest.approx(0.9)

    review(client_a, rule, "set_maturity", maturity="candidate")
    rule.refresh_from_db()
    assert rule.maturity == "candidate"
    assert rule.confidence == pytest.approx(0.5)

    changes = events(rule, "maturity_changed")
    assert [(e.payload["from"], e.payload["to"], e.payload["manual"]) for e in changes] == [
        ("candidate", "proven", True),
        ("proven", "candidate", True),
    ]
    assert all(e.actor_principal_id == admin_a.principal.id for e in changes)


def test_set_maturity_rejects_unknown_value(client_a, admin_a):
    rule = rule_store(caller=admin_a.caller, content="Write the test first")

    review(client_a, rule, "set_maturity", maturity="legendary")

    rule.refresh_from_db()
    assert rule.maturity == "candidate"
    assert events(rule, "maturity_changed") == []


@pytest.mark.real_embedder  # the configured model's name is recorded on the row
def test_reembed_gives_a_fresh_vector_and_is_audited(client_a, admin_a):
    fact = fact_store(caller=admin_a.caller, subject="user", predicate="lang", content="Speaks French").memory
    stale = [0.0] * 383 + [1.0]
    Memory.objects.filter(pk=fact.pk).update(embedding=stale, embedding_model="old-model")

    review(client_a, fact, "reembed")

    row = Memory.objects.get(pk=fact.pk)
    assert row.embedding_status == EmbeddingStatus.READY
    assert row.embedding_model == "all-MiniLM-L6-v2"
    assert list(row.embedding) != stale
    [event] = events(fact, "reembed_requested")
    assert event.payload["previous_model"] == "old-model"


def test_superuser_action_records_who_acted(client, superuser, admin_a):
    fact = fact_store(caller=admin_a.caller, subject="user", predicate="tz", content="Europe/Paris").memory
    client.force_login(superuser.user)

    review(client, fact, "retract")

    fact.refresh_from_db()
    assert fact.validity == Validity.RETRACTED
    [retracted] = events(fact, "retracted")
    assert retracted.actor_principal_id is None
    [note] = events(fact, "admin_review")
    assert note.payload == {"action": "retract", "superuser": "root"}


def test_bulk_retract_action_goes_through_the_service(client_a, admin_a):
    a = fact_store(caller=admin_a.caller, subject="x", predicate="a", content="first").memory
    b = fact_store(caller=admin_a.caller, subject="x", predicate="b", content="second").memory

    client_a.post(
        reverse("admin:memory_memory_changelist"),
        {"action": "action_retract", "_selected_action": [str(a.pk), str(b.pk)]},
    )

    assert set(Memory.objects.filter(pk__in=[a.pk, b.pk]).values_list("validity", flat=True)) == {"retracted"}
    assert len(events(a, "retracted")) == 1 and len(events(b, "retracted")) == 1


def test_detail_page_shows_scores_chain_and_history(client_a, admin_a):
    old = fact_store(caller=admin_a.caller, subject="user", predicate="phone", content="Phone is a Pixel").memory
    new = fact_store(caller=admin_a.caller, subject="user", predicate="phone", content="Phone is an iPhone").memory

    old_page = client_a.get(reverse("admin:memory_memory_change", args=[old.pk])).content.decode()
    new_page = client_a.get(reverse("admin:memory_memory_change", args=[new.pk])).content.decode()

    assert "effective confidence" in new_page and "reference count" in new_page
    assert f"../../{new.pk}/change/" in old_page  # replaced by
    assert f"../../{old.pk}/change/" in new_page  # replaces
    assert "superseded" in old_page and "stored" in new_page  # event history


@pytest.fixture
def conflict(admin_a):
    from memory.models import ConflictCandidate

    older = fact_store(caller=admin_a.caller, subject="car", predicate="colour", content="The car is red").memory
    newer = fact_store(caller=admin_a.caller, subject="car", predicate="paint", content="The car is blue").memory
    return ConflictCandidate.objects.create(
        tenant=admin_a.tenant, memory=newer, other=older, kind="contradiction", similarity=0.8
    )


def test_accept_conflict_supersedes_the_older_memory_and_is_audited(client_a, admin_a, conflict):
    response = review(client_a, conflict.memory, "conflict_accept", conflict=str(conflict.pk))

    assert response.status_code == 302
    conflict.refresh_from_db()
    assert conflict.status == "accepted"
    assert conflict.resolved_by == admin_a.principal.id
    older = Memory.objects.get(pk=conflict.other_id)
    assert older.validity == Validity.SUPERSEDED and older.superseded_by_id == conflict.memory_id
    [event] = events(conflict.memory, "conflict_accepted")
    assert event.payload["conflict"] == str(conflict.pk)
    assert len(events(older, "superseded")) == 1


def test_dismiss_conflict_keeps_both_and_is_audited(client_a, admin_a, conflict):
    client_a.post(
        reverse("admin:memory_conflictcandidate_changelist"),
        {"action": "action_dismiss", "_selected_action": [str(conflict.pk)]},
    )

    conflict.refresh_from_db()
    assert conflict.status == "dismissed"
    assert set(
        Memory.objects.filter(pk__in=[conflict.memory_id, conflict.other_id]).values_list("validity", flat=True)
    ) == {"active"}
    [event] = events(conflict.memory, "conflict_dismissed")
    assert event.actor_principal_id == admin_a.principal.id


def test_conflict_of_another_tenant_cannot_be_resolved(client, admin_b, conflict):
    client.force_login(admin_b.user)
    client.post(
        reverse("admin:memory_conflictcandidate_changelist"),
        {"action": "action_accept", "_selected_action": [str(conflict.pk)]},
    )
    response = client.post(
        reverse("admin:memory_memory_review", args=[conflict.memory_id]),
        {"action": "conflict_accept", "conflict": str(conflict.pk)},
    )
    assert response.status_code == 404
    conflict.refresh_from_db()
    assert conflict.status == "open"
