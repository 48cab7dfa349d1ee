"""pce-memory's spec (§0): every call is recorded in an append-only log (time,
call, boundary decision, provenance). A success is an audit event (TOOL_CALL);
a refused call changed nothing, so it is no audit event: it is one row of the
log of refused calls (memory.models.RefusedCall), over MCP and over the plain
HTTP route alike, with who was refused, the code and a short message, and the
names of the arguments sent, never their values. Writing that row never
changes the answer, and runs after the call's transaction (a refusal after a
rolled-back write is still logged)."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db import DatabaseError

from memory.models import IdempotencyKey, Memory, MemoryEvent, RefusedCall
from memory.services import refusals
from tests.conftest import make_identity
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

AT = "2025-06-01T12:00:00Z"
UNKNOWN_CLAIM = "clm_" + "1" * 32


@pytest.fixture
def pce(mcp_client_for):
    return lambda identity: mcp_client_for(identity, "pce")


@sync_to_async
def counts() -> tuple[int, int, int]:
    return Memory.objects.count(), MemoryEvent.objects.count(), IdempotencyKey.objects.count()


@sync_to_async
def refused() -> list[RefusedCall]:
    return list(RefusedCall.objects.order_by("id"))


async def post(path: str, body: Any, *, token: str | None, headers: dict[str, str] | None = None) -> httpx.Response:
    from memproj.asgi import Router

    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return await client.post(path, json=body, headers=sent)


def assert_caller(row: RefusedCall, identity: Any) -> None:
    assert (row.tenant_id, row.principal_id, row.token_id) == (
        identity.caller.tenant_id,
        identity.caller.principal_id,
        identity.caller.token_id,
    )
    assert row.token_id is not None


async def test_a_refused_mcp_call_leaves_one_row_and_changes_nothing_else(member, pce):
    before = await counts()
    async with pce(member) as client:
        result = await client.call_tool("pce.memory.upsert", {"text": "no provenance", "kind": "fact"})
    assert result.is_error
    answer = json.loads(result.content[0].text)
    assert answer["error"]["code"] == "VALIDATION_ERROR"
    assert await counts() == before
    [row] = await refused()
    assert_caller(row, member)
    assert (row.toolset, row.tool, row.surface) == ("pce", "pce.memory.upsert", "mcp")
    assert (row.code, row.core_code) == ("VALIDATION_ERROR", "INVALID_ARGUMENT")
    assert row.message == answer["error"]["message"] and "provenance" in row.message
    # The id the client was answered, so a client's report finds its row.
    assert row.request_id == answer["request_id"]
    assert sorted(row.argument_names) == ["kind", "text"]


async def test_a_refused_rest_call_leaves_one_row_and_changes_nothing_else(member):
    before = await counts()
    response = await post(
        "/api/pce/pce_memory_feedback", {"claim_id": UNKNOWN_CLAIM, "signal": "helpful"}, token=member.token
    )
    assert response.status_code == 404 and response.json()["error"]["code"] == "UNKNOWN_CLAIM"
    assert await counts() == before
    [row] = await refused()
    assert_caller(row, member)
    assert (row.tool, row.surface, row.code, row.core_code) == (
        "pce_memory_feedback",
        "http",
        "UNKNOWN_CLAIM",
        "UNKNOWN_CLAIM",
    )
    assert UNKNOWN_CLAIM in row.message
    assert row.request_id == response.json()["request_id"]
    assert sorted(row.argument_names) == ["claim_id", "signal"]


async def test_a_refusal_after_a_rolled_back_write_is_still_logged(member):
    """A write with an Idempotency-Key claims its key in the write's transaction;
    the tool's refusal rolls that back. The refusal's row is written after, on
    its own: logged inside that transaction, it would have gone with it."""
    before = await counts()
    response = await post(
        "/api/pce/pce.memory.feedback",
        {"claim_id": UNKNOWN_CLAIM, "signal": "harmful"},
        token=member.token,
        headers={"Idempotency-Key": f"k-{uuid.uuid4()}"},
    )
    assert response.status_code == 404 and response.json()["error"]["code"] == "UNKNOWN_CLAIM"
    assert await counts() == before  # the key's claim was rolled back
    [row] = await refused()
    assert (row.tool, row.code, row.surface) == ("pce.memory.feedback", "UNKNOWN_CLAIM", "http")


async def test_a_hostile_argument_is_not_stored(member, pce):
    secret = "S3CRET-VALUE-"
    arguments: dict[str, Any] = {"\x00nul key": 1, "q": secret * 80_000}  # over 1 MB
    arguments.update({f"key-{i:04d}-" + "x" * 200: secret for i in range(500)})
    before = await counts()
    async with pce(member) as client:
        result = await client.call_tool("pce.memory.activate", arguments)
    assert result.is_error and json.loads(result.content[0].text)["error"]["code"] == "VALIDATION_ERROR"
    assert await counts() == before
    [row] = await refused()
    assert len(row.argument_names) == refusals.ARGUMENT_NAMES_MAX
    assert all(len(name) <= refusals.ARGUMENT_NAME_CHARS for name in row.argument_names)
    assert row.argument_names[0] == "\ufffdnul key"
    assert len(row.message) <= refusals.MESSAGE_CHARS
    stored = json.dumps([getattr(row, f.attname) for f in RefusedCall._meta.concrete_fields], default=str)
    assert secret not in stored and len(stored) < 5000


async def test_a_failed_log_write_answers_the_same_refusal(member, pce, monkeypatch, caplog):
    async with pce(member) as client:
        logged = await client.call_tool("pce.memory.search", {"query": "x", "top_k": 0})
    assert len(await refused()) == 1  # the control: written when it can be

    def down(**_: Any) -> None:
        raise DatabaseError("the database is down")

    monkeypatch.setattr(RefusedCall.objects, "create", down)
    monkeypatch.setattr(refusals, "_last_failure_log", [0.0])
    caplog.set_level(logging.WARNING, logger="memory.services.refusals")
    async with pce(member) as client:
        first = await client.call_tool("pce.memory.search", {"query": "x", "top_k": 0})
        second = await client.call_tool("pce.memory.search", {"query": "x", "top_k": 0})

    def shape(result: Any) -> tuple[Any, ...]:
        body = json.loads(result.content[0].text)
        return result.is_error, body["error"], body["policy_version"], result.meta

    assert shape(first) == shape(second) == shape(logged)
    assert json.loads(first.content[0].text)["error"]["code"] == "VALIDATION_ERROR"
    assert len(await refused()) == 1
    # Logged once a minute at most, not once per refusal.
    assert [r.getMessage() for r in caplog.records if r.name == "memory.services.refusals"] == [
        "could not log a refused call of pce.pce.memory.search; answered it as usual"
    ]


async def test_an_unauthenticated_request_logs_nothing(member):
    no_token = await post("/api/pce/pce.memory.search", {"query": "x"}, token=None)
    bad_token = await post("/api/pce/pce.memory.nope", {"query": "x"}, token="mp_not-a-token")
    assert (no_token.status_code, bad_token.status_code) == (401, 401)
    assert await refused() == []


async def test_a_successful_call_logs_no_refusal(member, pce):
    async with pce(member) as client:
        result = await client.call_tool("pce.memory.boundary.validate", {"payload": "hello"})
    assert not result.is_error
    assert await refused() == []
    tool_calls = await sync_to_async(MemoryEvent.objects.filter(event_type="tool_call").count)()
    assert tool_calls == 1


async def test_refusals_before_the_tool_runs_are_logged_too(member, outsider, pce):
    """An unknown tool, a tenant selector, a token not allowed on the toolset:
    each is logged in the caller's own tenant, never in the one it named."""
    async with pce(member) as client:
        unknown = await client.call_tool("pce.memory.nope" + "x" * 300, {})
        selected = await client.call_tool("pce.memory.search", {"query": "x", "tenant": "tenant-b"})
    restricted = await sync_to_async(make_identity)("tenant-a", "memento-only", scopes=["read", "toolset:memento"])
    refused_toolset = await post("/api/pce/pce.memory.search", {"query": "x"}, token=restricted.token)
    assert unknown.is_error and selected.is_error and refused_toolset.status_code == 401
    rows = await refused()
    assert [(r.tool[:15], r.code, r.surface) for r in rows] == [
        ("pce.memory.nope", "VALIDATION_ERROR", "mcp"),
        ("pce.memory.sear", "UNAUTHORIZED", "mcp"),
        ("pce.memory.sear", "UNAUTHORIZED", "http"),
    ]
    assert len(rows[0].tool) == refusals.TOOL_CHARS
    assert {r.tenant_id for r in rows} == {member.caller.tenant_id} != {outsider.caller.tenant_id}
    assert rows[2].token_id == restricted.caller.token_id


async def test_other_dialects_do_not_log_refusals(member, mcp_client_for):
    async with mcp_client_for(member, "memory") as client:
        result = await client.call_tool("memory_get", {"type": "fact", "id": str(uuid.uuid4())})
    assert result.is_error
    assert await refused() == []


def test_the_admin_shows_a_tenant_its_own_refusals_read_only(client):
    from django.urls import reverse

    from tests.admin.conftest import make_staff

    alice, bob = make_staff("alice", "tenant-a", "admin"), make_staff("bob", "tenant-b", "admin")
    for staff in (alice, bob):
        assert refusals.refused_call_record(
            caller=staff.caller,
            toolset="pce",
            tool="pce.memory.search",
            code="VALIDATION_ERROR",
            message=f"refused-{staff.user.username}",
            request_id=f"req-{staff.user.username}",
            argument_names=["query"],
        )
    mine = RefusedCall.objects.get(tenant_id=alice.caller.tenant_id)
    theirs = RefusedCall.objects.get(tenant_id=bob.caller.tenant_id)
    client.force_login(alice.user)
    listing = reverse("admin:memory_refusedcall_changelist")
    page = client.get(listing).content.decode()
    assert "refused-alice" in page and "tenant-a" in page and "refused-bob" not in page
    assert "refused-alice" in client.get(listing, {"q": "req-alice"}).content.decode()
    assert "refused-bob" not in client.get(listing, {"q": "req-bob"}).content.decode()
    assert client.get(reverse("admin:memory_refusedcall_change", args=[mine.pk])).status_code == 200
    assert client.get(reverse("admin:memory_refusedcall_change", args=[theirs.pk])).status_code == 404
    assert client.post(reverse("admin:memory_refusedcall_change", args=[mine.pk]), {"code": "X"}).status_code == 403
    assert client.post(reverse("admin:memory_refusedcall_delete", args=[mine.pk])).status_code == 403
    assert client.get(reverse("admin:memory_refusedcall_add")).status_code == 403
    assert RefusedCall.objects.get(pk=mine.pk).code == "VALIDATION_ERROR"


def test_a_principals_purge_takes_its_refusals_with_it():
    """A principal's purge leaves no refused call naming them; another
    principal's stay."""
    from memory.services.purge import principal_purge
    from memproj.dbroles import as_owner

    gone, kept = make_identity("tenant-a", "gone"), make_identity("tenant-a", "kept")
    for identity in (gone, kept):
        assert refusals.refused_call_record(caller=identity.caller, toolset="pce", tool="t", code="UNAUTHORIZED")
    assert gone.caller.principal_id is not None
    with as_owner():
        principal_purge(principal_id=gone.caller.principal_id)
    assert list(RefusedCall.objects.values_list("principal_id", flat=True)) == [kept.caller.principal_id]


def test_a_tenant_purge_takes_its_refusals_with_it_and_the_service_role_may_not_edit_them():
    """The log is append-only for the service's role, as the audit log is
    (memproj/dbroles.py); a tenant's purge, run as the owner, deletes its rows
    and no other tenant's."""
    from django.db import connection, transaction

    from memory.services.purge import tenant_purge
    from memproj.dbroles import as_owner, separate_roles

    gone, kept = make_identity("tenant-a", "gone"), make_identity("tenant-b", "kept")
    for identity in (gone, kept):
        assert refusals.refused_call_record(caller=identity.caller, toolset="pce", tool="t", code="UNAUTHORIZED")
    if separate_roles():
        for statement in ("UPDATE memory_refusedcall SET code = 'X'", "DELETE FROM memory_refusedcall"):
            with (
                pytest.raises(DatabaseError, match="permission denied"),
                transaction.atomic(),
                connection.cursor() as cursor,
            ):
                cursor.execute(statement)
    with as_owner():
        tenant_purge(tenant_id=gone.caller.tenant_id)
    assert list(RefusedCall.objects.values_list("tenant_id", flat=True)) == [kept.caller.tenant_id]
