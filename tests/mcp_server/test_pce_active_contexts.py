"""pce active contexts: a read-only token stores none (its activate is refused
with the spec's UNAUTHORIZED and writes no row anywhere), and an active context
expires after MEMPROJ_ACTIVE_CONTEXT_TTL_SECONDS, is never served afterwards
(its cursor answers GONE, 410, before and after the beat sweep deleted it) and
is deleted by the beat sweep in bounded batches."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import datetime, timedelta

import httpx
import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from memory.models import ActiveContext
from memory.services import sweeps
from tests.conftest import make_identity
from tests.mcp_server import test_transports
from workers import tasks
from workers.schedule import SCHEDULE

pytestmark = pytest.mark.django_db(transaction=True)
http_server = test_transports.http_server  # the live uvicorn fixture

AT = "2025-06-01T12:00:00Z"
CLAIMS = [
    "Cancel API endpoints are named POST /subscriptions/{id}/cancel",
    "Cancel requests are processed asynchronously by a worker queue",
    "The cancel endpoint requires an idempotency key header",
]


@pytest.fixture
def reader(db):
    """A token of the member's tenant with the 'read' scope only."""
    return make_identity("tenant-a", "reader", scopes=["read"])


@pytest.fixture
def pce(mcp_client_for):
    return lambda identity: mcp_client_for(identity, "pce")


def _row_counts() -> dict[str, int]:
    """Rows of every table of the database."""
    with connection.cursor() as cursor:
        counts = {}
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f'SELECT count(*) FROM "{table}"')
            counts[table] = cursor.fetchone()[0]
    return counts


row_counts = sync_to_async(_row_counts)
# The beat task, run eagerly; how many contexts it deleted.
sweep_task = sync_to_async(lambda: tasks.active_contexts_expire_task.apply().get())


async def _ok(client, name: str, **arguments) -> dict:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, f"{name}: {result.content}"
    return result.structured_content["data"]


async def _error(client, name: str, **arguments) -> dict:
    result = await client.call_tool(name, arguments)
    assert result.is_error, f"{name} unexpectedly succeeded: {result.structured_content}"
    body = json.loads(result.content[0].text)
    assert set(body) == {"error", "request_id", "trace_id", "policy_version"}
    return body["error"]


async def _store_claims(client) -> None:
    for text in CLAIMS:
        await _ok(client, "pce.memory.upsert", text=text, scope="project", provenance={"at": AT})


async def test_a_read_only_token_activates_nothing_and_writes_no_row(member, reader, pce):
    async with pce(member) as client:
        await _store_claims(client)
    before = await row_counts()
    async with pce(reader) as client:
        refused = [
            await _error(client, name, q="cancel API naming", scope=["project"], top_k=2)
            for name in ("pce.memory.activate", "pce_memory_activate")
        ]
        # The same ranking is a read the token may make.
        found = await _ok(client, "pce.memory.search", query="cancel API naming", scope=["project"], top_k=2)
    after = await row_counts()
    for error in refused:
        assert error["code"] == "UNAUTHORIZED", error
        assert "read-only" in error["message"] and "pce.memory.search" in error["message"]
    # The rows are the audit event of the search (pce audits every call that
    # answers) and one refused call per refused activate (the log of refusals).
    changed = {table: n for table, n in after.items() if n != before[table]}
    assert changed == {
        "memory_memoryevent": before["memory_memoryevent"] + 1,
        "memory_refusedcall": before["memory_refusedcall"] + 2,
    }
    assert await ActiveContext.objects.acount() == 0
    assert len(found["items"]) == 2


async def test_a_read_only_token_is_refused_over_plain_http_and_writes_no_row(http_server, member, reader, pce):
    async with pce(member) as client:
        await _store_claims(client)
    before = await row_counts()
    async with httpx.AsyncClient(base_url=http_server, timeout=300) as http:
        answer = await http.post(
            "/api/pce/pce.memory.activate",
            json={"q": "cancel API naming"},
            headers={"Authorization": f"Bearer {reader.token}"},
        )
    assert (answer.status_code, answer.json()["error"]["code"]) == (401, "UNAUTHORIZED")
    # Only the refusal's own row (the log of refused calls).
    assert await row_counts() == {**before, "memory_refusedcall": before["memory_refusedcall"] + 1}


async def test_an_expired_context_is_gone_before_and_after_the_sweep_deletes_it(member, pce, settings):
    settings.MEMPROJ = {**settings.MEMPROJ, "ACTIVE_CONTEXT_TTL_SECONDS": 600}
    async with pce(member) as client:
        await _store_claims(client)
        # Bracketed by the clock before and after the call, not by a margin
        # from now: a slow call on a loaded machine must not look like a short TTL.
        before = timezone.now()
        first = await _ok(client, "pce.memory.activate", q="cancel API", top_k=1)
        after = timezone.now()
        expires_at = datetime.fromisoformat(first["expires_at"])
        assert before + timedelta(seconds=600) <= expires_at <= after + timedelta(seconds=600)
        # Within its lifetime the cursor pages, and the sweep leaves it alone.
        assert (await _ok(client, "pce.memory.activate", q="cancel API", top_k=1, cursor=first["next_cursor"]))[
            "claims"
        ]
        assert await sweep_task() == 0
        with time_machine.travel(expires_at + timedelta(seconds=1)):
            later = await _ok(client, "pce.memory.activate", q="cancel API", top_k=1)  # a live one beside it
            unswept = await _error(client, "pce.memory.activate", q="cancel API", cursor=first["next_cursor"])
            assert await sweep_task() == 1
            swept = await _error(client, "pce.memory.activate", q="cancel API", cursor=first["next_cursor"])
            still = await _ok(client, "pce.memory.activate", q="cancel API", top_k=1, cursor=later["next_cursor"])
    for error in (unswept, swept):
        assert error["code"] == "GONE" and first["active_context_id"] in error["message"], error
    assert [f"ac_{pk.hex}" async for pk in ActiveContext.objects.values_list("pk", flat=True)] == [
        later["active_context_id"]
    ]
    assert still["active_context_id"] == later["active_context_id"] and still["claims"]


def test_the_sweep_deletes_expired_contexts_in_bounded_batches_and_is_on_the_beat(settings):
    settings.MEMPROJ_PIPELINE = {**settings.MEMPROJ_PIPELINE, "SWEEP_BATCH": 2}
    tenants = [make_identity(f"tenant-{i}", "member").caller.tenant_id for i in range(2)]
    now = timezone.now()
    for n in range(5):
        for tenant_id in tenants:
            ActiveContext.objects.create(tenant_id=tenant_id, query=f"q{n}", expires_at=now - timedelta(minutes=n + 1))
    live = ActiveContext.objects.create(tenant_id=tenants[0], query="live", expires_at=now + timedelta(minutes=5))
    first = sweeps.active_contexts_expire(now=now)
    assert (first.processed, first.more) == (2, True)
    # The task re-enqueues itself (eagerly here) until the backlog is gone.
    assert tasks.active_contexts_expire_task.apply().get() == 2
    assert list(ActiveContext.objects.values_list("pk", flat=True)) == [live.pk]
    assert sweeps.active_contexts_expire(now=now).processed == 0
    assert "workers.tasks.active_contexts_expire_task" in {entry.task for entry in SCHEDULE}


async def test_another_principal_of_the_tenant_cannot_page_an_active_context(member, pce):
    """An active context is the prompt context of the principal that activated it:
    another principal's token, of the same tenant, gets what a cursor of no
    context gets, and none of its claims."""
    colleague = await sync_to_async(make_identity)("tenant-a", "colleague")
    async with pce(member) as client:
        await _store_claims(client)
        first = await _ok(client, "pce.memory.activate", q="cancel API", top_k=1)
    kind, handle, offset = _decoded(first["next_cursor"]).split(":")
    context_id, expiry = handle.split(".")
    unknown = _encoded(f"{kind}:{uuid.uuid4().hex}.{expiry}:{offset}")
    async with pce(colleague) as client:
        taken = await _error(client, "pce.memory.activate", q="cancel API", top_k=1, cursor=first["next_cursor"])
        nothing = await _error(client, "pce.memory.activate", q="cancel API", top_k=1, cursor=unknown)
    assert taken == nothing
    assert (taken["code"], taken["message"]) == (
        "VALIDATION_ERROR",
        "cursor is not one this tool returned; start again without a cursor.",
    )
    # Its own principal still pages it.
    async with pce(member) as client:
        second = await _ok(client, "pce.memory.activate", q="cancel API", top_k=1, cursor=first["next_cursor"])
    assert second["active_context_id"] == f"ac_{context_id}" and second["claims"]


def _encoded(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decoded(cursor: str) -> str:
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
