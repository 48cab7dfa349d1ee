"""List filters, search across tenants for a superuser, principal forms, and
re-embedding while the embedder is down."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from memory.embeddings import get_embedder, set_embedder
from memory.models import EmbeddingStatus, Memory, MemoryEvent
from memory.services.memories import fact_store
from policy.models import Principal
from tests.embedders import BrokenEmbedder

pytestmark = pytest.mark.django_db


def test_fact_state_filter_uses_effective_confidence(client, admin_a):
    fact_store(caller=admin_a.caller, subject="a", predicate="fresh", content="Fresh fact about apples")
    fading = fact_store(
        caller=admin_a.caller, subject="a", predicate="old", content="Old fact about pears", permanence="volatile"
    )
    # volatile decays 0.03/day: after 40 days 1.0 * exp(-1.2) = 0.30 -> fading
    Memory.objects.filter(pk=fading.memory.pk).update(last_confirmed_at=timezone.now() - timedelta(days=40))
    client.force_login(admin_a.user)
    url = reverse("admin:memory_memory_changelist")

    fading_page = client.get(url, {"fact_state": "fading"}).content.decode()
    active_page = client.get(url, {"fact_state": "active"}).content.decode()

    assert "Old fact about pears" in fading_page and "Fresh fact about apples" not in fading_page
    assert "Fresh fact about apples" in active_page and "Old fact about pears" not in active_page


def test_superuser_search_spans_tenants_and_narrows_by_tenant_filter(client, superuser, admin_a, admin_b):
    fact_store(caller=admin_a.caller, subject="x", predicate="y", content="Tenant A keeps bees on the roof")
    fact_store(caller=admin_b.caller, subject="x", predicate="y", content="Tenant B keeps bees in the garden")
    client.force_login(superuser.user)
    url = reverse("admin:memory_memory_changelist")

    both = client.get(url, {"q": "bees"}).content.decode()
    only_b = client.get(url, {"q": "bees", "tenant": str(admin_b.tenant.pk)}).content.decode()

    assert "on the roof" in both and "in the garden" in both
    assert "in the garden" in only_b and "on the roof" not in only_b


def test_tenant_admin_cannot_create_principal_in_other_tenant(client, admin_a, admin_b):
    client.force_login(admin_a.user)
    url = reverse("admin:policy_principal_add")
    refused = client.post(url, {"tenant": str(admin_b.tenant.pk), "name": "intruder", "role": "admin"})
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    assert not Principal.objects.filter(name="intruder").exists()

    created = client.post(url, {"tenant": str(admin_a.tenant.pk), "name": "helper", "role": "member"})
    assert created.status_code == 302
    assert Principal.objects.get(name="helper").tenant == admin_a.tenant


def test_tenant_admin_cannot_link_a_login_to_a_principal(client, admin_a, member_a):
    client.force_login(admin_a.user)
    page = client.get(reverse("admin:policy_principal_change", args=[member_a.principal.pk])).content.decode()
    assert 'name="user"' not in page  # read-only for tenant admins


def test_reembed_while_embedder_is_down_leaves_it_pending_and_audited(client, admin_a):
    fact = fact_store(caller=admin_a.caller, subject="u", predicate="v", content="Likes jazz").memory
    client.force_login(admin_a.user)
    original = get_embedder()
    set_embedder(BrokenEmbedder())
    try:
        response = client.post(reverse("admin:memory_memory_review", args=[fact.pk]), {"action": "reembed"})
    finally:
        set_embedder(original)
    assert response.status_code == 302
    fact.refresh_from_db()
    assert fact.embedding_status == EmbeddingStatus.PENDING
    assert MemoryEvent.objects.filter(memory_id=fact.pk, event_type="reembed_requested").count() == 1


def test_list_pages_without_counting(client, admin_a, monkeypatch):
    from django.contrib import admin as django_admin

    from memory.services.memories import rule_store

    for i in range(5):
        rule_store(caller=admin_a.caller, content=f"Paged rule number {i}")
    monkeypatch.setattr(django_admin.site._registry[Memory], "list_per_page", 2)
    client.force_login(admin_a.user)
    url = reverse("admin:memory_memory_changelist")

    first = client.get(url, {"kind__exact": "rule"})
    last = client.get(url, {"kind__exact": "rule", "p": "3"})

    assert len(first.context["cl"].result_list) == 2
    assert first.context["cl"].paginator.num_pages == 2  # knows only that a next page exists
    assert "more on the next page" in first.content.decode()
    assert len(last.context["cl"].result_list) == 1
    assert last.context["cl"].paginator.num_pages == 3
    assert "more on the next page" not in last.content.decode()


def test_detail_shows_source_episodes_of_a_consolidated_fact(client, admin_a):
    from memory.models import MemoryLink
    from memory.services.memories import episode_store

    episode = episode_store(caller=admin_a.caller, content="User said they moved to Porto", butler="chat")
    fact = fact_store(caller=admin_a.caller, subject="user", predicate="city", content="Lives in Porto").memory
    MemoryLink.objects.create(tenant=admin_a.tenant, from_memory=fact, to_memory=episode, kind="derived_from")
    client.force_login(admin_a.user)

    fact_page = client.get(reverse("admin:memory_memory_change", args=[fact.pk])).content.decode()
    episode_page = client.get(reverse("admin:memory_memory_change", args=[episode.pk])).content.decode()

    sources = fact_page[fact_page.index('id="mp-sources"') :]
    assert "User said they moved to Porto" in sources[: sources.index("</div>")]
    assert "Derived from this" in episode_page and "Lives in Porto" in episode_page


def test_superuser_dashboard_index_lists_tenants(client, superuser, admin_a, admin_b):
    client.force_login(superuser.user)
    page = client.get(reverse("memproj_dashboard_index")).content.decode()
    assert "/admin/dashboard/tenant-a/" in page and "/admin/dashboard/tenant-b/" in page


def test_scope_filter_offers_seen_scopes_and_filters(client, admin_a, admin_b):
    fact_store(caller=admin_a.caller, subject="s", predicate="w", content="Work scoped fact", scope="work")
    fact_store(caller=admin_a.caller, subject="s", predicate="h", content="Home scoped fact", scope="home")
    fact_store(caller=admin_b.caller, subject="s", predicate="x", content="Other tenant", scope="secret-b-scope")
    client.force_login(admin_a.user)
    url = reverse("admin:memory_memory_changelist")

    everything = client.get(url).content.decode()
    work = client.get(url, {"scope": "work"}).content.decode()

    assert "?scope=work" in everything and "?scope=home" in everything
    assert "secret-b-scope" not in everything
    assert "Work scoped fact" in work and "Home scoped fact" not in work
