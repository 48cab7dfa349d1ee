"""The LangGraph store endpoint (``POST /api/langmem/store/``) runs a batch that
writes all or nothing, with or without an Idempotency-Key: a batch refused for
any of its operations answers the coded error and leaves every item, version
and audit event as it was; a valid batch writes every item. Through the real
HTTP app (the ASGI router, Django, PostgreSQL)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from memory.models import Memory, MemoryEvent
from policy.services.policies import policy_apply
from tests.harness.surfaces.asgi import asgi_transport
from tests.mcp_server.test_coded_errors import coded

pytestmark = pytest.mark.django_db(transaction=True)

STORE = "/api/langmem/store/"
NS = ["memories", "u-1"]


def put(key: str, content: str | None) -> dict[str, Any]:
    return {"op": "put", "namespace": NS, "key": key, "value": None if content is None else {"content": content}}


# Invalid puts, each refused for another reason: the first two by the endpoint's
# own checks of the operation, the others only by the core, when it stores.
INVALID: dict[str, dict[str, Any]] = {
    "reserved value key": {"op": "put", "namespace": NS, "key": "bad", "value": {"content": "x", "_memproj_value": 1}},
    "value not an object": {"op": "put", "namespace": NS, "key": "bad", "value": ["not", "an", "object"]},
    "blank content": put("bad", "   "),
    "lone surrogate": put("bad", "text \ud800 here"),
    "unknown op": {"op": "upsert", "namespace": NS, "key": "bad", "value": {"content": "x"}},
}


async def send(member: Any, ops: list[dict[str, Any]], headers: dict[str, str] | None = None) -> httpx.Response:
    """A store request through the service's ASGI router (rate limiting aside)."""
    from memproj.asgi import Router

    # json.dumps sends a lone surrogate as its JSON escape, as a JSON body may carry it.
    body = json.dumps({"ops": ops}).encode()
    sent = {"Authorization": f"Bearer {member.token}", "Content-Type": "application/json", **(headers or {})}
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return await client.post(STORE, content=body, headers=sent)


async def items(member: Any) -> dict[str, str]:
    """Every item the namespace lists: key -> content."""
    answer = await send(member, [{"op": "search", "namespace_prefix": NS, "limit": 100}])
    assert answer.status_code == 200, answer.text[:300]
    return {found["key"]: found["value"]["content"] for found in answer.json()["results"][0]}


async def get(member: Any, key: str) -> Any:
    answer = await send(member, [{"op": "get", "namespace": NS, "key": key}])
    assert answer.status_code == 200, answer.text[:300]
    return answer.json()["results"][0]


async def footprint(member: Any) -> tuple[int, int]:
    """The tenant's memory rows (every version) and audit events."""
    tenant = member.caller.tenant_id
    return (
        await Memory.objects.filter(tenant_id=tenant).acount(),
        await MemoryEvent.objects.filter(tenant_id=tenant).acount(),
    )


async def refused(member: Any, ops: list[dict[str, Any]], headers: dict[str, str] | None = None) -> str:
    """The code of the batch's refusal (a 4xx with a message)."""
    answer = await send(member, ops, headers)
    assert answer.status_code in (400, 403), (answer.status_code, answer.text[:300])
    assert answer.json()["error"]["message"]
    return coded(answer)


@pytest.mark.parametrize("invalid", list(INVALID), ids=list(INVALID))
@pytest.mark.parametrize("where", ["last", "first", "middle"])
async def test_a_batch_with_an_invalid_put_writes_none_of_its_items(member, invalid, where):
    before = await footprint(member)
    ops = {
        "last": [put("a", "User prefers dark mode"), INVALID[invalid]],
        "first": [INVALID[invalid], put("a", "User prefers dark mode")],
        "middle": [put("a", "User prefers dark mode"), INVALID[invalid], put("b", "User lives in Lisbon")],
    }[where]
    assert await refused(member, ops) == "INVALID_ARGUMENT"
    assert await footprint(member) == before
    assert await get(member, "a") is None
    assert await get(member, "b") is None
    assert await items(member) == {}


async def test_a_refused_batch_keeps_what_it_would_have_deleted_or_replaced(member):
    stored = await send(member, [put("kept", "User is vegetarian"), put("old", "User drives a Fiat")])
    assert stored.status_code == 200, stored.text[:300]
    for ops in (
        [put("kept", None), INVALID["reserved value key"]],
        [put("kept", None), INVALID["blank content"]],
        [put("old", "User drives a Tesla"), put("new", "User has a cat"), INVALID["lone surrogate"]],
    ):
        before = await footprint(member)
        assert await refused(member, ops) == "INVALID_ARGUMENT"
        assert await footprint(member) == before
        assert await items(member) == {"kept": "User is vegetarian", "old": "User drives a Fiat"}


async def test_a_batch_over_the_quota_stores_none_of_its_items(owner, member):
    await sync_to_async(policy_apply)(caller=owner.caller, yaml="quotas:\n  max_memories: 2\n")
    stored = await send(member, [put("one", "User likes tea")])
    assert stored.status_code == 200, stored.text[:300]
    before = await footprint(member)
    # Room for one more: the second put is over the quota, and the first is not kept either.
    assert await refused(member, [put("two", "User likes jazz"), put("three", "User likes chess")]) == "QUOTA_EXCEEDED"
    assert await footprint(member) == before
    assert await items(member) == {"one": "User likes tea"}


async def test_a_refused_batch_with_an_idempotency_key_writes_nothing_and_keeps_no_answer(member):
    ops = [put("a", "User prefers dark mode"), INVALID["blank content"]]
    assert await refused(member, ops, {"Idempotency-Key": "batch-1"}) == "INVALID_ARGUMENT"
    assert await items(member) == {}
    fixed = [put("a", "User prefers dark mode"), put("b", "User lives in Lisbon")]
    again = await send(member, fixed, {"Idempotency-Key": "batch-2"})
    assert again.status_code == 200 and again.json() == {"results": [None, None]}
    assert await items(member) == {"a": "User prefers dark mode", "b": "User lives in Lisbon"}


async def test_a_valid_batch_writes_every_item_and_answers_each_op_in_order(member):
    ops = [
        put("a", "User prefers dark mode"),
        put("b", "User lives in Lisbon"),
        put("c", "User speaks Portuguese"),
        put("c", None),
        {"op": "get", "namespace": NS, "key": "a"},
        {"op": "list_namespaces", "prefix": ["memories"]},
    ]
    answer = await send(member, ops)
    assert answer.status_code == 200, answer.text[:300]
    results = answer.json()["results"]
    assert results[:4] == [None, None, None, None]
    assert results[4]["key"] == "a" and results[4]["value"] == {"content": "User prefers dark mode"}
    assert results[5] == [NS]
    assert await items(member) == {"a": "User prefers dark mode", "b": "User lives in Lisbon"}


async def test_a_read_only_batch_with_an_invalid_op_answers_the_coded_error(member):
    stored = await send(member, [put("a", "User prefers dark mode")])
    assert stored.status_code == 200, stored.text[:300]
    ops = [{"op": "get", "namespace": NS, "key": "a"}, {"op": "search", "namespace_prefix": NS, "limit": "ten"}]
    assert await refused(member, ops) == "INVALID_ARGUMENT"
