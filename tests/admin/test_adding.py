"""Adding a memory in the admin: the form stores through the services (the same
rules and audit events as an agent's tools), shows the services' refusals as
form errors on the field they name, and lets only tenant admins (their own
tenant) and superusers (any tenant) add. Django test client, real database."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memory.models import Kind, Memory, MemoryEvent, Validity
from memory.services.memories import fact_store
from policy.models import Tenant

pytestmark = pytest.mark.django_db

ADD = "admin:memory_memory_add"


def add(client, tenant: Tenant, **fields: str):
    data = {"tenant": str(tenant.pk), "kind": "fact", "scope": "global", **fields}
    return client.post(reverse(ADD), data)


def form_errors(response) -> dict[str, list[str]]:
    assert response.status_code == 200, "the form is shown again with its errors"
    return {name: list(errors) for name, errors in response.context["form"].errors.items()}


def stored_events(memory: Memory) -> list[MemoryEvent]:
    return list(MemoryEvent.objects.filter(memory_id=memory.pk).order_by("id"))


def test_the_add_page_is_a_form_with_one_save(client, admin_a):
    client.force_login(admin_a.user)

    page = client.get(reverse(ADD)).content.decode()

    assert 'id="memory-add-form"' in page
    assert 'name="content"' in page and 'name="subject"' in page and 'name="butler"' in page
    form = page[page.index('id="memory-add-form"') : page.index("</form>", page.index('id="memory-add-form"'))]
    assert form.count('type="submit"') == 2  # Save, Save and add another
    assert "Save and continue editing" not in page
    # A tenant admin has one tenant: it is chosen already.
    assert f'<option value="{admin_a.tenant.pk}" selected>' in page


def test_tenant_admin_adds_a_fact_through_the_service(client, admin_a):
    client.force_login(admin_a.user)

    response = add(
        client, admin_a.tenant, subject="alice", predicate="editor", content="Alice uses Helix", namespace="users/alice"
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("admin:memory_memory_changelist")
    memory = Memory.objects.get(content="Alice uses Helix")
    assert (memory.kind, memory.subject, memory.predicate) == (Kind.FACT, "alice", "editor")
    assert memory.namespace == ["users", "alice"]
    assert memory.tenant_id == admin_a.tenant.pk
    assert memory.principal_id == admin_a.principal.id
    [stored] = stored_events(memory)
    assert stored.event_type == "stored"
    assert stored.actor_principal_id == admin_a.principal.id
    listing = client.get(reverse("admin:memory_memory_changelist")).content.decode()
    assert "Stored fact" in listing and "Alice uses Helix" in listing


def test_a_newer_fact_supersedes_the_active_one_and_says_so(client, admin_a):
    old = fact_store(caller=admin_a.caller, subject="team", predicate="standup", content="Standup at 09:30").memory
    client.force_login(admin_a.user)

    response = add(client, admin_a.tenant, subject="team", predicate="standup", content="Standup at 10:00")

    old.refresh_from_db()
    assert old.validity == Validity.SUPERSEDED
    new = Memory.objects.get(content="Standup at 10:00")
    assert old.superseded_by_id == new.pk
    page = client.get(response["Location"]).content.decode()
    assert "It supersedes 1 earlier fact with the same subject and predicate." in page


def test_superuser_adds_to_any_tenant_and_is_named_in_the_audit(client, superuser, admin_a, admin_b):
    client.force_login(superuser.user)

    response = add(client, admin_b.tenant, kind="rule", content="Never deploy on Fridays")

    assert response.status_code == 302
    rule = Memory.objects.get(content="Never deploy on Fridays")
    assert (rule.kind, rule.tenant_id, rule.maturity) == (Kind.RULE, admin_b.tenant.pk, "candidate")
    assert rule.principal_id is None
    stored, note = stored_events(rule)
    assert (stored.event_type, stored.actor_principal_id) == ("stored", None)
    assert note.event_type == "admin_review"
    assert note.payload == {"action": "add", "superuser": "root", "kind": "rule"}


def test_an_episode_needs_a_butler_and_gets_its_fields(client, admin_a):
    client.force_login(admin_a.user)

    missing = add(client, admin_a.tenant, kind="episode", content="Agent fixed the build")
    assert list(form_errors(missing)) == ["butler"]
    assert "butler must be 1-100 characters" in form_errors(missing)["butler"][0]

    response = add(
        client, admin_a.tenant, kind="episode", content="Agent fixed the build", butler="ci", session_id="s-1"
    )
    assert response.status_code == 302
    episode = Memory.objects.get(content="Agent fixed the build")
    assert (episode.kind, episode.butler, episode.session_id) == (Kind.EPISODE, "ci", "s-1")


def test_errors_are_shown_on_their_fields(client, admin_a):
    client.force_login(admin_a.user)

    # The form's own checks: required content, a number in range, a field of another kind.
    errors = form_errors(add(client, admin_a.tenant, kind="rule", content="", importance="11", subject="x"))
    assert set(errors) == {"content", "importance", "subject"}
    assert errors["subject"] == ["Only facts have a subject; clear it or choose that kind."]
    # The services' refusals, on the field they name or above the form.
    errors = form_errors(add(client, admin_a.tenant, content="Something", scope="no spaces allowed"))
    assert list(errors) == ["scope"]
    assert errors["scope"][0].startswith("scope must be 1-100 characters")
    errors = form_errors(add(client, admin_a.tenant, predicate="editor", content="Helix"))
    assert errors == {"__all__": ["a fact with a predicate needs a subject too."]}
    errors = form_errors(add(client, admin_a.tenant, content="Tagged", tags=",".join(f"t{i}" for i in range(40))))
    assert errors == {"tags": ["at most 32 tags are allowed."]}
    assert not Memory.objects.filter(tenant=admin_a.tenant).exists()
    assert not MemoryEvent.objects.filter(tenant=admin_a.tenant, event_type="stored").exists()


def test_an_error_page_keeps_what_was_typed(client, admin_a):
    client.force_login(admin_a.user)

    page = add(client, admin_a.tenant, kind="episode", content="Typed by hand").content.decode()

    assert "Typed by hand" in page
    assert 'class="errorlist' in page


def test_a_tenant_admin_cannot_add_to_another_tenant(client, admin_a, admin_b):
    client.force_login(admin_a.user)

    errors = form_errors(add(client, admin_b.tenant, content="Planted in B"))

    assert "Select a valid choice" in errors["tenant"][0]
    assert not Memory.objects.filter(content="Planted in B").exists()


def test_a_member_cannot_add(client, member_a):
    Tenant.objects.filter(pk=member_a.tenant.pk).update(members_can_review=True)
    client.force_login(member_a.user)

    assert client.get(reverse(ADD)).status_code == 403
    assert add(client, member_a.tenant, content="Not allowed").status_code == 403
    assert "Add memory" not in client.get(reverse("admin:memory_memory_changelist")).content.decode()


def test_save_and_add_another_keeps_tenant_and_kind(client, superuser, admin_a):
    client.force_login(superuser.user)

    response = client.post(
        reverse(ADD),
        {
            "tenant": str(admin_a.tenant.pk),
            "kind": "rule",
            "content": "Small pull requests",
            "scope": "global",
            "_addanother": "1",
        },
    )

    assert response.status_code == 302
    again = client.get(response["Location"]).context["form"]
    assert (again["tenant"].value(), again["kind"].value()) == (str(admin_a.tenant.pk), "rule")
