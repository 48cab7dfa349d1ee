"""Tenant isolation for every roampal tool (snapshots before and after each
call), and the dialect over a real stdio subprocess."""

from __future__ import annotations

import sys

import pytest
from asgiref.sync import sync_to_async
from mcp import Client, StdioServerParameters

from memory import api
from memory.models import Memory
from tests.conftest import block_text
from tests.mcp_server.test_transports import ROOT, _env_for_test_database

pytestmark = pytest.mark.django_db(transaction=True)


def _snapshot(tenant_id) -> list[tuple]:
    return list(
        Memory.objects.filter(tenant_id=tenant_id)
        .order_by("id")
        .values_list("id", "content", "collection", "validity", "outcome_score", "applied_count", "success_count")
    )


@sync_to_async
def _seed(member):
    fact = api.memory_bank_store(caller=member.caller, content="Member's secret project is Falcon")
    working = api.working_store(caller=member.caller, content="Falcon deploys on Fridays", outcome_score=0.7)
    book = api.book_ingest(caller=member.caller, title="falcon", text="Falcon architecture notes").chunk_ids[0]
    return api.display_id(fact), api.display_id(working), f"books_{book.hex[:12]}"


async def test_every_roampal_tool_is_tenant_isolated(member, outsider, mcp_client_for):
    fact_id, working_id, book_id = await _seed(member)
    before = await sync_to_async(_snapshot)(member.caller.tenant_id)
    ids = [fact_id, working_id, book_id]
    async with mcp_client_for(outsider, "roampal") as client:

        async def ok(tool, **arguments):
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.content
            return result.structured_content

        async def refused(tool, **arguments):
            result = await client.call_tool(tool, arguments)
            assert result.is_error, result.structured_content
            return block_text(result)

        context = await ok("get_context_insights", query="Falcon project")
        assert context["user_facts"] == [] and context["relevant_memories"] == []
        assert (await ok("search_memory", query="Falcon", limit=20))["count"] == 0
        assert (await ok("search_memory", days_back=365))["count"] == 0
        for ident in ids:
            assert (await ok("search_memory", id=ident))["count"] == 0
        scored = await ok("score_response", outcome="failed", memory_scores={i: "failed" for i in ids})
        assert scored["updated"] == 0 and sorted(scored["skipped"]) == sorted(ids)
        again = await ok("score_memories", memory_scores={i: "failed" for i in ids}, exchange_outcome="failed")
        assert again["updated"] == 0
        assert "Error: no memory with id" in await refused("update_memory", id=fact_id, new_content="hijacked")
        assert "Error:" in await refused("update_memory", old_content="secret project Falcon", new_content="x")
        assert "Error:" in await refused("delete_memory", id=working_id)
        assert "Error:" in await refused("delete_memory", content="Member's secret project is Falcon")
        assert "tenant is taken from your token" in await refused("search_memory", query="Falcon", tenant="tenant-a")
        await ok("record_response", key_takeaway="outsider note")
        await ok("add_to_memory_bank", content="Outsider fact")
    assert await sync_to_async(_snapshot)(member.caller.tenant_id) == before
    theirs = await sync_to_async(
        lambda: sorted(Memory.objects.filter(tenant_id=outsider.caller.tenant_id).values_list("content", flat=True))
    )()
    assert theirs == ["Key takeaway: outsider note", "Outsider fact"]


async def test_roampal_over_stdio_with_token_from_environment(member):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_server", "--toolset", "roampal"],
        env=_env_for_test_database(MEMPROJ_TOKEN=member.token),
        cwd=str(ROOT),
    )
    async with Client(params, read_timeout_seconds=120) as client:
        added = await client.call_tool("add_to_memory_bank", {"content": "User's shell is fish", "tags": ["tooling"]})
        found = await client.call_tool("search_memory", {"query": "which shell does the user use"})
    ident = added.structured_content["id"]
    assert block_text(added) == f"Added to memory bank (ID: {ident})"
    assert block_text(found).startswith(f"Found 1 memories:\n\n1. [memory_bank] (0m, imp:0.7, conf:0.7) [id:{ident}]")
