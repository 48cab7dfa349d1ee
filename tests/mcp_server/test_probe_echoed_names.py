"""A refusal quotes a client's name (an unknown argument, a key of an object
argument, a tool name) as a short excerpt, never whole: a name is the client's,
as long as the body limit allows (256 KiB on /api, 2 MiB over MCP), and a
refusal that echoed it sent that much back and into every log that keeps the
answer. Found over real HTTP: a 200 KB argument name, section quota key or
metadata key came back whole in the error message, and a 1 MB tool name too."""

from __future__ import annotations

import json

import pytest

from tests.mcp_server.test_write_inputs_hostile import post, refused

pytestmark = pytest.mark.django_db(transaction=True)

HUGE = "k" * 200_000
SHOWN = "'" + "k" * 47 + "...'"
# Every answer here is a one-sentence refusal: far below this.
SHORT = 1_000


@pytest.mark.parametrize(
    ("toolset", "tool", "arguments", "says"),
    [
        (
            "memory",
            "memory_store_fact",
            {"subject": "s", "predicate": "p", "content": "c", HUGE: 1},
            f"unknown argument {SHOWN}; this tool takes:",
        ),
        (
            "memory",
            "memory_context",
            {"trigger_prompt": "tea", "butler": "b", "section_quotas": {HUGE: 0.5}},
            f"section quotas take facts, rules and episodes (got {SHOWN})",
        ),
        (
            "memory",
            "memory_context",
            {"trigger_prompt": "tea", "butler": "b", "section_quotas": {HUGE: float("nan")}},
            "section_quotas." + "k" * 47 + "... must be",
        ),
    ],
)
async def test_a_huge_name_is_quoted_as_an_excerpt_over_mcp_and_http(
    member, mcp_client_for, toolset, tool, arguments, says
):
    async with mcp_client_for(member, toolset) as client:
        text = await refused(client, tool, arguments, "INVALID_ARGUMENT")
    assert says in text
    assert len(text) < SHORT
    body = json.dumps(arguments, allow_nan=True)
    response = await post(member, f"/api/{toolset}/{tool}", body)
    assert 400 <= response.status_code < 500, response.text
    assert says in response.json()["error"]["message"]
    assert len(response.content) < SHORT


async def test_many_unknown_arguments_are_counted_not_listed(member, mcp_client_for):
    extra = {f"extra_{i:05d}": i for i in range(5_000)}
    async with mcp_client_for(member) as client:
        text = await refused(client, "memory_search", {"query": "tea", **extra}, "INVALID_ARGUMENT")
    assert "unknown argument 'extra_00000', 'extra_00001', 'extra_00002' and 4997 more;" in text
    assert len(text) < SHORT


async def test_an_unknown_tool_name_is_quoted_as_an_excerpt(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        text = await refused(client, "x" * 1_000_000, {}, "INVALID_ARGUMENT")
    assert "unknown tool '" + "x" * 47 + "...'" in text
    assert len(text) < SHORT
