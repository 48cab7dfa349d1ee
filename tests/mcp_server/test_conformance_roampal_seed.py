"""roampal v0.3.5's MCP tools against its release notes, read literally, and
against upstream's code where the notes are silent (each test says which).

- The system overview's lifecycle names the patterns criterion ``uses ≥3``
  (the notes' audit fix: "Added `uses ≥3` to lifecycle description")."""

from __future__ import annotations

import json

import pytest
from django.test import Client as DjangoClient

pytestmark = pytest.mark.django_db(transaction=True)


async def text_call(client, tool: str, **arguments):
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {result.content}"
    return result.content[0].text, result.structured_content


def post(identity, path: str, body: object):
    return DjangoClient().post(
        path, data=json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {identity.token}"
    )


# --- Feature 3 / Feature 5: the system overview ---------------------------------------------------


async def test_the_lifecycle_names_uses_at_least_3_for_patterns(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    overview = tools["get_context_insights"].description
    line = (
        "• working (new, 24h) → score ≥0.7 + 2 uses → history (30d) → score ≥0.9 + uses ≥3 + 5 proven successes "
        "→ patterns (permanent)"
    )
    assert line in overview.splitlines()
