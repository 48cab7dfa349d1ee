"""The Python API for LangGraph users against a live memproj (uvicorn on
loopback): MemprojStore as a LangGraph BaseStore, the real `langmem` package
running unchanged on it inside a LangGraph react agent driven by a scripted
fake chat model, and memproj's own create_*_tool functions."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import httpx
import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from mcp_server.dialects.langmem.client import (
    ConfigurationError,
    MemprojStore,
    create_manage_memory_tool,
    create_search_memory_tool,
)
from memory.models import Memory
from tests.mcp_server.test_transports import ROOT, http_server  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


class ScriptedChatModel(GenericFakeChatModel):
    """langchain-core's fake chat model, replaying scripted AI messages (tool
    calls included); binding tools changes nothing in a script."""

    def bind_tools(self, tools, **kwargs):  # type: ignore[no-untyped-def]
        return self


def tool_call(name: str, call_id: str, **args) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


def test_client_module_imports_without_django():
    code = "import sys, mcp_server.dialects.langmem.client; assert 'django' not in sys.modules, 'django imported'"
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()


def test_real_langmem_agent_runs_on_memproj(http_server, member):  # noqa: F811
    import langmem
    from langgraph.prebuilt import create_react_agent

    store = MemprojStore(url=http_server, token=member.token)
    tools = [
        langmem.create_manage_memory_tool(namespace=("memories", "{user_id}"), store=store),
        langmem.create_search_memory_tool(namespace=("memories", "{user_id}"), store=store),
    ]
    model = ScriptedChatModel(
        messages=iter(
            [
                tool_call("manage_memory", "call-1", content="User prefers dark mode", action="create"),
                tool_call("search_memory", "call-2", query="display preferences"),
                AIMessage(content="Noted: you prefer dark mode."),
            ]
        )
    )
    agent = create_react_agent(model, tools=tools)
    config: RunnableConfig = {"configurable": {"user_id": "u-123"}}
    state = agent.invoke({"messages": [HumanMessage("Remember that I prefer dark mode")]}, config=config)

    replies = [m.content for m in state["messages"] if isinstance(m, ToolMessage)]
    assert isinstance(replies[0], str) and isinstance(replies[1], str), replies
    assert replies[0].startswith("created memory ")
    key = replies[0].removeprefix("created memory ")
    found = json.loads(replies[1])
    assert [(f["namespace"], f["key"], f["value"]) for f in found] == [
        (["memories", "u-123"], key, {"content": "User prefers dark mode"})
    ]
    assert state["messages"][-1].content == "Noted: you prefer dark mode."
    row = Memory.objects.get(subject=key)
    assert (row.kind, row.namespace, row.validity) == ("fact", ["memories", "u-123"], "active")
    assert row.tenant_id == member.caller.tenant_id and row.principal_id == member.caller.principal_id

    # The real langmem update and delete go through the same store.
    manage = tools[0]
    assert manage.invoke({"content": "User prefers light mode", "action": "update", "id": key}, config) == (
        f"updated memory {key}"
    )
    updated = store.get(("memories", "u-123"), key)
    assert updated is not None and updated.value == {"content": "User prefers light mode"}
    assert manage.invoke({"action": "delete", "id": key}, config) == f"Deleted memory {key}"
    assert store.get(("memories", "u-123"), key) is None


def test_memproj_store_is_a_langgraph_base_store(http_server, member, outsider):  # noqa: F811
    store = MemprojStore(url=http_server, token=member.token)
    store.put(("docs", "u1"), "profile", {"content": "Alice is a vegetarian", "category": "preference"})
    store.put(("docs", "u1"), "trip", {"content": "Alice flies to Tokyo in May", "category": "travel"})
    store.put(("docs", "u2"), "profile", {"content": {"name": "Bob", "age": 41}})

    item = store.get(("docs", "u1"), "profile")
    assert item is not None and item.value == {"content": "Alice is a vegetarian", "category": "preference"}
    bob = store.get(("docs", "u2"), "profile")
    assert bob is not None and bob.value == {"content": {"name": "Bob", "age": 41}}
    assert store.get(("docs", "u1"), "missing") is None

    hits = store.search(("docs", "u1"), query="what does Alice eat")
    assert hits[0].key == "profile" and hits[0].score is not None
    # Both of Alice's items match "Alice"; the filter keeps the travel one.
    assert [h.key for h in store.search(("docs",), query="Alice", filter={"category": "travel"})] == ["trip"]
    # A hit needs evidence: the travel item has nothing to do with food, so it is not returned.
    assert store.search(("docs",), query="food", filter={"category": "travel"}) == []
    assert {(tuple(h.namespace), h.key) for h in store.search(("docs",))} == {
        (("docs", "u1"), "profile"),
        (("docs", "u1"), "trip"),
        (("docs", "u2"), "profile"),
    }
    assert store.list_namespaces(prefix=("docs",)) == [("docs", "u1"), ("docs", "u2")]
    assert store.list_namespaces(suffix=("u2",)) == [("docs", "u2")]
    assert store.list_namespaces(max_depth=1) == [("docs",)]

    store.put(("docs", "u1"), "profile", {"content": "Alice eats fish now", "category": "preference"})
    replaced = store.get(("docs", "u1"), "profile")
    assert replaced is not None and replaced.value["content"] == "Alice eats fish now"
    store.delete(("docs", "u1"), "trip")
    assert store.get(("docs", "u1"), "trip") is None
    assert [h.key for h in store.search(("docs", "u1"), filter={"category": {"$ne": "travel"}})] == ["profile"]
    with pytest.raises(ValueError, match="Unsupported operator: [$]in"):
        store.search(("docs",), query="x", filter={"category": {"$in": ["travel"]}})

    # Another tenant's token: the same namespaces and keys are empty, and its writes stay its own.
    other = MemprojStore(url=http_server, token=outsider.token)
    assert other.get(("docs", "u1"), "profile") is None
    assert other.search(("docs",), query="Alice") == []
    assert other.list_namespaces() == []
    other.delete(("docs", "u1"), "profile")
    assert store.get(("docs", "u1"), "profile") is not None

    response = httpx.post(f"{http_server}/api/langmem/store/", json={"ops": [{"op": "get"}]}, timeout=30)
    assert response.status_code == 401


def test_memproj_tool_functions_follow_seed_001(http_server, member):  # noqa: F811
    manage = create_manage_memory_tool(url=http_server, token=member.token, actions_permitted=("create", "update"))
    search = create_search_memory_tool(
        url=http_server, token=member.token, response_format="content_and_artifact", instructions="Look first."
    )
    user: RunnableConfig = {"configurable": {"user_id": "u-123"}}
    org: RunnableConfig = {"configurable": {"org_id": "acme", "agent_id": "alpha"}}

    created = manage.invoke({"content": "User likes green tea"}, user)
    key = created.removeprefix("created memory ")
    assert uuid.UUID(key)
    manage.invoke({"content": "Team deploys on Fridays"}, org)
    assert Memory.objects.get(subject=key).namespace == ["user", "u-123"]
    assert Memory.objects.get(content="Team deploys on Fridays").namespace == ["org", "acme", "alpha"]

    assert manage.func is not None
    with pytest.raises(ValueError, match="Invalid action delete"):
        manage.func(action="delete", id=uuid.UUID(key))
    with pytest.raises(ValueError, match="You must provide a MEMORY ID"):
        manage.func(content="x", action="update")
    with pytest.raises(ConfigurationError, match=r"Missing key in 'configurable' field: user_id. Available keys: \[\]"):
        manage.invoke({"content": "no config"}, {"configurable": {}})
    with pytest.raises(ValueError, match="actions_permitted cannot be empty"):
        create_manage_memory_tool(url=http_server, token=member.token, actions_permitted=())
    assert "delete" not in manage.description and manage.description.startswith("Create or update a memory")

    templated = create_manage_memory_tool(("{user_id}", "memories"), url=http_server, token=member.token)
    other_key = templated.invoke({"content": "Templated"}, user).removeprefix("created memory ")
    assert Memory.objects.get(subject=other_key).namespace == ["u-123", "memories"]

    message = search.invoke({"type": "tool_call", "id": "c1", "name": "search_memory", "args": {"query": "tea"}}, user)
    serialized = json.loads(message.content)
    assert serialized[0]["key"] == key
    assert [m.key for m in message.artifact] == [key]
    assert search.description.endswith("Look first.")
