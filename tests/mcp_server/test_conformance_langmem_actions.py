"""Conformance of langmem's manage_memory ``action`` with the LangMem specification ("Configurable
permitted actions": with actions_permitted=("create", "update") the delete
action SHALL NOT be available) and with LangMem 0.0.30, whose ``action`` is a
``Literal`` of the permitted actions with a default: the server takes what it
advertises. An action outside the permitted ones is refused in upstream's words,
naming only the permitted actions (the refusal of an unknown action named
delete as a choice on a connection without it), and ``null`` is no action (it
created a memory as if ``action`` had been left out)."""

from __future__ import annotations

import pytest

from memory.models import Memory
from tests.conftest import call_error
from tests.mcp_server.test_langmem_toolset import USER, langmem_client  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("permitted", "action", "expected"),
    [
        ("create,update", "upsert", "ValueError: Invalid action upsert. Must be one of ('create', 'update')."),
        ("create,update", "delete", "ValueError: Invalid action delete. Must be one of ('create', 'update')."),
        ("create", "Create", "ValueError: Invalid action Create. Must be one of ('create',)."),
        ("create,update", "", "ValueError: Invalid action . Must be one of ('create', 'update')."),
        (None, "remove", "ValueError: Invalid action remove. Must be one of ('create', 'update', 'delete')."),
    ],
)
async def test_an_action_not_permitted_names_only_the_permitted_ones(
    member,
    langmem_client,  # noqa: F811
    permitted,
    action,
    expected,
):
    options = dict(USER) if permitted is None else {**USER, "actions_permitted": permitted}
    async with langmem_client(member, **options) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        refused = await call_error(client, "manage_memory", content="User likes tea", action=action)
    assert refused == expected
    advertised = tools["manage_memory"].input_schema["properties"]["action"]
    assert action not in advertised["enum"]
    assert await Memory.objects.acount() == 0


@pytest.mark.parametrize(("action", "expected"), [(None, "string"), (1, "string"), (["create"], "string")])
async def test_action_is_a_string_as_advertised(member, langmem_client, action, expected):  # noqa: F811
    async with langmem_client(member, **USER) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        refused = await call_error(client, "manage_memory", content="User likes tea", action=action)
    assert tools["manage_memory"].input_schema["properties"]["action"]["type"] == "string"
    assert refused == f"ValueError: action must be of type {expected}."
    assert await Memory.objects.acount() == 0


async def test_a_long_action_is_refused_without_being_echoed(member, langmem_client):  # noqa: F811
    async with langmem_client(member, **USER) as client:
        refused = await call_error(client, "manage_memory", content="User likes tea", action="x" * 10_000)
    assert refused.startswith("ValueError: action is over the limit of") and "xxx" not in refused
    assert await Memory.objects.acount() == 0


async def test_leaving_action_out_is_the_default_action(member, langmem_client):  # noqa: F811
    async with langmem_client(member, actions_permitted="update,create", **USER) as client:
        answer = (await client.call_tool("manage_memory", {"content": "User likes tea"})).content[0].text
    assert answer.startswith("created memory ")
    assert await Memory.objects.acount() == 1
