"""For every memory tool: tenant B's token never reads or changes tenant A's memories."""

from __future__ import annotations

import json

import pytest

from mcp_server.registry import TOOLSETS
from memory.models import Memory, MemoryEvent
from tests.conftest import call, call_error

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "Tenant A's user is allergic to shellfish"


async def _seed_tenant_a(client):
    fact = await call(client, "memory_store_fact", subject="user", predicate="allergy", content=SECRET, scope="health")
    rule = await call(client, "memory_store_rule", content="Never suggest shellfish to tenant A's user", scope="health")
    episode = await call(client, "memory_store_episode", content="Tenant A's user mentioned shellfish", butler="health")
    return {"fact": fact["id"], "rule": rule["id"], "episode": episode["id"]}


async def _snapshot(tenant_slug: str) -> list[tuple]:
    return [
        row
        async for row in Memory.objects.filter(tenant__slug=tenant_slug)
        .order_by("id")
        .values_list(
            "id",
            "validity",
            "reference_count",
            "success_count",
            "harmful_count",
            "applied_count",
            "last_confirmed_at",
            "maturity",
            "content",
        )
    ]


async def test_tenant_b_cannot_read_or_change_tenant_a(member, outsider, mcp_client_for):
    async with mcp_client_for(member) as client_a:
        ids = await _seed_tenant_a(client_a)
    before = await _snapshot("tenant-a")
    events_before = await MemoryEvent.objects.filter(tenant__slug="tenant-a").acount()

    async with mcp_client_for(outsider) as b:
        # Reads: nothing of A's comes back, whatever the query, mode or scope.
        for mode in ("hybrid", "semantic", "keyword"):
            found = await call(b, "memory_search", query="shellfish allergy", mode=mode)
            assert found["results"] == []
        assert (await call(b, "memory_search", query="shellfish", scope="health"))["results"] == []
        assert (await call(b, "memory_recall", topic="shellfish allergy", scope="health"))["results"] == []
        context = await call(b, "memory_context", trigger_prompt="shellfish allergy", butler="health")
        assert "shellfish" not in context["text"]
        stats = await call(b, "memory_stats")
        assert stats["facts"]["total"] == stats["rules"]["total"] == stats["episodes"]["total"] == 0
        # By id: A's ids do not exist for B.
        for kind, pk in ids.items():
            assert "NOT_FOUND" in await call_error(b, "memory_get", type=kind, id=pk)
            assert "NOT_FOUND" in await call_error(b, "memory_forget", type=kind, id=pk)
        assert "NOT_FOUND" in await call_error(b, "memory_confirm", type="fact", id=ids["fact"])
        assert "NOT_FOUND" in await call_error(b, "memory_confirm", type="rule", id=ids["rule"])
        assert "NOT_FOUND" in await call_error(b, "memory_mark_helpful", rule_id=ids["rule"])
        assert "NOT_FOUND" in await call_error(b, "memory_mark_harmful", rule_id=ids["rule"])
        # Writes: B's identical subject+predicate does not supersede A's fact.
        b_fact = await call(b, "memory_store_fact", subject="user", predicate="allergy", content="B: none")
        assert b_fact["superseded_ids"] == []
        await call(b, "memory_store_rule", content="B rule", scope="health")
        await call(b, "memory_store_episode", content="B episode about shellfish", butler="health")

    assert await _snapshot("tenant-a") == before
    assert await MemoryEvent.objects.filter(tenant__slug="tenant-a").acount() == events_before
    async with mcp_client_for(member) as client_a:
        found = await call(client_a, "memory_search", query="shellfish")
        stats = await call(client_a, "memory_stats")
    assert {r["id"] for r in found["results"]} == set(ids.values())
    assert stats["facts"]["total"] == 1 and stats["episodes"]["total"] == 1 and stats["rules"]["total"] == 1


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
async def test_every_tool_of_every_dialect_keeps_tenant_a_out_of_reach(toolset, member, outsider, mcp_client_for):
    """Tenant B calls every tool of the dialect with tenant A's ids in every id-like
    argument and A's words in every text argument: nothing of A's comes back and
    nothing of A's changes. Runs for each registered dialect."""
    from tests.mcp_server.test_dialect_contract import _minimal_arguments

    async with mcp_client_for(member) as client_a:
        ids = await _seed_tenant_a(client_a)
    before = await _snapshot("tenant-a")
    events_before = await MemoryEvent.objects.filter(tenant__slug="tenant-a").acount()

    async with mcp_client_for(outsider, toolset) as b:
        tools = {tool.name: tool.input_schema for tool in (await b.list_tools()).tools}
        for name, schema in tools.items():
            for memory_id in ids.values():
                arguments = _minimal_arguments(schema)
                for prop, spec in schema.get("properties", {}).items():
                    if prop not in arguments and spec.get("type") != "string":
                        continue
                    if prop.endswith("id") or prop.endswith("_id") or prop == "id":
                        arguments[prop] = memory_id
                    elif spec.get("type") == "string" and "enum" not in spec:
                        arguments[prop] = "shellfish allergy"
                result = await b.call_tool(name, arguments)
                answer = json.dumps(result.structured_content or {}) + " ".join(
                    getattr(block, "text", "") for block in result.content
                )
                assert "tenant a's" not in answer.lower(), (name, answer[:300])

    assert await _snapshot("tenant-a") == before
    assert await MemoryEvent.objects.filter(tenant__slug="tenant-a").acount() == events_before
