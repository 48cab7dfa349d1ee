"""A revoked API token stays revoked. An outside probe cleared ``revoked_at`` on
the token's change form as a tenant admin and the revoked (possibly leaked)
token was accepted again. As with mem0's and Zep's API keys, revocation is
final: access comes back through a new token. The guard is the model's and the
database's, so neither the form, a crafted POST, a form loaded before the
revocation, a queryset update nor a shell brings a token back."""

from __future__ import annotations

import json

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from policy.models import ApiToken
from policy.services.tokens import IssuedToken, token_authenticate, token_authenticate_cached, token_issue, token_revoke


def _revoked_bot() -> tuple[IssuedToken, ApiToken]:
    issued = token_issue(tenant_slug="tenant-a", principal_name="bot", role="member", name="leaked")
    assert token_authenticate_cached(issued.token) is not None  # cached while live
    assert token_revoke(ApiToken.objects.filter(pk=issued.api_token.pk)) == 1
    row = ApiToken.objects.get(pk=issued.api_token.pk)
    assert row.revoked_at is not None
    return issued, row


def _clearing_post(row: ApiToken, name: str = "renamed") -> dict[str, str]:
    """The change form's POST with the revocation date's two inputs emptied."""
    return {"name": name, "revoked_at_0": "", "revoked_at_1": "", "expires_at_0": "", "expires_at_1": ""}


def _http_tool_status(client, token: str) -> int:  # type: ignore[no-untyped-def]
    """The plain HTTP tool route's answer to the token (mcp_server/http.py)."""
    client.logout()  # the route authenticates the bearer token, never the admin's session
    response = client.post(
        "/api/memory/memory_stats", data="{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    return response.status_code


@pytest.mark.django_db
def test_clearing_revoked_at_in_the_change_form_leaves_the_token_revoked(client, admin_a):
    issued, row = _revoked_bot()
    client.force_login(admin_a.user)
    response = client.post(reverse("admin:policy_apitoken_change", args=[row.pk]), _clearing_post(row))
    assert response.status_code == 302, response.content.decode()[:2000]
    after = ApiToken.objects.get(pk=row.pk)
    assert after.name == "renamed"  # the rest of the form still saves
    assert after.revoked_at == row.revoked_at
    assert token_authenticate(issued.token) is None
    assert token_authenticate_cached(issued.token) is None
    assert _http_tool_status(client, issued.token) == 401


@pytest.mark.django_db
def test_a_form_loaded_before_the_revocation_does_not_undo_it(client, admin_a):
    """The token's page is opened while the token is live, the token is revoked
    (the list's action, another tab or admin), then the page is saved with
    what it showed: the stale empty date is not written back."""
    issued = token_issue(tenant_slug="tenant-a", principal_name="bot", role="member", name="leaked")
    client.force_login(admin_a.user)
    change_url = reverse("admin:policy_apitoken_change", args=[issued.api_token.pk])
    assert client.get(change_url).status_code == 200
    client.post(
        reverse("admin:policy_apitoken_changelist"),
        {"action": "revoke_tokens", "_selected_action": [str(issued.api_token.pk)]},
    )
    revoked_at = ApiToken.objects.get(pk=issued.api_token.pk).revoked_at
    assert revoked_at is not None
    stale = {"name": "leaked", "expires_at_0": "", "expires_at_1": ""}
    assert client.post(change_url, stale).status_code == 302
    assert ApiToken.objects.get(pk=issued.api_token.pk).revoked_at == revoked_at
    assert token_authenticate(issued.token) is None


@pytest.mark.django_db
def test_the_change_form_shows_the_revocation_read_only(client, admin_a, superuser):
    _, row = _revoked_bot()
    live = token_issue(tenant_slug="tenant-a", principal_name="bot2", role="member").api_token
    for staff in (admin_a, superuser):
        client.force_login(staff.user)
        revoked_page = client.get(reverse("admin:policy_apitoken_change", args=[row.pk])).content.decode()
        assert 'name="revoked_at_0"' not in revoked_page and 'name="revoked_at_1"' not in revoked_page
        assert 'name="revoke"' not in revoked_page  # nothing left to revoke
        assert 'name="name"' in revoked_page  # the page is still a form
        live_page = client.get(reverse("admin:policy_apitoken_change", args=[live.pk])).content.decode()
        assert 'name="revoked_at_0"' not in live_page
        assert 'name="revoke"' in live_page  # revoking goes through token_revoke


@pytest.mark.django_db
def test_no_save_update_or_second_revocation_changes_a_revocation():
    issued, row = _revoked_bot()
    revoked_at = row.revoked_at

    row.revoked_at = None
    row.name = "shell edit"
    row.save()
    assert row.revoked_at == revoked_at  # the instance is told what was kept
    stored = ApiToken.objects.get(pk=row.pk)
    assert stored.revoked_at == revoked_at and stored.name == "shell edit"

    with pytest.raises(ValueError, match="token_revoke"):
        row.save(update_fields=["revoked_at"])
    for value in (None, timezone.now()):
        with pytest.raises(IntegrityError, match="final"), transaction.atomic():
            ApiToken.objects.filter(pk=row.pk).update(revoked_at=value)
    assert token_revoke(ApiToken.objects.filter(pk=row.pk)) == 0
    assert ApiToken.objects.get(pk=row.pk).revoked_at == revoked_at
    assert token_authenticate(issued.token) is None


@pytest.mark.django_db
def test_a_live_token_is_revoked_through_token_revoke_only():
    """Setting the date on a live token and saving does not revoke it
    half-way (no cache cleared, no generation bumped): token_revoke does."""
    issued = token_issue(tenant_slug="tenant-a", principal_name="bot", role="member")
    row = ApiToken.objects.get(pk=issued.api_token.pk)
    row.revoked_at = timezone.now()
    row.save()
    assert row.revoked_at is None and ApiToken.objects.get(pk=row.pk).revoked_at is None
    assert token_revoke(ApiToken.objects.filter(pk=row.pk)) == 1
    assert token_authenticate(issued.token) is None


async def _mcp_status(token: str) -> int:
    from memproj.asgi import Router
    from tests.harness.surfaces.asgi import asgi_transport

    router = Router()
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {token}",
    }
    async with (
        router.servers["memory"].session_manager.run(),
        httpx.AsyncClient(transport=asgi_transport(router), base_url="http://testserver") as client,
    ):
        return (await client.post("/mcp/memory", content=request, headers=headers)).status_code


@pytest.mark.django_db(transaction=True)  # the MCP app's threads read the token on their own connections
def test_the_mcp_endpoint_refuses_the_token_after_the_crafted_post(client, admin_a):
    issued, row = _revoked_bot()
    live = token_issue(tenant_slug="tenant-a", principal_name="bot2", role="member")
    client.force_login(admin_a.user)
    response = client.post(reverse("admin:policy_apitoken_change", args=[row.pk]), _clearing_post(row))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert async_to_sync(_mcp_status)(live.token) == 200  # the endpoint answers a live token
    assert async_to_sync(_mcp_status)(issued.token) == 401
