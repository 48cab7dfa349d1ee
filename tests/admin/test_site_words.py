"""What the admin says: its own name, model names as written ("API tokens"),
messages that count in proper English, and audit events that name their actor
instead of showing a principal's UUID (Django test client, real database)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memory.models import ConflictCandidate, Memory
from memory.services.memories import episode_store, fact_store
from policy.services.tokens import token_issue

pytestmark = pytest.mark.django_db


def shown_messages(response) -> list[str]:
    """The messages the page after the redirect shows (which consumes them)."""
    return [str(message) for message in response.context["messages"]]


def test_the_site_is_named_memproj_and_links_nowhere_missing(client, superuser):
    client.force_login(superuser.user)

    page = client.get(reverse("admin:index")).content.decode()

    assert "memproj administration" in page
    assert "<title>Memories, tenants and access | memproj admin</title>" in page
    assert "Django administration" not in page and "Django site admin" not in page
    assert "View site" not in page  # nothing is served at "/"
    assert 'id="mp-dashboard-link"' in page
    assert "API tokens" in page and "Api tokens" not in page


def facts(admin, count: int) -> list[Memory]:
    return [
        fact_store(caller=admin.caller, subject="s", predicate=f"p{i}", content=f"Fact number {i}").memory
        for i in range(count)
    ]


def run_action(client, url_name: str, action: str, rows) -> list[str]:
    data = {"action": action, "_selected_action": [str(r.pk) for r in rows]}
    response = client.post(reverse(url_name), data, follow=True)
    assert response.redirect_chain and response.status_code == 200
    return shown_messages(response)


def test_list_action_messages_count_in_singular_and_plural(client, admin_a):
    one, two, three = facts(admin_a, 3)
    client.force_login(admin_a.user)
    url = "admin:memory_memory_changelist"

    assert run_action(client, url, "action_confirm", [one]) == ["1 memory confirmed."]
    assert run_action(client, url, "action_retract", [two, three]) == ["2 memories retracted."]
    assert run_action(client, url, "action_restore", [two]) == ["1 memory restored."]


def test_a_row_that_fails_is_counted_and_named(client, admin_a):
    [fact] = facts(admin_a, 1)
    episode = episode_store(caller=admin_a.caller, content="Agent ran the tests", butler="ci")
    client.force_login(admin_a.user)

    said = run_action(client, "admin:memory_memory_changelist", "action_confirm", [fact, episode])

    assert said[:2] == ["1 memory confirmed.", "1 memory could not be confirmed:"]
    assert said[2].startswith(f"{episode.pk}: ")


def test_conflict_and_token_actions_count_too(client, admin_a):
    a, b = facts(admin_a, 2)
    conflict = ConflictCandidate.objects.create(tenant=admin_a.tenant, memory=b, other=a, kind="duplicate")
    token = token_issue(tenant_slug=admin_a.tenant.slug, principal_name="ci-bot", role="member").api_token
    client.force_login(admin_a.user)

    assert run_action(client, "admin:memory_conflictcandidate_changelist", "action_dismiss", [conflict]) == [
        "1 conflict dismissed."
    ]
    assert run_action(client, "admin:policy_apitoken_changelist", "revoke_tokens", [token]) == ["Revoked 1 token."]


def test_event_history_names_the_actor(client, admin_a, superuser):
    fact = fact_store(caller=admin_a.caller, subject="user", predicate="tz", content="Lives in Lyon").memory
    client.force_login(superuser.user)
    client.post(reverse("admin:memory_memory_review", args=[fact.pk]), {"action": "confirm"})
    principal_id = str(admin_a.principal.pk)

    detail = client.get(reverse("admin:memory_memory_change", args=[fact.pk])).content.decode()
    history = detail[detail.index('id="mp-events"') : detail.index("</table>", detail.index('id="mp-events"'))]
    assert '<td class="mp-actor">alice</td>' in history  # stored by alice's principal
    assert '<td class="mp-actor">root (superuser)</td>' in history  # the superuser's review
    assert principal_id not in history

    events = client.get(reverse("admin:memory_memoryevent_changelist")).content.decode()
    assert '<td class="field-actor">alice</td>' in events
    assert '<td class="field-actor">root (superuser)</td>' in events
    assert principal_id not in events

    dashboard = client.get(reverse("memproj_dashboard", args=[admin_a.tenant.slug])).content.decode()
    assert '<td class="mp-actor">root (superuser)</td>' in dashboard


def test_a_principal_with_another_login_name_shows_both(client, admin_a):
    admin_a.principal.name = "alice-laptop"
    admin_a.principal.save(update_fields=["name"])
    fact = fact_store(caller=admin_a.caller, subject="user", predicate="os", content="Uses Linux").memory
    client.force_login(admin_a.user)

    detail = client.get(reverse("admin:memory_memory_change", args=[fact.pk])).content.decode()

    assert '<td class="mp-actor">alice-laptop (login alice)</td>' in detail


def test_policy_events_name_their_actor(client, admin_a):
    from policy.models import PolicyVersion
    from policy.services.policies import policy_apply

    current = PolicyVersion.objects.get(tenant=admin_a.tenant, is_current=True)
    policy_apply(caller=admin_a.caller, yaml=current.source_yaml, validate_only=True)  # as a tool call would
    policy_apply(caller=admin_a.caller, yaml=current.source_yaml, dry_run=True, actor_name="admin:alice")
    client.force_login(admin_a.user)

    page = client.get(reverse("admin:policy_policyevent_changelist")).content.decode()

    assert '<td class="field-actor">alice</td>' in page
    assert '<td class="field-actor">admin:alice</td>' in page
    assert str(admin_a.principal.pk) not in page
