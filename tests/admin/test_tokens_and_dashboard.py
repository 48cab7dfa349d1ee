"""Token creation in the admin (shown once, stored hashed) and the dashboard."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.urls import reverse

from memory.models import ConflictCandidate
from memory.services.memories import episode_store, fact_store, rule_store
from policy.models import ApiToken
from policy.services.tokens import token_authenticate, token_authenticate_cached, token_cached_caller, token_issue

pytestmark = pytest.mark.django_db


def test_create_token_shows_it_once_and_stores_only_the_hash(client, admin_a):
    client.force_login(admin_a.user)
    response = client.post(
        reverse("admin:policy_apitoken_add"),
        {"principal": str(admin_a.principal.pk), "name": "ci", "scope_choices": ["read"], "toolsets": "memory"},
        follow=True,
    )
    assert response.status_code == 200
    match = re.search(r'<code id="issued-token">(mp_[A-Za-z0-9_-]+)</code>', response.content.decode())
    assert match, "the new token is shown in a message"
    token = match.group(1)
    row = ApiToken.objects.get(name="ci")
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert row.scopes == ["read", "toolset:memory"]
    assert not ApiToken.objects.filter(token_hash=token).exists()
    caller = token_authenticate(token)
    assert caller is not None and caller.tenant_id == admin_a.tenant.pk
    # Shown once: the token's own page does not show it again.
    detail = client.get(reverse("admin:policy_apitoken_change", args=[row.pk])).content.decode()
    assert token not in detail


def test_tenant_admin_cannot_grant_elevation_or_use_other_tenants_principal(client, admin_a, admin_b):
    client.force_login(admin_a.user)
    before = ApiToken.objects.count()
    elevate = client.post(
        reverse("admin:policy_apitoken_add"),
        {"principal": str(admin_a.principal.pk), "name": "x", "scope_choices": ["admin", "elevate"]},
    )
    assert elevate.status_code == 200  # form redisplayed with an error
    assert "elevate is not one of the available choices" in elevate.content.decode()
    other = client.post(
        reverse("admin:policy_apitoken_add"),
        {"principal": str(admin_b.principal.pk), "name": "y", "scope_choices": ["read"]},
    )
    assert other.status_code == 200
    assert "Select a valid choice" in other.content.decode()
    assert ApiToken.objects.count() == before


def test_revoke_action_revokes_only_own_tokens(client, admin_a, admin_b):
    client.force_login(admin_a.user)
    tokens = ApiToken.objects.filter(principal__in=[admin_a.principal, admin_b.principal])
    client.post(
        reverse("admin:policy_apitoken_changelist"),
        {"action": "revoke_tokens", "_selected_action": [str(t.pk) for t in tokens]},
    )
    assert not ApiToken.objects.filter(principal=admin_a.principal, revoked_at__isnull=True).exists()
    assert ApiToken.objects.filter(principal=admin_b.principal, revoked_at__isnull=True).exists()


def test_dashboard_shows_stats_and_charts(client, admin_a, admin_b):
    caller = admin_a.caller
    episode_store(caller=caller, content="User asked about the weather", butler="chat")
    episode_store(caller=caller, content="User asked about trains", butler="chat")
    fact_store(caller=caller, subject="user", predicate="home", content="Lives in Ghent")
    newer = fact_store(caller=caller, subject="user", predicate="work", content="Works in Brussels").memory
    older = fact_store(caller=caller, subject="user", predicate="office", content="Office in Brussels").memory
    rule_store(caller=caller, content="Answer in Dutch when asked in Dutch")
    ConflictCandidate.objects.create(
        tenant=admin_a.tenant, memory=newer, other=older, kind="duplicate", similarity=0.93
    )
    fact_store(caller=admin_b.caller, subject="other", predicate="x", content="Tenant B only")

    client.force_login(admin_a.user)
    response = client.get(reverse("memproj_dashboard", args=["tenant-a"]))
    assert response.status_code == 200
    ctx = response.context
    assert ctx["stats"]["facts"]["active"] == 3
    assert ctx["stats"]["episodes"]["unconsolidated"] == 2
    assert ctx["per_day"]["total"] == 6  # tenant B's fact is not counted
    assert [row["value"] for row in ctx["maturity"]] == [1, 0, 0, 0]
    assert [row["value"] for row in ctx["backlog"]][0] == 2
    assert ctx["conflict_counts"]["total"] == 1
    page = response.content.decode()
    assert "<svg" in page and "<rect" in page
    assert "Office in Brussels" in page  # open conflict candidate listed


def test_dashboard_index_redirects_a_tenant_admin_to_their_tenant(client, admin_a, admin_b):
    client.force_login(admin_a.user)
    response = client.get(reverse("memproj_dashboard_index"))
    assert response.status_code == 302
    assert response["Location"].endswith("/admin/dashboard/tenant-a/")


def test_dashboard_charts_every_kind_book_chunks_too(client, admin_a):
    """A tenant with an ingested book (roampal's `document` chunks) once made the
    per-day chart fail with a KeyError: every kind has its colour and its bar."""
    from memory.services.collections import book_ingest

    book_ingest(caller=admin_a.caller, title="Handbook", text="Chapter one. The deploy checklist comes first.")
    episode_store(caller=admin_a.caller, content="User asked about the handbook", butler="chat")
    client.force_login(admin_a.user)
    response = client.get(reverse("memproj_dashboard", args=["tenant-a"]))
    assert response.status_code == 200
    titles = [bar["title"] for bar in response.context["per_day"]["bars"]]
    assert any(title.endswith(("document: 1", "document: 2")) for title in titles), titles
    assert {row["kind"] for row in response.context["per_day"]["legend"]} == {"episode", "fact", "rule", "document"}


def _edited(revoke: bool, expires_at: str):  # type: ignore[no-untyped-def]
    """Cut a token off in its change form: revoked (its *Revoke this token*
    box), or its expiry moved into the past."""

    def edit(client, token_row: ApiToken) -> None:  # type: ignore[no-untyped-def]
        date, _, time = expires_at.partition(" ")
        post_data = {"name": token_row.name, "expires_at_0": date, "expires_at_1": time}
        if revoke:
            post_data["revoke"] = "on"
        response = client.post(reverse("admin:policy_apitoken_change", args=[token_row.pk]), post_data)
        assert response.status_code == 302, response.content.decode()[:2000]

    return edit


def _deleted(client, token_row: ApiToken) -> None:
    response = client.post(reverse("admin:policy_apitoken_delete", args=[token_row.pk]), {"post": "yes"})
    assert response.status_code == 302, response.content.decode()[:2000]


@pytest.mark.parametrize(
    "cut_off", [_edited(revoke=True, expires_at=""), _edited(revoke=False, expires_at="2026-01-01 00:00:00"), _deleted]
)
def test_a_token_cut_off_in_the_admin_is_refused_at_once_by_the_http_tier(client, admin_a, cut_off):
    """The HTTP tier caches a token's caller for a few seconds; every way the
    admin ends a token forgets it at once, as the revoke action does."""
    issued = token_issue(tenant_slug="tenant-a", principal_name="bot", role="member")
    assert token_authenticate_cached(issued.token) is not None
    client.force_login(admin_a.user)
    cut_off(client, issued.api_token)
    assert token_cached_caller(issued.token) is None
    assert token_authenticate_cached(issued.token) is None
