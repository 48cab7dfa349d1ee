"""Hostile input to every dialect's write, update and delete tools, over MCP
(the in-process client) and plain HTTP (/api, roampal's hooks, the LangGraph
store): each is refused with a coded error in the dialect's own vocabulary
(the same text over both) and changes nothing (memories, events, entities,
relations, outcome reports and exchanges counted before and after), or, where
the input is a legitimate repeat (a second forget), answers without writing
again. One section per rule; each says why."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from memory.models import Entity, Exchange, Memory, MemoryEvent, OutcomeReport, Relation
from tests.conftest import call
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

AT = "2025-06-01T12:00:00Z"


async def snapshot() -> tuple[int, ...]:
    """What a refused call must leave as it was."""
    return (
        await Memory.objects.acount(),
        await MemoryEvent.objects.acount(),
        await Entity.objects.acount(),
        await Relation.objects.acount(),
        await OutcomeReport.objects.acount(),
        await Exchange.objects.acount(),
    )


async def post(identity: Any, path: str, body: bytes | str, content_type: str = "application/json") -> httpx.Response:
    from memproj.asgi import Router

    headers = {"Authorization": f"Bearer {identity.token}", "Content-Type": content_type}
    raw = body.encode() if isinstance(body, str) else body
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return await client.post(path, content=raw, headers=headers)


async def refused(client: Any, tool: str, arguments: dict[str, Any], code: str) -> str:
    """The call fails with ``code`` behind its text, changing nothing; returns the text."""
    before = await snapshot()
    result = await client.call_tool(tool, arguments)
    text = " ".join(getattr(block, "text", "") for block in result.content)
    assert result.is_error, f"{tool} unexpectedly succeeded: {text}"
    assert result.structured_content is None
    assert (result.meta or {}).get("io.memproj/error-code") == code, (result.meta, text)
    assert "INTERNAL" not in text
    assert await snapshot() == before
    return text


def pce_code(text: str) -> str:
    return json.loads(text)["error"]["code"]


# --- labels ---------------------------------------------------------------------------------------
# A label (scope, butler, session id) is the whole value: a pattern's ``$`` also
# matches before a final newline, so "global\n" was taken and stored as a scope of its own.

LABELLED = [
    ("memory_store_rule", {"content": "answer in French", "scope": "global\n"}, "scope"),
    ("memory_store_fact", {"subject": "user", "predicate": "city", "content": "Austin", "scope": "health\n"}, "scope"),
    ("memory_store_episode", {"content": "asked about recipes", "butler": "general\n"}, "butler"),
    (
        "memory_store_episode",
        {"content": "asked about recipes", "butler": "general", "session_id": "s-1\n"},
        "session_id",
    ),
]


@pytest.mark.parametrize(("tool", "arguments", "field"), LABELLED)
async def test_a_label_with_a_trailing_newline_is_refused(member, mcp_client_for, tool, arguments, field):
    async with mcp_client_for(member) as client:
        text = await refused(client, tool, arguments, "INVALID_ARGUMENT")
    assert text.startswith(f"[INVALID_ARGUMENT] {field} must be 1-100 characters")
    before = await snapshot()
    response = await post(member, f"/api/memory/{tool}", json.dumps(arguments))
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"] == text
    assert await snapshot() == before


async def test_a_conversation_id_with_a_newline_is_kept_but_is_no_session(member):
    response = await post(
        member, "/api/hooks/stop", json.dumps({"conversation_id": "c-1\n", "assistant_response": "ok"})
    )
    assert response.status_code == 200, response.text
    stored = await Memory.objects.aget(tenant_id=member.caller.tenant_id, collection="working")
    assert stored.session_id == ""
    assert stored.metadata["conversation_id"] == "c-1\n"


# --- invisible text -------------------------------------------------------------------------------
# Text of invisible characters alone (zero-width, direction and format marks) is empty.

INVISIBLE = ["\u200b", "\u200b\u200f\u2060", " \u202e \ufeff "]


@pytest.mark.parametrize("content", INVISIBLE)
async def test_text_of_invisible_characters_alone_is_empty(member, mcp_client_for, content):
    async with mcp_client_for(member) as client:
        text = await refused(client, "memory_store_rule", {"content": content}, "INVALID_ARGUMENT")
        assert text == "[INVALID_ARGUMENT] content must not be empty (it holds only invisible characters)."
        await refused(
            client, "memory_store_fact", {"subject": content, "predicate": "p", "content": "c"}, "INVALID_ARGUMENT"
        )
    async with mcp_client_for(member, "memento") as client:
        text = await refused(client, "store_memory", {"content": content}, "INVALID_ARGUMENT")
    assert json.loads(text)["error"]["code"] == "INVALID_PARAMETER"
    # Text with something to read between the marks is text.
    async with mcp_client_for(member) as client:
        await call(client, "memory_store_rule", content=f"\u200bcall me Ishmael{content}")


# --- numbers --------------------------------------------------------------------------------------
# -0.0 is within every bound; it is stored and answered as 0.


async def test_negative_zero_is_stored_and_answered_as_zero(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        stored = await call(client, "memory_store_episode", content="a quiet day", butler="general", importance=-0.0)
    assert json.dumps(stored["importance"]) == "0.0"
    async with mcp_client_for(member, "memento") as client:
        created = (await call(client, "store_memory", content="the user is neutral", confidence=-0.0))["created"]
    assert json.dumps(created["confidence"]) == "0.0"
