"""Policy events name the API token of the call, as memory's audit events do: a
policy apply refused over the pce dialect is logged only in the policy's own
history, and that row must tell which of a principal's tokens made it. What no
token asked for (the admin's apply form, ``manage.py``) names none. The API
token admin links each token to the memory audit events it made."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from memory.models import MemoryEvent
from memory.services.memories import episode_store
from policy.models import ApiToken, PolicyEvent
from policy.services.policies import policy_apply, policy_ensure_default
from policy.services.signing import signing_key_clear, signing_key_set
from tests.admin.conftest import make_staff
from tests.conftest import Identity, make_identity
from tests.policy.test_yaml_bounds import laughs


@pytest.fixture
def laptop(owner: Identity) -> Identity:
    """A second token of the owner's principal."""
    second = make_identity("tenant-a", "owner", role="admin")
    assert second.caller.principal_id == owner.caller.principal_id
    assert second.caller.token_id != owner.caller.token_id
    return second


# --- which token the policy log names ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_refused_pce_apply_names_the_token_of_the_call(owner, laptop, mcp_client_for):
    """The apply is refused before the pce tool-call event is written, so the
    policy's own row is the only record of it: it names the token that sent it,
    not merely its principal (who holds two)."""
    async with mcp_client_for(laptop, "pce") as client:
        result = await client.call_tool("pce.memory.policy.apply", {"yaml": laughs(6, 10), "dry_run": True})
    assert result.is_error
    refused = await PolicyEvent.objects.aget(tenant_id=owner.caller.tenant_id, event_type="refused")
    assert refused.payload["code"] == "INVALID_POLICY"
    assert refused.actor_principal_id == owner.caller.principal_id
    assert refused.actor_token_id == laptop.caller.token_id
    assert not await MemoryEvent.objects.filter(tenant_id=owner.caller.tenant_id, event_type="tool_call").aexists()


@pytest.mark.django_db(transaction=True)
async def test_a_pce_dry_run_names_the_token_in_both_logs(owner, mcp_client_for):
    yaml = "version: '0.2.0'\nretrieval:\n  hybrid: { alpha: 0.3 }\n"
    async with mcp_client_for(owner, "pce") as client:
        result = await client.call_tool("pce.memory.policy.apply", {"yaml": yaml, "dry_run": True})
    assert not result.is_error, result.content
    event = await PolicyEvent.objects.aget(tenant_id=owner.caller.tenant_id, event_type="dry_run")
    call = await MemoryEvent.objects.aget(tenant_id=owner.caller.tenant_id, event_type="tool_call")
    assert event.actor_token_id == call.actor_token_id == owner.caller.token_id


@pytest.mark.django_db
def test_every_policy_event_writer_names_the_token(owner, member, laptop):
    policy_ensure_default(tenant_id=owner.caller.tenant_id)
    policy_apply(caller=owner.caller, yaml="version: '0.2.0'\n")
    signing_key_set(caller=laptop.caller)
    signing_key_clear(caller=owner.caller)
    with pytest.raises(Exception, match="tenant admin"):
        policy_apply(caller=member.caller, yaml="version: '0.3.0'\n")
    tokens = dict(
        PolicyEvent.objects.filter(tenant_id=owner.caller.tenant_id).values_list("event_type", "actor_token_id")
    )
    assert tokens == {
        "applied": owner.caller.token_id,
        "signing_key_set": laptop.caller.token_id,
        "signing_key_cleared": owner.caller.token_id,
        "refused": member.caller.token_id,
    }


@pytest.mark.django_db
def test_the_admin_form_and_the_command_name_no_token(client, tmp_path):
    alice = make_staff("alice", "tenant-a", "admin")
    assert alice.tenant is not None
    policy_ensure_default(tenant_id=alice.tenant.id)
    client.force_login(alice.user)
    form = {"tenant": str(alice.tenant.id), "yaml": "version: '0.2.0'\n", "mode": "dry_run"}
    assert client.post(reverse("admin:policy_policyversion_apply"), form).status_code == 200
    refused = client.post(reverse("admin:policy_policyversion_apply"), {**form, "yaml": "version: [\n"})
    assert "[INVALID_POLICY]" in refused.content.decode()
    bad = tmp_path / "bad.yaml"
    bad.write_text("retrieval: nonsense\n")
    with pytest.raises(CommandError):
        call_command("policy_apply", tenant="tenant-a", file=str(bad))
    events = list(PolicyEvent.objects.filter(tenant=alice.tenant).order_by("id"))
    assert [(e.event_type, e.actor_name) for e in events] == [
        ("dry_run", "admin:alice"),
        ("refused", "admin:alice"),
        ("refused", "manage.py policy_apply"),
    ]
    assert [e.actor_token_id for e in events] == [None, None, None]
    # alice holds a token, but her admin login did not use it.
    assert ApiToken.objects.filter(principal=alice.principal).exists()


@pytest.mark.django_db
def test_the_policy_event_list_shows_the_token(client, owner):
    alice = make_staff("alice", "tenant-a", "admin")
    assert alice.tenant is not None
    policy_ensure_default(tenant_id=owner.caller.tenant_id)
    policy_apply(caller=owner.caller, yaml="version: '0.2.0'\n", dry_run=True)
    policy_apply(caller=alice.caller, yaml="version: '0.2.0'\n", validate_only=True)
    token = ApiToken.objects.get(pk=owner.caller.token_id)
    client.force_login(alice.user)
    page = client.get(reverse("admin:policy_policyevent_changelist")).content.decode()
    assert f'<td class="field-token">{token.prefix}…</td>' in page
    assert '<td class="field-token">no token</td>' in page
    event = PolicyEvent.objects.get(event_type="dry_run")
    detail = client.get(reverse("admin:policy_policyevent_change", args=[event.pk])).content.decode()
    assert str(token.pk) in detail


# --- the token admin links to the token's events ----------------------------------------------


def events_href(html: str) -> str:
    match = re.search(r'<a href="([^"]+)">events of this token</a>', html)
    assert match, "the page links to the token's events"
    return unescape(match.group(1))


@pytest.mark.django_db
def test_the_token_page_links_to_the_events_of_that_token(client, owner, laptop):
    alice = make_staff("alice", "tenant-a", "admin")
    desk = episode_store(caller=owner.caller, content="deployed from the desk", butler="ops")
    away = episode_store(caller=laptop.caller, content="deployed from the laptop", butler="ops")
    client.force_login(alice.user)

    detail = client.get(reverse("admin:policy_apitoken_change", args=[owner.caller.token_id])).content.decode()
    href = events_href(detail)
    assert href == f"{reverse('admin:memory_memoryevent_changelist')}?token={owner.caller.token_id}"
    listing = client.get(reverse("admin:policy_apitoken_changelist")).content.decode()
    assert f'href="{reverse("admin:memory_memoryevent_changelist")}?token={laptop.caller.token_id}"' in listing

    events = client.get(href)
    assert events.status_code == 200
    html = events.content.decode()
    assert reverse("admin:memory_memory_change", args=[desk.id]) in html
    assert reverse("admin:memory_memory_change", args=[away.id]) not in html


@pytest.mark.django_db
def test_the_link_only_where_the_token_is_seen(client, owner):
    """Another tenant's admin sees neither the token nor its link."""
    bob = make_staff("bob", "tenant-b", "admin")
    assert bob.principal is not None
    client.force_login(bob.user)
    listing = client.get(reverse("admin:policy_apitoken_changelist")).content.decode()
    assert f"?token={bob.principal.tokens.get().pk}" in listing
    assert str(owner.caller.token_id) not in listing
    assert client.get(reverse("admin:policy_apitoken_change", args=[owner.caller.token_id])).status_code == 404


@pytest.mark.django_db
def test_a_new_token_form_has_no_link(client):
    alice = make_staff("alice", "tenant-a", "admin")
    client.force_login(alice.user)
    page = client.get(reverse("admin:policy_apitoken_add")).content.decode()
    assert "events of this token" not in page
