"""pce-memory MCP Tools Spec v0.1: each tool's payload limit, byte for byte
(activate 16 KB, search 32 KB, upsert 64 KB, feedback 4 KB, boundary.validate
32 KB, policy.apply 128 KB; the arguments as UTF-8 JSON, Japanese text three
bytes a character), its timeout, and the seed's activate example as sent."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from mcp_server.dialects.pce import schemas
from mcp_server.dialects.pce.tools import LIMITS

pytestmark = pytest.mark.django_db(transaction=True)

AT = "2025-06-01T12:00:00Z"
KB = 1024
# (tool, arguments but the padded one, the argument padded)
PADDED: list[tuple[str, dict[str, Any], str]] = [
    ("activate", {}, "q"),
    ("search", {}, "query"),
    ("upsert", {"provenance": {"at": AT}}, "text"),
    ("feedback", {"signal": "helpful"}, "claim_id"),
    ("boundary.validate", {}, "payload"),
    ("policy.apply", {}, "yaml"),
]


def test_the_limits_and_timeouts_are_the_specs():
    assert LIMITS == {
        "activate": (16 * KB, 15.0),
        "search": (32 * KB, 10.0),
        "upsert": (64 * KB, 10.0),
        "feedback": (4 * KB, 3.0),
        "boundary.validate": (32 * KB, 5.0),
        "policy.apply": (128 * KB, 10.0),
    }


def _sized(base: dict[str, Any], key: str, size: int) -> dict[str, Any]:
    """The arguments at exactly ``size`` bytes of compact UTF-8 JSON (what a
    client sends: no space after a separator), the padding Japanese."""
    empty = len(json.dumps({**base, key: ""}, ensure_ascii=False, separators=(",", ":")).encode())
    room = size - empty
    value = "命名規約" * (room // 12) + "x" * (room % 12)
    arguments = {**base, key: value}
    assert len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")).encode()) == size
    return arguments


@pytest.mark.parametrize(("short", "base", "key"), PADDED, ids=[p[0] for p in PADDED])
async def test_a_payload_at_the_limit_is_taken_and_one_byte_more_is_refused(short, base, key, member, mcp_client_for):
    limit = LIMITS[short][0]
    async with mcp_client_for(member, "pce") as client:
        at = await client.call_tool(f"pce.memory.{short}", _sized(base, key, limit))
        over = await client.call_tool(f"pce_memory_{short.replace('.', '_')}", _sized(base, key, limit + 1))
    assert "payload limit" not in at.content[0].text  # answered, or refused for another reason
    error = json.loads(over.content[0].text)["error"]
    assert over.is_error and error["code"] == "VALIDATION_ERROR"
    assert error["message"] == f"the arguments exceed this tool's payload limit of {limit} bytes."


async def test_the_seed_example_activate_request(member, mcp_client_for):
    """2.1's example request, as the spec prints it, after the claim it looks for is stored."""
    async with mcp_client_for(member, "pce") as client:
        stored = await client.call_tool(
            "pce.memory.upsert",
            {"text": "POST /subscriptions/{id}/cancel は非同期", "scope": "project", "provenance": {"at": AT}},
        )
        assert not stored.is_error, stored.content
        example = {"q": "解約APIの命名規約", "scope": ["project"], "allow": ["answer:task"], "top_k": 12}
        result = await client.call_tool("pce.memory.activate", example)
    assert not result.is_error, result.content
    body = result.structured_content
    assert set(body) == {"data", "policy_version", "request_id", "trace_id"}
    assert uuid.UUID(body["request_id"]) != uuid.UUID(body["trace_id"])
    data = body["data"]
    Draft202012Validator(schemas.ACTIVATE_RESPONSE).validate(data)
    assert data["policy_version"] == body["policy_version"]
    assert data["claims_count"] == len(data["claims"]) >= 1
    assert data["claims"][0]["claim"]["text"] == "POST /subscriptions/{id}/cancel は非同期"
    assert "scores" not in data["claims"][0]  # include_meta defaults to false
    assert data["scoring_params"] == {
        "alpha": 0.65,
        "k_txt": 48,
        "k_vec": 96,
        "k_final": 12,
        "rerank": {"use_quality": False, "recency_half_life_days": 30},
    }
