"""The argument contract of issue 8, for every registered toolset: each new
dialect is checked here the moment it is registered in TOOLSETS."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from mcp_server.dialect import TENANT_SELECTORS
from mcp_server.registry import TOOLSETS
from memory.models import Memory, MemoryEvent
from tests.conftest import call, call_error, make_identity

pytestmark = pytest.mark.django_db(transaction=True)

LEAKS = ("Traceback", "Error executing tool", "validation error for", "input_value", "pydantic", 'File "')


def assert_clean(text: str) -> None:
    for leak in LEAKS:
        assert leak not in text, f"internal detail {leak!r} reached the client: {text[:300]}"


async def _tools(client) -> dict[str, dict[str, Any]]:
    return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}


def _minimal_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Schema-valid values for the required arguments (content is irrelevant:
    the checks below must fire before the tool runs)."""
    out: dict[str, Any] = {}
    for name in schema.get("required", []):
        prop = schema["properties"][name]
        kind = prop.get("type") or next((b.get("type") for b in prop.get("anyOf", []) if b.get("type") != "null"), None)
        if "enum" in prop:
            out[name] = prop["enum"][0]
        elif kind == "integer":
            out[name] = prop.get("minimum", 1)
        elif kind == "number":
            out[name] = prop.get("minimum", 0)
        elif kind == "boolean":
            out[name] = False
        elif kind == "array":
            out[name] = []
        elif kind == "object":
            out[name] = {}
        else:
            out[name] = str(uuid.uuid4())
    return out


async def _counts() -> tuple[int, int]:
    return await Memory.objects.acount(), await MemoryEvent.objects.acount()


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
async def test_every_schema_is_strict_and_hides_elevation_from_members(toolset, member, mcp_client_for):
    async with mcp_client_for(member, toolset) as client:
        schemas = await _tools(client)
    assert schemas, f"{toolset} serves no tools"
    for name, schema in schemas.items():
        assert schema.get("additionalProperties") is False, name
        assert not {"tenant", "elevate", *TENANT_SELECTORS} & set(schema.get("properties", {})), name


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
async def test_elevating_admin_sees_tenant_and_elevate(toolset, mcp_client_for, transactional_db):
    root = await sync_to_async(make_identity)("tenant-a", "root", "admin", ["read", "write", "admin", "elevate"])
    async with mcp_client_for(root, toolset) as client:
        schemas = await _tools(client)
    for name, schema in schemas.items():
        assert {"tenant", "elevate"} <= set(schema["properties"]), name


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
async def test_unknown_argument_is_refused_by_name_and_changes_nothing(toolset, member, mcp_client_for):
    async with mcp_client_for(member, toolset) as client:
        schemas = await _tools(client)
        before = await _counts()
        for name, schema in schemas.items():
            arguments = {**_minimal_arguments(schema), "surprise_argument": 1}
            text = await call_error(client, name, **arguments)
            assert "surprise_argument" in text, (name, text)
            assert_clean(text)
    assert await _counts() == before


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
@pytest.mark.parametrize("selector", TENANT_SELECTORS)
async def test_tenant_selector_from_a_member_is_refused(toolset, selector, member, outsider, mcp_client_for):
    async with mcp_client_for(member, toolset) as client:
        schemas = await _tools(client)
        before = await _counts()
        for name, schema in schemas.items():
            arguments = {**_minimal_arguments(schema), selector: "tenant-b"}
            text = await call_error(client, name, **arguments)
            assert selector in text, (name, text)
            assert_clean(text)
    assert await _counts() == before


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
async def test_hostile_values_get_coded_errors_without_internals(toolset, member, mcp_client_for):
    """Wrong types, booleans for numbers, NUL, lone surrogates, huge strings."""
    hostile = [True, "1", {"$ne": None}, "\x00", "\ud800", "x" * 300_000, -1e308, [1, 2]]
    async with mcp_client_for(member, toolset) as client:
        schemas = await _tools(client)
        before = await _counts()
        for name, schema in schemas.items():
            base = _minimal_arguments(schema)
            for prop, spec in schema.get("properties", {}).items():
                for value in hostile:
                    if (
                        spec.get("type") == "string"
                        and isinstance(value, str)
                        and len(value) < 10
                        and value.isprintable()
                    ):
                        continue  # a short printable string may be valid for a string argument
                    result = await client.call_tool(name, {**base, prop: value})
                    text = " ".join(getattr(block, "text", "") for block in result.content)
                    if result.is_error:
                        assert_clean(text)
    # Whatever was accepted was written whole: every memory row has its audit event.
    stored = MemoryEvent.objects.filter(event_type="stored").values("memory_id")
    assert not await Memory.objects.exclude(pk__in=stored).aexists()
    assert await _counts() >= before


async def test_boolean_is_not_coerced_to_a_number(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        importance = await call_error(client, "memory_store_episode", content="c", butler="general", importance=False)
        limit = await call_error(client, "memory_search", query="q", limit=True)
        # JSON Schema counts -1e308 as an integer; no tool can use it (it reached
        # memento's recall as an internal error before the argument contract refused it).
        huge = await call_error(client, "memory_search", query="q", limit=-1e308)
    assert "importance must be of type number" in importance
    assert "limit must be of type integer" in limit
    assert huge.startswith("[INVALID_ARGUMENT] limit must")
    assert not await Memory.objects.aexists()


async def test_unknown_tool_answers_with_a_code(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        text = await call_error(client, "memory_teleport", query="x")
    assert text.startswith("[INVALID_ARGUMENT]") and "memory_teleport" in text


async def test_butlers_aliases_memory_type_and_memory_id(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        fact = await call(client, "memory_store_fact", subject="user", predicate="city", content="Lives in Oslo")
        got = await call(client, "memory_get", memory_type="fact", memory_id=fact["id"])
        confirmed = await call(client, "memory_confirm", memory_type="fact", memory_id=fact["id"])
        both = await call_error(client, "memory_get", type="fact", memory_type="fact", memory_id=fact["id"])
        forgotten = await call(client, "memory_forget", memory_type="fact", memory_id=fact["id"])
    assert got["content"] == "Lives in Oslo" and confirmed["id"] == fact["id"]
    assert "either" in both
    assert forgotten["validity"] == "retracted"


async def test_token_limited_to_another_toolset_cannot_list_tools(mcp_client_for, transactional_db):
    other = await sync_to_async(make_identity)("tenant-a", "pce-only", "member", ["read", "write", "toolset:pce"])
    async with mcp_client_for(other) as client:
        with pytest.raises(Exception) as refused:
            await client.list_tools()
    assert "toolset" in str(refused.value)


async def test_error_text_is_exactly_the_dialect_rendering(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        text = await call_error(client, "memory_get", type="fact", id=str(uuid.uuid4()))
    assert text.startswith("[NOT_FOUND] no fact with id")
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # the memory dialect renders text, not JSON


async def test_json_looking_text_stays_text(member, mcp_client_for):
    """A string argument that happens to look like JSON is the string it is."""
    async with mcp_client_for(member) as client:
        stored = await call(client, "memory_store_episode", content='{"a": 1}', butler="general", session_id="s1")
        found = await call(client, "memory_search", query='["x", "y"]', scope="global")
    row = await Memory.objects.aget(pk=stored["id"])
    assert row.content == '{"a": 1}' and isinstance(found["results"], list)
