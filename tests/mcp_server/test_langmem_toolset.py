"""Every scenario of the langmem dialect (LangMem 0.0.30's tools) through the real MCP SDK (in-process
client), with the per-connection options an HTTP endpoint's query parameters
or the stdio flags would set."""

from __future__ import annotations

import json
import uuid
from contextlib import asynccontextmanager

import pytest
from asgiref.sync import sync_to_async
from mcp import Client

from mcp_server.dialect import connection_options
from memory import api
from memory.models import Memory
from tests.conftest import call, call_error

pytestmark = pytest.mark.django_db(transaction=True)

USER = {"configurable.user_id": "u-123"}
CONFIG_ERROR = "ConfigurationError: Missing key in 'configurable' field: {key}. Available keys: {keys}"


@pytest.fixture
def langmem_client():
    """Factory: an in-process langmem client for an identity and connection options."""
    from mcp_server.server import build_server

    @asynccontextmanager
    async def factory(identity, **options):
        token = connection_options.set(options)
        try:
            async with Client(build_server("langmem", static_caller=identity.caller)) as client:
                yield client
        finally:
            connection_options.reset(token)

    return factory


async def text_of(client, tool, **arguments) -> str:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.content[0].text


async def manage(client, **arguments) -> str:
    return await text_of(client, "manage_memory", **arguments)


async def search(client, **arguments) -> list[dict]:
    return json.loads(await text_of(client, "search_memory", **arguments))


def created_id(answer: str) -> str:
    assert answer.startswith("created memory ")
    return str(uuid.UUID(answer.removeprefix("created memory ")))


async def test_create_a_fact_with_a_generated_id(member, langmem_client):
    async with langmem_client(member, **USER) as client:
        answer = await manage(client, content="User prefers dark mode", action="create")
        default = await manage(client, content="User lives in Lisbon")  # action defaults to create
    key = created_id(answer)
    created_id(default)
    row = await Memory.objects.aget(subject=key)
    assert (row.kind, row.content, row.namespace, row.predicate) == (
        "fact",
        "User prefers dark mode",
        ["user", "u-123"],
        "",
    )
    assert row.tenant_id == member.caller.tenant_id


async def test_update_an_existing_fact(member, langmem_client):
    async with langmem_client(member, **USER) as client:
        key = created_id(await manage(client, content="User prefers light mode"))
        answer = await manage(client, content="User prefers dark mode", action="update", id=key)
        found = await search(client, query="display mode preference")
        missing_id = await call_error(client, "manage_memory", content="x", action="update")
    assert answer == f"updated memory {key}"
    assert [(f["key"], f["value"]) for f in found] == [(key, {"content": "User prefers dark mode"})]
    versions = [m async for m in Memory.objects.filter(subject=key).order_by("created_at")]
    assert [v.validity for v in versions] == ["superseded", "active"]  # the one supersession mechanism
    assert missing_id == "ValueError: You must provide a MEMORY ID when deleting or updating a MEMORY."


async def test_delete_a_fact(member, langmem_client):
    async with langmem_client(member, **USER) as client:
        key = created_id(await manage(client, content="User owns a dog named Max"))
        answer = await manage(client, action="delete", id=key)
        found = await search(client, query="dog named Max")
        missing_id = await call_error(client, "manage_memory", action="delete")
        with_id = await call_error(client, "manage_memory", content="x", action="create", id=key)
    assert answer == f"Deleted memory {key}"
    assert found == []
    assert (await Memory.objects.aget(subject=key)).validity == "retracted"
    assert missing_id == "ValueError: You must provide a MEMORY ID when deleting or updating a MEMORY."
    assert with_id == (
        "ValueError: You cannot provide a MEMORY ID when creating a MEMORY. Please try again, omitting the id argument."
    )


async def test_configurable_permitted_actions(member, langmem_client):
    async with langmem_client(member, actions_permitted="create,update", **USER) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        key = created_id(await manage(client, content="User likes tea"))
        refused = await call_error(client, "manage_memory", action="delete", id=key)
    action = tools["manage_memory"].input_schema["properties"]["action"]
    assert action["enum"] == ["create", "update"] and action["default"] == "create"
    assert tools["manage_memory"].description.startswith("Create or update a memory to persist across conversations.")
    assert refused == "ValueError: Invalid action delete. Must be one of ('create', 'update')."
    assert (await Memory.objects.aget(subject=key)).validity == "active"

    async with langmem_client(member, actions_permitted="update", **USER) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        default = await call_error(client, "manage_memory", content="x")  # defaults to update: needs an id
    assert tools["manage_memory"].input_schema["properties"]["action"] == {
        "type": "string",
        "enum": ["update"],
        "default": "update",
        "description": "What to do with the memory.",
    }
    assert default == "ValueError: You must provide a MEMORY ID when deleting or updating a MEMORY."


async def test_custom_instructions_are_in_the_tool_description(member, langmem_client):
    text = "Only store facts about the user's travel plans."
    async with langmem_client(member, instructions=text, **USER) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert tools["manage_memory"].description.endswith(text)
    assert tools["manage_memory"].description.startswith("Create, update, or delete a memory")
    assert tools["search_memory"].description.endswith(text)


async def test_text_query_search_is_hybrid_and_returns_langmem_json(member, langmem_client):
    async with langmem_client(member, **USER) as client:
        dark = created_id(await manage(client, content="User prefers dark mode in every editor"))
        created_id(await manage(client, content="User's favourite food is ramen"))
        # "XK-42" exists only as a keyword: the keyword channel finds it.
        code = created_id(await manage(client, content="Ticket XK-42 tracks the login bug"))
        found = await search(client, query="preference for dark mode", limit=10)
        by_keyword = await search(client, query="XK-42")
        paged = await search(client, query="preference for dark mode", limit=1, offset=1)
        raw = await client.call_tool("search_memory", {"query": "dark mode"})
    assert found[0]["key"] == dark
    assert set(found[0]) == {"namespace", "key", "value", "created_at", "updated_at", "score"}
    assert found[0]["namespace"] == ["user", "u-123"]
    assert found[0]["value"] == {"content": "User prefers dark mode in every editor"}
    assert 0 < found[0]["score"] <= 1
    assert by_keyword[0]["key"] == code
    assert paged == found[1:2]
    assert raw.structured_content is None  # response_format=content: the serialized list only


async def test_filtered_search_matches_stored_attributes(member, langmem_client):
    caller = member.caller
    for content, category in (
        ("User prefers dark mode", "preference"),
        ("User's dark mode bug was fixed", "incident"),
    ):
        await sync_to_async(api.fact_store)(
            caller=caller,
            subject=str(uuid.uuid4()),
            predicate=None,
            namespace=["user", "u-123"],
            content=content,
            metadata={"category": category},
        )
    async with langmem_client(member, **USER) as client:
        everything = await search(client, query="dark mode")
        preferences = await search(client, query="dark mode", filter={"category": "preference"})
        nothing = await search(client, query="dark mode", filter={"category": "travel"})
        others = await search(client, query="dark mode", filter={"category": {"$ne": "preference"}})
        unknown = await call_error(client, "search_memory", query="dark mode", filter={"category": {"$in": ["x"]}})
    assert len(everything) == 2
    assert [p["value"] for p in preferences] == [{"content": "User prefers dark mode", "category": "preference"}]
    assert nothing == []
    assert [p["value"]["category"] for p in others] == ["incident"]
    # LangGraph's stores refuse an operator they lack with this ValueError.
    assert unknown.startswith("ValueError: Unsupported operator: $in")


async def test_content_and_artifact_returns_both(member, langmem_client):
    async with langmem_client(member, response_format="content_and_artifact", **USER) as client:
        key = created_id(await manage(client, content="User prefers window seats"))
        result = await client.call_tool("search_memory", {"query": "window seat"})
    serialized = json.loads(result.content[0].text)
    assert serialized[0]["key"] == key
    assert result.structured_content == {"result": serialized}


async def test_runtime_namespace_resolution(member, langmem_client):
    async with langmem_client(member, **{"configurable.user_id": "u-123"}) as client:
        user_key = created_id(await manage(client, content="User memory"))
    async with langmem_client(member, **{"configurable.org_id": "acme", "configurable.agent_id": "alpha"}) as client:
        org_key = created_id(await manage(client, content="Org memory"))
    assert (await Memory.objects.aget(subject=user_key)).namespace == ["user", "u-123"]
    assert (await Memory.objects.aget(subject=org_key)).namespace == ["org", "acme", "alpha"]


async def test_namespace_templating_and_configuration_error(member, langmem_client):
    async with langmem_client(member, namespace="{user_id},memories", **USER) as client:
        key = created_id(await manage(client, content="Templated memory"))
    assert (await Memory.objects.aget(subject=key)).namespace == ["u-123", "memories"]

    async with langmem_client(member, namespace="memories,{user_id}", **{"configurable.org_id": "acme"}) as client:
        create = await call_error(client, "manage_memory", content="x")
        find = await call_error(client, "search_memory", query="x")
    assert create == find == CONFIG_ERROR.format(key="user_id", keys="['org_id']")
    async with langmem_client(member) as client:  # no namespace, no runtime config
        assert await call_error(client, "manage_memory", content="x") == CONFIG_ERROR.format(key="user_id", keys="[]")
    assert await Memory.objects.filter(content="x").acount() == 0


async def test_namespaces_partition_memory_inside_a_tenant(member, langmem_client):
    async with langmem_client(member, **{"configurable.user_id": "alice"}) as alice:
        key = created_id(await manage(alice, content="Alice is vegetarian"))
    async with langmem_client(member, **{"configurable.user_id": "bob"}) as bob:
        assert await search(bob, query="vegetarian") == []
        # Bob's connection updating Alice's id writes in Bob's namespace, never Alice's.
        await manage(bob, content="Bob eats meat", action="update", id=key)
    async with langmem_client(member, **{"configurable.user_id": "alice"}) as alice:
        found = await search(alice, query="vegetarian")
    assert [f["value"]["content"] for f in found] == ["Alice is vegetarian"]


async def test_runtime_namespace_values_are_kept_exactly(member, langmem_client):
    """A configurable value is a namespace label as given: ``" alice"`` is not
    ``"alice"`` (LangGraph compares namespaces exactly); only the template
    option, typed as a comma-separated list, is trimmed around its commas."""
    async with langmem_client(
        member, namespace=" memories , {user_id} ", **{"configurable.user_id": " alice"}
    ) as spaced:
        key = created_id(await manage(spaced, content="Alice is vegetarian"))
        found = await search(spaced, query="vegetarian")
    assert [(f["namespace"], f["key"]) for f in found] == [(["memories", " alice"], key)]
    assert (await Memory.objects.aget(subject=key)).namespace == ["memories", " alice"]
    async with langmem_client(member, namespace="memories,{user_id}", **{"configurable.user_id": "alice"}) as plain:
        assert await search(plain, query="vegetarian") == []
        # Deleting the id under the plain namespace leaves the spaced one's memory.
        assert await manage(plain, action="delete", id=key) == f"Deleted memory {key}"
    async with langmem_client(member, namespace="memories,{user_id}", **{"configurable.user_id": " alice"}) as spaced:
        assert [f["key"] for f in await search(spaced, query="vegetarian")] == [key]


async def test_bad_connection_options_are_refused(member, langmem_client):
    async with langmem_client(member, response_format="xml", **USER) as client:
        error = await call_error(client, "search_memory", query="x")
    assert error.startswith("ValueError: response_format must be one of")
    async with langmem_client(member, actions_permitted="", **USER) as client:
        assert await call_error(client, "manage_memory", content="x") == "ValueError: actions_permitted cannot be empty"
    async with langmem_client(member, tenant="tenant-b", **USER) as client:
        error = await call_error(client, "manage_memory", content="x")
    assert error.startswith("ValueError: unknown option 'tenant'")
    assert await Memory.objects.acount() == 0


async def test_langmem_writes_are_found_by_memento_and_memory(member, langmem_client, mcp_client_for):
    async with langmem_client(member, **USER) as client:
        key = created_id(await manage(client, content="User is allergic to peanuts"))
    row = await Memory.objects.aget(subject=key)
    async with mcp_client_for(member, "memento") as memento:
        found = await call(memento, "search_memories", query="peanut allergy")
    async with mcp_client_for(member, "memory") as memory:
        results = await call(memory, "memory_search", query="peanut allergy", types=["fact"])
    assert found["memories"][0]["id"] == str(row.id)
    assert results["results"][0]["id"] == str(row.id)
    # And a memento memory in this tenant is not in the user's langmem namespace.
    async with mcp_client_for(member, "memento") as memento:
        await call(memento, "store_memory", content="User is allergic to cats")
    async with langmem_client(member, **USER) as client:
        assert [f["key"] for f in await search(client, query="allergic")] == [key]


async def test_tenant_isolation_for_every_langmem_tool(member, outsider, langmem_client):
    async with langmem_client(member, **USER) as a:
        key = created_id(await manage(a, content="Tenant A's user is allergic to shellfish"))
    before = [r async for r in Memory.objects.order_by("id").values_list("id", "validity", "content", "accessed_at")]
    async with langmem_client(outsider, **USER) as b:  # the same namespace, another tenant
        assert await search(b, query="shellfish allergy") == []
        assert await manage(b, action="delete", id=key) == f"Deleted memory {key}"  # nothing of A's
        await manage(b, content="B overwrites?", action="update", id=key)
        assert [f["value"]["content"] for f in await search(b, query="overwrites")] == ["B overwrites?"]
    after = [
        r
        async for r in Memory.objects.filter(tenant_id=member.caller.tenant_id)
        .order_by("id")
        .values_list("id", "validity", "content", "accessed_at")
    ]
    assert after == before
