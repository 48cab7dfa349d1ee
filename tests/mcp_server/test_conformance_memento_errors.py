"""Conformance of memento's refusals with the Memento MCP tool specification's
error handling: every tool may answer ``{"error": {"code", "message"}}``,
exactly those keys, with the specification's codes. The store unreachable is
``STORAGE_ERROR`` ("Database operation failed") from each of the four tools,
with a message that names no driver, socket or traceback."""

from __future__ import annotations

import json

import pytest
from django.db import connections

from tests.conftest import call, call_error

pytestmark = pytest.mark.django_db(transaction=True)

MISSING = "00000000-0000-4000-8000-000000000000"
CALLS = {
    "store_memory": {"content": "User moved to Austin"},
    "supersede_memory": {"old_memory_id": MISSING, "new_memory_id": MISSING.replace("0000-4000", "0000-4001")},
    "search_memories": {"query": "Where does the user live?"},
    "list_recent_memories": {},
}


def error_of(text: str) -> dict:
    body = json.loads(text)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]


@pytest.mark.parametrize("tool", sorted(CALLS))
async def test_every_tool_answers_storage_error_when_the_store_is_unreachable(member, mcp_client_for, tmp_path, tool):
    settings_dict = connections["default"].settings_dict
    saved = settings_dict["HOST"], settings_dict.get("PORT")
    async with mcp_client_for(member, "memento") as client:
        # Tools open fresh connections per call: these go where no server listens.
        settings_dict["HOST"], settings_dict["PORT"] = str(tmp_path), ""
        try:
            text = await call_error(client, tool, **CALLS[tool])
        finally:
            settings_dict["HOST"], settings_dict["PORT"] = saved
    error = error_of(text)
    assert error["code"] == "STORAGE_ERROR"
    assert error["message"] == "the memory store is unavailable right now; retry in a few seconds."


async def test_search_memories_answers_during_an_embedder_outage(member, mcp_client_for, embedder_outage):
    async with mcp_client_for(member, "memento") as client:
        stored = await call(client, "store_memory", content="User's cat is called Miso")
        found = await call(client, "search_memories", query="Miso")
    assert [m["id"] for m in found["memories"]] == [stored["created"]["id"]]
