"""Audit events name the API token of the call, not only its principal, and the
chain hashes it (hash version 2): two tokens of one principal are told apart
over MCP and REST, an edit of the token is detected, a revoked or deleted
token's events stay and verify, events written before tokens were recorded
(version 1) verify beside new ones, and what no token asked for (background
work, the admin) names none. The admin lists and filters events by token."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from memory.models import Memory, MemoryEvent
from memory.services.events import EVENT_HASH_VERSION, EventType, chain_verify, event_hash
from memory.services.memories import episode_store, fact_store, memory_forget
from memory.services.purge import principal_purge
from memory.services.system import system_caller
from memproj.dbroles import as_owner
from policy.models import ApiToken
from policy.services.tokens import token_revoke
from tests.conftest import Identity, make_identity
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def laptop(member: Identity) -> Identity:
    """A second token of the member's principal."""
    second = make_identity("tenant-a", "member")
    assert second.caller.principal_id == member.caller.principal_id
    assert second.caller.token_id != member.caller.token_id
    return second


def problems(identity: Identity) -> list[str]:
    [report] = chain_verify(tenant_ids=[identity.caller.tenant_id])
    return report.problems


def stored_event(memory_id: Any) -> MemoryEvent:
    return MemoryEvent.objects.get(memory_id=memory_id, event_type=EventType.STORED)


def unguarded(conn: psycopg.Connection, sql: str, params: list[Any]) -> None:
    """An edit made with the database alone: the owner switches the guard off for it."""
    conn.execute("ALTER TABLE memory_memoryevent DISABLE TRIGGER memory_event_append_only")
    try:
        conn.execute(sql, params)
    finally:
        conn.execute("ALTER TABLE memory_memoryevent ENABLE TRIGGER memory_event_append_only")


# --- which token made the call ----------------------------------------------------------------


async def test_two_tokens_of_one_principal_are_told_apart_over_mcp_and_rest(member, laptop):
    """The same principal stores over MCP (streamable HTTP, the token's id
    carried through the SDK's access-token claims) with one token and over the
    REST route with the other, and once more over MCP with the second: each
    event names the token of its own call."""
    from memproj.asgi import Router

    router = Router()

    async def over_mcp(client: httpx.AsyncClient, token: str, content: str) -> str:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "memory_store_episode", "arguments": {"content": content, "butler": "ops"}},
        }
        answer = await client.post(
            "/mcp/memory/", json=body, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        )
        assert answer.status_code == 200, answer.text
        result = answer.json()["result"]
        assert not result.get("isError"), result
        return result["structuredContent"]["id"]

    async with router.servers["memory"].session_manager.run():
        transport = asgi_transport(router)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            desk = await over_mcp(client, member.token, "deployed from the desk")
            rest = await client.post(
                "/api/memory/memory_store_episode",
                json={"content": "deployed from the laptop", "butler": "ops"},
                headers={"Authorization": f"Bearer {laptop.token}"},
            )
            assert rest.status_code == 200, rest.text
            laptop_rest = rest.json()["id"]
            laptop_mcp = await over_mcp(client, laptop.token, "deployed from the laptop again")

    events = {pk: await sync_to_async(stored_event)(pk) for pk in (desk, laptop_rest, laptop_mcp)}
    assert events[desk].actor_token_id == member.caller.token_id
    assert events[laptop_rest].actor_token_id == events[laptop_mcp].actor_token_id == laptop.caller.token_id
    assert {e.actor_principal_id for e in events.values()} == {member.caller.principal_id}
    assert {e.hash_version for e in events.values()} == {EVENT_HASH_VERSION}
    assert await sync_to_async(problems)(member) == []


def test_the_services_name_the_token_of_their_caller(member, laptop):
    """Whatever the surface, a caller made from a token names it: the token that
    retracted a fact is not the one that stored it, and an elevated caller
    keeps its own token in the tenant it acts on."""
    fact = fact_store(caller=member.caller, subject="user", predicate="city", content="User lives in Rome").memory
    memory_forget(caller=laptop.caller, kind="fact", memory_id=fact.id)
    retracted = MemoryEvent.objects.get(memory_id=fact.id, event_type=EventType.RETRACTED)
    assert (stored_event(fact.id).actor_token_id, retracted.actor_token_id) == (
        member.caller.token_id,
        laptop.caller.token_id,
    )

    ops = make_identity("tenant-b", "ops", role="admin", scopes=["read", "write", "admin", "elevate"])
    elevated = episode_store(caller=ops.caller.acting_on(member.caller.tenant_id), content="fixed", butler="ops")
    event = stored_event(elevated.id)
    assert (event.tenant_id, event.actor_token_id) == (member.caller.tenant_id, ops.caller.token_id)
    assert problems(member) == []


# --- the token is part of the hashed content -----------------------------------------------------


def test_an_edited_token_breaks_the_chain(member, laptop, owner_connection):
    """Swapping the token of an event for another of the same principal (to
    blame the other token), clearing it, or passing the event off as one
    written before tokens were recorded: each shows at that event."""
    episode_store(caller=member.caller, content="first", butler="general")
    target = stored_event(episode_store(caller=member.caller, content="second", butler="general").id)
    episode_store(caller=member.caller, content="third", butler="general")
    assert problems(member) == []
    altered = f"event {target.pk}: its hash does not match its content (the row was altered)"

    for edit, params in [
        ("UPDATE memory_memoryevent SET actor_token_id = %s WHERE id = %s", [laptop.caller.token_id, target.pk]),
        ("UPDATE memory_memoryevent SET actor_token_id = NULL WHERE id = %s", [target.pk]),
        ("UPDATE memory_memoryevent SET actor_token_id = NULL, hash_version = 1 WHERE id = %s", [target.pk]),
    ]:
        unguarded(owner_connection, edit, params)
        assert problems(member) == [altered], edit
        unguarded(
            owner_connection,
            "UPDATE memory_memoryevent SET actor_token_id = %s, hash_version = 2 WHERE id = %s",
            [member.caller.token_id, target.pk],
        )
        assert problems(member) == []

    unguarded(owner_connection, "UPDATE memory_memoryevent SET hash_version = 7 WHERE id = %s", [target.pk])
    assert problems(member) == [f"event {target.pk}: its hash version 7 is unknown (the row was altered)"]


def test_the_recipe_hashes_the_token_from_version_2_only():
    common: dict[str, Any] = {
        "prev_hash": "",
        "tenant_id": uuid.uuid4(),
        "event_type": "stored",
        "memory_id": None,
        "memory_kind": "",
        "actor_principal_id": uuid.uuid4(),
        "payload_text": "{}",
        "created_at": MemoryEvent._meta.get_field("created_at").to_python("2026-01-02T03:04:05.678901+00:00"),
    }
    first, second = uuid.uuid4(), uuid.uuid4()
    assert event_hash(version=1, actor_token_id=None, **common) == event_hash(version=1, actor_token_id=first, **common)
    assert len({event_hash(version=2, actor_token_id=t, **common) for t in (None, first, second)}) == 3
    with pytest.raises(ValueError, match="unknown hash version 3"):
        event_hash(version=3, actor_token_id=None, **common)


# --- a revoked or deleted token -------------------------------------------------------------------


def test_a_revoked_then_deleted_token_keeps_its_events_verifiable(member, laptop):
    leaked = episode_store(caller=laptop.caller, content="written with the leaked token", butler="general")
    episode_store(caller=member.caller, content="written with the other token", butler="general")
    token_id = laptop.caller.token_id

    assert token_revoke(ApiToken.objects.filter(pk=token_id)) == 1
    assert stored_event(leaked.id).actor_token_id == token_id
    assert problems(member) == []

    ApiToken.objects.filter(pk=token_id).delete()
    assert stored_event(leaked.id).actor_token_id == token_id
    assert list(MemoryEvent.objects.filter(actor_token_id=token_id).values_list("memory_id", flat=True)) == [leaked.id]
    assert problems(member) == []


# --- what no token asked for --------------------------------------------------------------------


def test_background_work_after_a_token_call_names_no_token(member):
    """The conflict check runs as a Celery task (eager here) after the write
    commits: its merge is the system's act, not the token's."""
    older = fact_store(caller=member.caller, subject=None, predicate=None, content="Allergic to peanuts").memory
    newer = fact_store(caller=member.caller, subject=None, predicate=None, content="Allergic to peanuts").memory
    assert Memory.objects.get(pk=older.pk).superseded_by_id == newer.id  # the background merge ran
    merged = MemoryEvent.objects.get(memory_id=older.id, event_type=EventType.SUPERSEDED)
    assert (merged.actor_principal_id, merged.actor_token_id) == (None, None)
    assert stored_event(newer.id).actor_token_id == member.caller.token_id
    assert problems(member) == []


# --- events from before tokens were recorded ----------------------------------------------------


def test_events_written_before_the_token_verify_beside_new_ones(owner, member, laptop, owner_connection):
    """Back to the schema before migration 0040, events written by its writer;
    forward again: those are hash version 1 with no token and still verify,
    chained to the version 2 events written after them, also once a purge
    re-chains the mix. A token slipped into a version 1 event (whose hash
    never covered one) is reported."""
    with as_owner():
        call_command("migrate", "memory", "0039", verbosity=0)
    try:
        first_before = episode_store(caller=owner.caller, content="before", butler="general").id
        member_before = episode_store(caller=member.caller, content="the member, before", butler="general").id
        last_before = episode_store(caller=owner.caller, content="still before", butler="general").id
    finally:
        with as_owner():
            call_command("migrate", "memory", verbosity=0)
    old = [stored_event(pk) for pk in (first_before, member_before, last_before)]
    assert [(e.hash_version, e.actor_token_id) for e in old] == [(1, None)] * 3

    after = episode_store(caller=laptop.caller, content="after", butler="general").id
    episode_store(caller=owner.caller, content="after, the owner", butler="general")
    assert stored_event(after).hash_version == 2
    assert problems(owner) == []

    # The purge re-chains the events after the member's first, of both versions, each with its own recipe.
    with as_owner():
        principal_purge(principal_id=member.caller.principal_id, reason="ticket 12")
    assert not MemoryEvent.objects.filter(memory_id__in=[member_before, after]).exists()
    assert stored_event(last_before).hash_version == 1
    assert problems(owner) == []

    first = stored_event(first_before)
    unguarded(
        owner_connection,
        "UPDATE memory_memoryevent SET actor_token_id = %s WHERE id = %s",
        [owner.caller.token_id, first.pk],
    )
    assert problems(owner) == [f"event {first.pk}: its hash does not match its content (the row was altered)"]


# --- the admin --------------------------------------------------------------------------------


def test_the_admin_lists_and_filters_events_by_token(client, member, laptop):
    member_memory = episode_store(caller=member.caller, content="from the desk", butler="general")
    laptop_memory = episode_store(caller=laptop.caller, content="from the laptop", butler="general")
    # What background work and commands act as: no token.
    system = episode_store(caller=system_caller(member.caller.tenant_id), content="no token here", butler="general")
    ApiToken.objects.filter(pk=laptop.caller.token_id).update(name="laptop")
    root = User.objects.create_superuser(username="root", password="pw", email="root@example.com")
    client.force_login(root)
    url = reverse("admin:memory_memoryevent_changelist")

    page = client.get(url).content.decode()
    assert f"{laptop.token[:10]}… laptop" in page and f"{member.token[:10]}…" in page
    assert laptop.token not in page and member.token not in page  # the prefix, never the secret
    assert f"?token={laptop.caller.token_id}" in page

    only_laptop = client.get(url, {"token": str(laptop.caller.token_id)}).content.decode()
    assert str(laptop_memory.id)[:8] in only_laptop and str(member_memory.id)[:8] not in only_laptop
    none = client.get(url, {"token": "none"}).content.decode()
    assert str(system.id)[:8] in none and str(laptop_memory.id)[:8] not in none

    ApiToken.objects.filter(pk=laptop.caller.token_id).delete()
    deleted = client.get(url, {"token": str(laptop.caller.token_id)}).content.decode()
    assert str(laptop_memory.id)[:8] in deleted and str(member_memory.id)[:8] not in deleted
    assert f"deleted token {str(laptop.caller.token_id)[:8]}" in deleted
    assert client.get(url, {"token": "not-a-token"}).status_code == 200


def test_another_tenants_admin_neither_sees_nor_names_a_token(client, member, laptop):
    from tests.admin.conftest import make_staff

    stored = episode_store(caller=laptop.caller, content="from the laptop", butler="general")
    ApiToken.objects.filter(pk=laptop.caller.token_id).update(name="laptop")
    bob = make_staff("bob", "tenant-b", "admin")
    client.force_login(bob.user)
    page = client.get(reverse("admin:memory_memoryevent_changelist"), {"token": str(laptop.caller.token_id)})
    text = page.content.decode()
    assert page.status_code == 200
    assert str(stored.id)[:8] not in text and laptop.token[:10] not in text and "laptop" not in text.lower()
