"""LangMem on memproj, for LangGraph users (LangMem 0.0.30's Python API).

Importable without Django or a database: it talks to a running memproj over
HTTP with an API token. Needs ``langchain-core`` and ``langgraph`` (not the
service's dependencies: install them where your agent runs).

- ``MemprojStore(url=..., token=...)``: a LangGraph ``BaseStore`` backed by
  memproj, so the real ``langmem`` package runs unchanged::

      import langmem
      store = MemprojStore(url="http://127.0.0.1:8000", token="mp_...")
      tool = langmem.create_manage_memory_tool(namespace=("memories", "{user_id}"), store=store)

- ``create_manage_memory_tool`` / ``create_search_memory_tool``: LangChain tools
  with LangMem's behaviour (its ValueErrors and ConfigurationError, the
  namespace resolved from the runnable config's ``configurable``), and
  memproj's automatic namespaces when none is given: ``{"user_id": "u-123"}`` ->
  ``("user", "u-123")``, ``{"org_id": "acme", "agent_id": "alpha"}`` ->
  ``("org", "acme", "alpha")``.
"""

import typing
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

import httpx
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool
from langgraph.config import get_config, get_store
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from mcp_server.dialects.langmem.namespaces import (
    ACTIONS,
    DEFAULT_MANAGE_INSTRUCTIONS,
    ConfigurationError,
    check_actions,
    check_manage_call,
    default_action,
    manage_description,
    resolve_namespace,
    search_description,
)

__all__ = [
    "ConfigurationError",
    "MemprojStore",
    "MemprojStoreError",
    "create_manage_memory_tool",
    "create_search_memory_tool",
]

STORE_PATH = "/api/langmem/store/"


class MemprojStoreError(RuntimeError):
    """memproj refused or could not do a store operation (its code and message)."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status


def _op_json(op: Op) -> dict[str, Any]:
    if isinstance(op, GetOp):
        return {"op": "get", "namespace": list(op.namespace), "key": op.key}
    if isinstance(op, PutOp):
        value = None if op.value is None else dict(op.value)
        return {"op": "put", "namespace": list(op.namespace), "key": op.key, "value": value}
    if isinstance(op, SearchOp):
        return {
            "op": "search",
            "namespace_prefix": list(op.namespace_prefix),
            "query": op.query,
            "filter": op.filter,
            "limit": op.limit,
            "offset": op.offset,
        }
    if isinstance(op, ListNamespacesOp):
        prefix = suffix = None
        for condition in op.match_conditions or ():
            if condition.match_type == "prefix":
                prefix = list(condition.path)
            elif condition.match_type == "suffix":
                suffix = list(condition.path)
        return {
            "op": "list_namespaces",
            "prefix": prefix,
            "suffix": suffix,
            "max_depth": op.max_depth,
            "limit": op.limit,
            "offset": op.offset,
        }
    raise ValueError(f"unsupported store operation {type(op).__name__}")


def _item(data: dict[str, Any], *, scored: bool) -> Item:
    fields: dict[str, Any] = dict(
        namespace=tuple(data["namespace"]),
        key=data["key"],
        value=data["value"],
        created_at=datetime.fromisoformat(data["created_at"]),
        updated_at=datetime.fromisoformat(data["updated_at"]),
    )
    if scored:
        return SearchItem(**fields, score=data.get("score"))
    return Item(**fields)


def _result(op: Op, data: Any) -> Result:
    if isinstance(op, GetOp):
        return None if data is None else _item(data, scored=False)
    if isinstance(op, SearchOp):
        return [typing.cast(SearchItem, _item(d, scored=True)) for d in data]
    if isinstance(op, ListNamespacesOp):
        return [tuple(n) for n in data]
    return None


class MemprojStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items live in memproj: each item is a
    fact in its namespace, found by memproj's hybrid search (vector + keyword)
    and by every memproj dialect that reads facts. ``filter`` matches value
    attributes as PostgresStore does (equality, ``$eq``, ``$ne``, ``$gt``,
    ``$gte``, ``$lt``, ``$lte``), and nested objects as InMemoryStore does;
    TTLs are not supported."""

    supports_ttl = False

    def __init__(self, *, url: str, token: str, timeout: float = 120.0) -> None:
        self.url = url.rstrip("/") + STORE_PATH
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = timeout

    def _decode(self, ops: Sequence[Op], response: httpx.Response) -> list[Result]:
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code != 200:
            error = body.get("error", {}) if isinstance(body, dict) else {}
            code, message = error.get("code", "HTTP_ERROR"), error.get("message", response.text[:200])
            if code == "INVALID_ARGUMENT":
                raise ValueError(message)
            raise MemprojStoreError(code, message, response.status_code)
        return [_result(op, data) for op, data in zip(ops, body["results"], strict=True)]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if not ops:
            return []
        payload = {"ops": [_op_json(op) for op in ops]}
        response = httpx.post(self.url, json=payload, headers=self._headers, timeout=self._timeout)
        return self._decode(ops, response)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if not ops:
            return []
        payload = {"ops": [_op_json(op) for op in ops]}
        async with httpx.AsyncClient(timeout=self._timeout) as client:
            response = await client.post(self.url, json=payload, headers=self._headers)
        return self._decode(ops, response)


def _configurable(config: RunnableConfig | None) -> dict[str, Any]:
    if config is None:
        try:
            config = get_config()
        except RuntimeError:
            config = {}
    return dict(config.get("configurable") or {})


class _Namespace:
    """A namespace template (LangMem's, or None for memproj's automatic one)
    resolved against the runnable config at call time."""

    def __init__(self, template: tuple[str, ...] | str | None) -> None:
        self.template = (template,) if isinstance(template, str) else template

    def __call__(self, config: RunnableConfig | None = None) -> tuple[str, ...]:
        return resolve_namespace(self.template, _configurable(config))


def _store(store: BaseStore | None, url: str | None, token: str | None) -> BaseStore:
    if store is not None:
        return store
    if url is not None and token is not None:
        return MemprojStore(url=url, token=token)
    try:
        return get_store()
    except RuntimeError as exc:
        raise ConfigurationError("Could not get store") from exc


def create_manage_memory_tool(
    namespace: tuple[str, ...] | str | None = None,
    *,
    instructions: str = DEFAULT_MANAGE_INSTRUCTIONS,
    actions_permitted: Sequence[str] = ACTIONS,
    store: BaseStore | None = None,
    url: str | None = None,
    token: str | None = None,
    name: str = "manage_memory",
) -> StructuredTool:
    """LangMem's manage_memory on memproj. Give ``store`` (e.g. a
    ``MemprojStore``), or ``url`` and ``token``, or run inside a LangGraph graph
    compiled with a store. ``namespace=None`` uses memproj's automatic
    ``("user", user_id)`` / ``("org", org_id, agent_id)``."""
    actions = check_actions(actions_permitted)
    namespacer = _Namespace(namespace)
    fixed_store = store if store is not None else (MemprojStore(url=url, token=token) if url and token else None)
    action_type = Literal[actions]  # type: ignore[valid-type]

    def _plan(action: str, id: uuid.UUID | None) -> tuple[BaseStore, tuple[str, ...]]:
        check_manage_call(action, actions, id)
        return _store(fixed_store, None, None), namespacer()

    def manage_memory(
        content: str | None = None,
        action: action_type = default_action(actions),  # type: ignore[valid-type]
        *,
        id: uuid.UUID | None = None,
    ) -> str:
        target, ns = _plan(action, id)
        if action == "delete":
            target.delete(ns, key=str(id))
            return f"Deleted memory {id}"
        key = id or uuid.uuid4()
        target.put(ns, key=str(key), value={"content": content})
        return f"{action}d memory {key}"

    async def amanage_memory(
        content: str | None = None,
        action: action_type = default_action(actions),  # type: ignore[valid-type]
        *,
        id: uuid.UUID | None = None,
    ) -> str:
        target, ns = _plan(action, id)
        if action == "delete":
            await target.adelete(ns, key=str(id))
            return f"Deleted memory {id}"
        key = id or uuid.uuid4()
        await target.aput(ns, key=str(key), value={"content": content})
        return f"{action}d memory {key}"

    return StructuredTool.from_function(
        manage_memory, amanage_memory, name=name, description=manage_description(actions, instructions)
    )


def create_search_memory_tool(
    namespace: tuple[str, ...] | str | None = None,
    *,
    instructions: str = "",
    store: BaseStore | None = None,
    url: str | None = None,
    token: str | None = None,
    response_format: Literal["content", "content_and_artifact"] = "content",
    name: str = "search_memory",
) -> StructuredTool:
    """LangMem's search_memory on memproj: hybrid search in the namespace,
    answered as LangMem's JSON list (and the raw items with
    ``response_format="content_and_artifact"``)."""
    import json

    namespacer = _Namespace(namespace)
    fixed_store = store if store is not None else (MemprojStore(url=url, token=token) if url and token else None)

    def _answer(memories: list[SearchItem]) -> Any:
        text = json.dumps([m.dict() for m in memories], default=str)
        return (text, memories) if response_format == "content_and_artifact" else text

    def search_memory(query: str, *, limit: int = 10, offset: int = 0, filter: dict | None = None) -> Any:
        target, ns = _store(fixed_store, None, None), namespacer()
        return _answer(target.search(ns, query=query, filter=filter, limit=limit, offset=offset))

    async def asearch_memory(query: str, *, limit: int = 10, offset: int = 0, filter: dict | None = None) -> Any:
        target, ns = _store(fixed_store, None, None), namespacer()
        return _answer(await target.asearch(ns, query=query, filter=filter, limit=limit, offset=offset))

    return StructuredTool.from_function(
        search_memory,
        asearch_memory,
        name=name,
        description=search_description(instructions),
        response_format=response_format,
    )
