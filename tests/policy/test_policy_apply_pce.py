"""pce.memory.policy.apply through the real MCP SDK: an alias bomb gets a short
INVALID_POLICY in the seed's error shape, and a dry run leaves an audit trail
(the pce tool-call log and the policy's own history)."""

from __future__ import annotations

import json

import pytest

from memory.models import MemoryEvent
from policy.models import PolicyEvent, PolicyVersion
from tests.policy.test_yaml_bounds import laughs

pytestmark = pytest.mark.django_db(transaction=True)


async def test_an_alias_bomb_gets_a_short_coded_error_and_is_audited(owner, mcp_client_for):
    async with mcp_client_for(owner, "pce") as client:
        result = await client.call_tool("pce.memory.policy.apply", {"yaml": laughs(6, 10), "dry_run": True})
    assert result.is_error
    text = result.content[0].text
    assert len(text) < 600, f"{len(text)} characters of error"
    error = json.loads(text)["error"]
    assert error["code"] == "INVALID_POLICY" and "anchors" in error["message"]
    assert "lol" not in text
    refused = await PolicyEvent.objects.aget(tenant_id=owner.caller.tenant_id, event_type="refused")
    assert refused.payload["mode"] == "dry_run" and refused.payload["code"] == "INVALID_POLICY"


async def test_a_dry_run_is_audited(owner, mcp_client_for):
    yaml = "version: '0.2.0'\nretrieval:\n  hybrid: { alpha: 0.3 }\n"
    async with mcp_client_for(owner, "pce") as client:
        result = await client.call_tool("pce.memory.policy.apply", {"yaml": yaml, "dry_run": True})
    assert not result.is_error, result.content
    assert not await PolicyVersion.objects.filter(tenant_id=owner.caller.tenant_id, version="0.2.0").aexists()
    calls = [
        e.payload async for e in MemoryEvent.objects.filter(tenant_id=owner.caller.tenant_id, event_type="tool_call")
    ]
    assert calls == [
        {
            "tool": "policy.apply",
            "version": "0.2.0",
            "applied": False,
            "dry_run": True,
            "validate_only": False,
            "changes": 1,
        }
    ]
    event = await PolicyEvent.objects.aget(tenant_id=owner.caller.tenant_id, event_type="dry_run")
    assert event.actor_principal_id == owner.caller.principal_id and event.version == "0.2.0"
