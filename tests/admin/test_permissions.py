"""Tenant permissions in the admin: a tenant admin reaches only their tenant's
rows (lists, detail, actions, review endpoint, autocomplete, exports, dashboard);
a superuser reaches all; a member reads only when the tenant allows it."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from memory.models import ConflictCandidate, Memory, MemoryEvent, Validity
from memory.services.memories import fact_store, rule_store

pytestmark = pytest.mark.django_db


@pytest.fixture
def fact_a(admin_a) -> Memory:
    return fact_store(caller=admin_a.caller, subject="acme", predicate="secret", content="Acme launch code 1234").memory


@pytest.fixture
def fact_b(admin_b) -> Memory:
    return fact_store(caller=admin_b.caller, subject="bravo", predicate="plan", content="Bravo plans a merger").memory


def test_other_tenants_memory_is_404_by_url(client, admin_b, fact_a):
    client.force_login(admin_b.user)
    assert client.get(reverse("admin:memory_memory_change", args=[fact_a.pk])).status_code == 404
    assert client.get(reverse("admin:memory_memory_history", args=[fact_a.pk])).status_code == 404


def test_other_tenants_memory_cannot_be_reviewed(client, admin_b, fact_a):
    client.force_login(admin_b.user)
    response = client.post(reverse("admin:memory_memory_review", args=[fact_a.pk]), {"action": "retract"})
    assert response.status_code == 404
    fact_a.refresh_from_db()
    assert fact_a.validity == Validity.ACTIVE
    assert not MemoryEvent.objects.filter(memory_id=fact_a.pk, event_type="retracted").exists()


def test_changelist_lists_only_own_tenant(client, admin_a, fact_a, fact_b):
    client.force_login(admin_a.user)
    page = client.get(reverse("admin:memory_memory_changelist")).content.decode()
    assert "Acme launch code" in page
    assert "Bravo plans" not in page
    assert "tenant-b" not in page  # not even in the tenant filter


def test_bulk_action_ignores_ids_of_other_tenant(client, admin_a, fact_a, fact_b):
    client.force_login(admin_a.user)
    client.post(
        reverse("admin:memory_memory_changelist"),
        {"action": "action_retract", "_selected_action": [str(fact_a.pk), str(fact_b.pk)]},
    )
    fact_a.refresh_from_db()
    fact_b.refresh_from_db()
    assert fact_a.validity == Validity.RETRACTED
    assert fact_b.validity == Validity.ACTIVE


def test_export_contains_only_own_tenant(client, admin_a, fact_a, fact_b):
    client.force_login(admin_a.user)
    response = client.post(
        reverse("admin:memory_memory_changelist"),
        {"action": "export_csv", "_selected_action": [str(fact_a.pk), str(fact_b.pk)]},
    )
    body = b"".join(response.streaming_content).decode()
    assert "Acme launch code" in body
    assert "Bravo" not in body


def test_event_log_is_scoped_and_read_only(client, admin_a, fact_a, fact_b):
    client.force_login(admin_a.user)
    page = client.get(reverse("admin:memory_memoryevent_changelist")).content.decode()
    assert str(fact_a.pk)[:8] in page
    assert str(fact_b.pk)[:8] not in page
    event_b = MemoryEvent.objects.filter(memory_id=fact_b.pk).first()
    assert event_b is not None
    assert client.get(reverse("admin:memory_memoryevent_change", args=[event_b.pk])).status_code == 404
    event_a = MemoryEvent.objects.filter(memory_id=fact_a.pk).first()
    assert event_a is not None
    assert client.post(reverse("admin:memory_memoryevent_delete", args=[event_a.pk])).status_code == 403


def test_autocomplete_returns_only_own_principals(client, admin_a, admin_b):
    client.force_login(admin_a.user)
    response = client.get(
        reverse("admin:autocomplete"),
        {"app_label": "policy", "model_name": "apitoken", "field_name": "principal", "term": ""},
    )
    assert response.status_code == 200
    names = {r["text"] for r in response.json()["results"]}
    assert names == {"tenant-a/alice"}


def test_tenant_and_principal_lists_are_scoped(client, admin_a, admin_b):
    client.force_login(admin_a.user)
    tenants = client.get(reverse("admin:policy_tenant_changelist")).content.decode()
    assert "tenant-a" in tenants and "tenant-b" not in tenants
    assert client.get(reverse("admin:policy_tenant_change", args=[admin_b.tenant.pk])).status_code == 404
    assert client.get(reverse("admin:policy_principal_change", args=[admin_b.principal.pk])).status_code == 404
    assert client.get(reverse("admin:policy_tenant_add")).status_code == 403


def test_dashboard_of_other_tenant_is_404(client, admin_a, admin_b):
    client.force_login(admin_a.user)
    assert client.get(reverse("memproj_dashboard", args=["tenant-b"])).status_code == 404
    assert client.get(reverse("memproj_dashboard", args=["tenant-a"])).status_code == 200


def test_superuser_sees_every_tenant(client, superuser, fact_a, fact_b):
    client.force_login(superuser.user)
    page = client.get(reverse("admin:memory_memory_changelist")).content.decode()
    assert "Acme launch code" in page and "Bravo plans" in page
    assert client.get(reverse("admin:memory_memory_change", args=[fact_b.pk])).status_code == 200
    assert client.get(reverse("memproj_dashboard", args=["tenant-b"])).status_code == 200


def test_member_without_review_permission_sees_nothing(client, member_a, fact_a):
    client.force_login(member_a.user)
    assert client.get(reverse("admin:memory_memory_change", args=[fact_a.pk])).status_code == 404
    assert client.get(reverse("admin:memory_memory_changelist")).status_code == 403
    assert client.get(reverse("memproj_dashboard", args=["tenant-a"])).status_code == 404


def test_member_with_review_permission_reads_but_cannot_act(client, member_a, fact_a):
    tenant = member_a.tenant
    tenant.members_can_review = True
    tenant.save()
    client.force_login(member_a.user)

    detail = client.get(reverse("admin:memory_memory_change", args=[fact_a.pk]))
    assert detail.status_code == 200
    assert "Read-only review access" in detail.content.decode()
    assert 'id="mp-retract"' not in detail.content.decode()
    assert client.get(reverse("memproj_dashboard", args=["tenant-a"])).status_code == 200

    response = client.post(reverse("admin:memory_memory_review", args=[fact_a.pk]), {"action": "retract"})
    assert response.status_code == 403
    client.post(
        reverse("admin:memory_memory_changelist"), {"action": "action_retract", "_selected_action": [str(fact_a.pk)]}
    )
    fact_a.refresh_from_db()
    assert fact_a.validity == Validity.ACTIVE
    # Members never see tokens or principals.
    assert client.get(reverse("admin:policy_apitoken_changelist")).status_code == 403


def test_memory_list_does_not_count_or_load_vectors(client, admin_a):
    for i in range(3):
        rule_store(caller=admin_a.caller, content=f"Rule number {i} about deployments")
    client.force_login(admin_a.user)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("admin:memory_memory_changelist"), {"kind__exact": "rule"})
    assert response.status_code == 200
    memory_sql = [q["sql"] for q in queries.captured_queries if '"memory_memory"' in q["sql"]]
    assert memory_sql
    assert not any("COUNT(" in sql.upper() for sql in memory_sql)
    assert not any('"memory_memory"."embedding"' in sql for sql in memory_sql)
    assert not any('"memory_memory"."search_vector"' in sql for sql in memory_sql)


def test_search_box_uses_hybrid_search_within_tenant(client, admin_a, fact_a, fact_b):
    fact_store(caller=admin_a.caller, subject="office", predicate="snack", content="The office keeps green tea")
    fact_store(caller=admin_a.caller, subject="office", predicate="floor", content="The office is on the third floor")
    client.force_login(admin_a.user)
    page = client.get(reverse("admin:memory_memory_changelist"), {"q": "beverages in the office"}).content.decode()
    assert "green tea" in page
    assert page.index("green tea") < page.index("third floor")  # ranked by relevance
    assert "Acme launch code" not in page  # no evidence for it: not a hit
    assert "Bravo" not in page
    by_id = client.get(reverse("admin:memory_memory_changelist"), {"q": str(fact_b.pk)}).content.decode()
    assert "Bravo" not in by_id


def test_tenants_and_principals_are_not_deleted_from_the_admin(client, superuser, admin_a):
    client.force_login(superuser.user)
    assert client.post(reverse("admin:policy_tenant_delete", args=[admin_a.tenant.pk])).status_code == 403
    assert client.post(reverse("admin:policy_principal_delete", args=[admin_a.principal.pk])).status_code == 403


@pytest.mark.parametrize(
    "url_name",
    [
        "admin:memory_memory_changelist",
        "admin:memory_memoryevent_changelist",
        "admin:memory_conflictcandidate_changelist",
    ],
)
@pytest.mark.parametrize("parameter", ["tenant", "tenant__id__exact", "tenant_id"])
def test_query_string_naming_another_tenant_shows_nothing_of_it(
    client, admin_a, admin_b, fact_a, fact_b, url_name, parameter
):
    """The tenant filter, Django's own lookup on the tenant's id, and a search
    narrowed to the other tenant: each starts from the user's rows, so naming
    tenant B in the query string lists nothing of B (or is refused outright)."""
    rule_b = rule_store(caller=admin_b.caller, content="Bravo rule about mergers")
    ConflictCandidate.objects.create(tenant=admin_b.tenant, memory=rule_b, other=fact_b, kind="duplicate")
    client.force_login(admin_a.user)
    tenant_b = str(admin_b.tenant.pk)
    for query in ({parameter: tenant_b}, {parameter: tenant_b, "q": "mergers"}):
        response = client.get(reverse(url_name), query)
        assert response.status_code in (200, 302, 400), query
        page = response.content.decode()
        assert "Bravo plans" not in page and "Bravo rule" not in page, query
        assert str(fact_b.pk)[:8] not in page and str(rule_b.pk)[:8] not in page and "tenant-b" not in page, query


def test_actions_across_a_selection_naming_another_tenant_change_nothing_of_it(
    client, admin_a, fact_a, admin_b, fact_b
):
    """Select all with tenant B in the query string and B's ids in the
    selection: the action's rows come from the user's list, so B's memory
    stays as it was and B's rows are not exported."""
    client.force_login(admin_a.user)
    url = f"{reverse('admin:memory_memory_changelist')}?tenant={admin_b.tenant.pk}"
    selection = {"select_across": "1", "index": "0", "_selected_action": [str(fact_b.pk)]}
    client.post(url, {"action": "action_retract", **selection})
    fact_b.refresh_from_db()
    assert fact_b.validity == Validity.ACTIVE
    assert not MemoryEvent.objects.filter(memory_id=fact_b.pk, event_type="retracted").exists()

    exported = client.post(url, {"action": "export_csv", **selection})
    assert "Bravo" not in b"".join(exported.streaming_content).decode()

    event_b = MemoryEvent.objects.filter(memory_id=fact_b.pk).first()
    assert event_b is not None
    events = client.post(
        reverse("admin:memory_memoryevent_changelist"), {"action": "export_csv", "_selected_action": [str(event_b.pk)]}
    )
    assert str(fact_b.pk) not in b"".join(events.streaming_content).decode()
