"""Per-tenant quotas from the policy (``quotas``): the most memories a tenant
holds and the most it ingests per call and per 24 hours. Reaching one is a
coded QUOTA_EXCEEDED on every surface, and the refused write stores nothing."""

from __future__ import annotations

import json

import httpx
import pytest
from asgiref.sync import sync_to_async

from memory.models import Memory, MemoryEvent
from memory.services.collections import book_chunks
from policy.document import DEFAULT_POLICY, QUOTA_BOUNDS, parse_yaml
from policy.errors import PolicyInvalid
from policy.services.policies import policy_apply
from policy.services.tokens import token_authenticate
from tests.conftest import Identity
from tests.mcp_server.test_transports import http_server  # noqa: F401 - the live-server fixture

pytestmark = pytest.mark.django_db(transaction=True)


def set_quotas(owner: Identity, **quotas: int) -> None:
    lines = "".join(f"  {name}: {value}\n" for name, value in quotas.items())
    policy_apply(caller=owner.caller, yaml=f"quotas:\n{lines}")


def fresh(identity: Identity) -> Identity:
    """The identity with a newly resolved caller (a caller keeps the policy it first read)."""
    caller = token_authenticate(identity.token)
    assert caller is not None
    return Identity(identity.token, caller)


def test_the_policy_sets_quotas_within_bounds():
    doc = parse_yaml("quotas: {max_memories: 500, ingest_bytes_per_day: 1048576}\n")
    assert (doc.quotas.max_memories, doc.quotas.ingest_bytes_per_day) == (500, 1048576)
    assert doc.quotas.ingest_bytes_per_call == DEFAULT_POLICY.quotas.ingest_bytes_per_call
    assert doc.to_dict()["quotas"]["max_memories"] == 500
    with pytest.raises(PolicyInvalid) as info:
        parse_yaml(
            f"quotas: {{max_memories: 0, ingest_bytes_per_call: {QUOTA_BOUNDS['ingest_bytes_per_call'] + 1}, x: 1}}\n"
        )
    assert [path for path, _ in info.value.problems] == [
        "quotas.x",
        "quotas.max_memories",
        "quotas.ingest_bytes_per_call",
    ]


async def test_memento_store_memory_stops_at_max_memories(owner, member, mcp_client_for):
    await sync_to_async(set_quotas)(owner, max_memories=3)
    writer = await sync_to_async(fresh)(member)
    tenant = writer.caller.tenant_id
    async with mcp_client_for(writer, "memento") as client:
        for i in range(3):
            stored = await client.call_tool("store_memory", {"content": f"Fact number {i} about the build host"})
            assert not stored.is_error, stored.content
        refused = await client.call_tool("store_memory", {"content": "One fact too many"})
    assert refused.is_error
    error = json.loads(refused.content[0].text)["error"]
    assert error["code"] == "QUOTA_EXCEEDED" and "quotas.max_memories" in error["message"]
    assert refused.structured_content is None  # the text above is the whole error
    assert await Memory.objects.filter(tenant_id=tenant).acount() == 3
    assert not await Memory.objects.filter(tenant_id=tenant, content="One fact too many").aexists()
    assert await MemoryEvent.objects.filter(tenant_id=tenant, event_type="stored").acount() == 3


def test_api_ingest_stops_at_the_tenant_quotas(http_server, owner, member):  # noqa: F811
    set_quotas(owner, max_memories=4, ingest_bytes_per_day=6000)
    tenant = member.caller.tenant_id
    url = f"{http_server}/api/ingest"
    headers = {"Authorization": f"Bearer {member.token}"}

    first = httpx.post(url, json={"title": "note", "content": "The build host is ci-7."}, headers=headers, timeout=60)
    assert first.status_code == 202, first.text

    # Four chunks: with the one stored, five memories, past max_memories (4).
    four = "\n\n".join(f"Section {i}. " + "runbook step " * 70 for i in range(4))
    assert len(book_chunks(four)) == 4 and len(four.encode()) < 5000
    too_many = httpx.post(url, json={"title": "runbook", "content": four}, headers=headers, timeout=60)
    assert too_many.status_code == 403, too_many.text
    body = too_many.json()
    assert body["code"] == "QUOTA_EXCEEDED" and "quotas.max_memories" in body["error"]

    # One chunk, but past the day's ingest volume (6000 bytes).
    big = "word " * 1200
    over_volume = httpx.post(
        f"{url}?title=big", content=big.encode(), headers={**headers, "Content-Type": "text/plain"}, timeout=60
    )
    assert over_volume.status_code == 403, over_volume.text
    assert over_volume.json()["code"] == "QUOTA_EXCEEDED" and "ingest_bytes_per_day" in over_volume.json()["error"]

    # The refused ingests stored nothing: no chunk, no audit event.
    assert Memory.objects.filter(tenant_id=tenant).count() == 1
    assert MemoryEvent.objects.filter(tenant_id=tenant, event_type="book_ingested").count() == 1
