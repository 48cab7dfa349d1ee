"""The `langmem` dialect (LangMem 0.0.30): ``manage_memory`` and ``search_memory`` as
LangMem's tools behave, with LangMem's per-tool configuration given per
connection (never by the model):

- HTTP: query parameters of the endpoint, e.g.
  ``/mcp/langmem/?namespace=memories,{user_id}&configurable.user_id=u-123``;
- stdio: ``--namespace``, ``--actions-permitted``, ``--instructions``,
  ``--response-format`` and repeatable ``--configurable KEY=VALUE``.

Options: ``namespace`` (template elements, comma-separated), ``actions_permitted``
(comma-separated), ``instructions``, ``response_format`` (``content`` or
``content_and_artifact``) and ``configurable.<key>`` (LangGraph's
``config["configurable"]``).

A LangMem memory is a core fact in its namespace whose key (the memory id) is
the fact's subject: an update supersedes the previous version through the one
supersession mechanism, a delete retracts it. The same mapping backs the
LangGraph store endpoint (routes.py).

Errors read as Python exceptions do: ``ValueError: <upstream message>``,
``ConfigurationError: Missing key in 'configurable' field: ...``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from django.conf import settings
from mcp_types import CallToolResult, TextContent
from mcp_types import Tool as MCPTool
from pydantic import Field

from mcp_server.dialect import Dialect
from mcp_server.dialects.langmem import namespaces as ns
from memory import api

INSTRUCTIONS = """\
Long-term memory as LangMem provides it: manage_memory creates, updates or deletes a memory (pass
the MEMORY ID to update or delete; omit it to create), search_memory finds memories by meaning and
keywords. Memories live in a namespace fixed by whoever configured this connection.
"""

EXCEPTIONS = {
    "INVALID_ARGUMENT": "ValueError",
    "NOT_FOUND": "ValueError",
    "CONFIGURATION_ERROR": "ConfigurationError",
    "PERMISSION_DENIED": "PermissionError",
    # A quota is a limit the tenant reached, like a permission it lacks.
    "QUOTA_EXCEEDED": "PermissionError",
    "TIMEOUT": "TimeoutError",
}


def render_error(code: str, message: str, details: Mapping[str, Any] | None = None) -> str:
    """``<Exception>: <message>``: the exception LangMem raises, by name."""
    return f"{EXCEPTIONS.get(code, 'RuntimeError')}: {message}"


OPTION_NAMES = ("namespace", "actions_permitted", "instructions", "response_format")
# Metadata key marking a value stored whole as JSON (its "content" was not a string).
JSON_VALUE = "_memproj_value"


@dataclass(frozen=True)
class ConnectionConfig:
    namespace: tuple[str, ...] | None
    actions: tuple[str, ...]
    instructions: str
    response_format: str
    configurable: dict[str, str]


def connection_config(options: Mapping[str, str]) -> ConnectionConfig:
    """This connection's LangMem configuration from its options; bad options
    are refused as LangMem refuses them when a tool is created (ValueError)."""
    configurable: dict[str, str] = {}
    for name, value in options.items():
        # A name or value that is not UTF-8 comes as lone surrogates (query
        # options, argv); refused, never replaced (two such user ids were one namespace).
        if not _utf8(name):
            raise api.InvalidArgument("an option name is not UTF-8 text (percent-encode UTF-8).")
        if not _utf8(value):
            raise api.InvalidArgument(f"option {name} is not UTF-8 text (percent-encode UTF-8).")
        if name.startswith("configurable."):
            key = name.removeprefix("configurable.")
            if not key:
                raise api.InvalidArgument("configurable options need a key: configurable.<key>=<value>.")
            configurable[key] = value
        elif name not in OPTION_NAMES:
            raise api.InvalidArgument(
                f"unknown option {name!r}; this endpoint takes {', '.join(OPTION_NAMES)} and configurable.<key>."
            )
    template = None
    if options.get("namespace"):
        # Typed as one comma-separated option (a query parameter, a flag), so
        # spaces around a comma are layout; the labels a template resolves to
        # (configurable values included) are then kept exactly.
        template = tuple(part.strip() for part in options["namespace"].split(","))
        if any(not part for part in template):
            raise api.InvalidArgument("namespace elements must not be empty (e.g. namespace=memories,{user_id}).")
    raw_actions = options.get("actions_permitted")
    actions = ns.ACTIONS if raw_actions is None else tuple(a.strip() for a in raw_actions.split(",") if a.strip())
    try:
        actions = ns.check_actions(actions)
    except ValueError as exc:
        raise api.InvalidArgument(str(exc)) from exc
    response_format = options.get("response_format") or "content"
    if response_format not in ns.RESPONSE_FORMATS:
        raise api.InvalidArgument(f"response_format must be one of {ns.RESPONSE_FORMATS} (got {response_format!r}).")
    return ConnectionConfig(
        namespace=template,
        actions=actions,
        instructions=options.get("instructions", ns.DEFAULT_MANAGE_INSTRUCTIONS),
        response_format=response_format,
        configurable=configurable,
    )


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def adapt_tools(tools: list[MCPTool]) -> list[MCPTool]:
    """Per connection: manage_memory offers only the permitted actions (and
    upstream's default among them), and both descriptions carry the configured
    instructions, as LangMem builds them."""
    config = connection_config(dialect.options())
    out = []
    for tool in tools:
        if tool.name == "manage_memory":
            schema = dict(tool.input_schema)
            properties = dict(schema.get("properties", {}))
            properties["action"] = {
                "type": "string",
                "enum": list(config.actions),
                "default": ns.default_action(config.actions),
                "description": "What to do with the memory.",
            }
            schema["properties"] = properties
            description = ns.manage_description(config.actions, config.instructions)
            tool = tool.model_copy(update={"input_schema": schema, "description": description})
        elif tool.name == "search_memory":
            instructions = dialect.options().get("instructions", "")
            tool = tool.model_copy(update={"description": ns.search_description(instructions)})
        out.append(tool)
    return out


dialect = Dialect(
    "langmem",
    INSTRUCTIONS,
    render_error=render_error,
    adapt_tools=adapt_tools,
    routes="mcp_server.dialects.langmem.routes",
    takes_connection_options=True,
)


def resolve(config: ConnectionConfig) -> tuple[str, ...]:
    try:
        return ns.resolve_namespace(config.namespace, config.configurable)
    except ns.ConfigurationError as exc:
        # BaseException: the dialect's guard would not catch it.
        raise dialect.failure("CONFIGURATION_ERROR", str(exc)) from None


def item_value(memory: Any) -> dict[str, Any]:
    """A fact as a LangGraph item's value: ``{"content": ..., **attributes}``."""
    metadata = dict(memory.metadata or {})
    if metadata.pop(JSON_VALUE, None) == "json":
        # Only this module writes the marker (fact_fields refuses it from a
        # client), but another dialect's metadata may carry it: a content that
        # is not a JSON object is shown as text rather than failing the read.
        try:
            value = json.loads(memory.content)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
    return {"content": memory.content, **metadata}


def fact_fields(value: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A LangGraph item's value as (content, metadata): a string ``content`` is
    the text, the other keys are attributes (``filter`` matches them); any
    other value is kept whole as JSON text, its top-level keys still filterable."""
    if not isinstance(value, Mapping):
        raise api.InvalidArgument('value must be a JSON object, such as {"content": "..."}.')
    if JSON_VALUE in value:
        raise api.InvalidArgument(f"value must not use the key {JSON_VALUE!r}: the store reserves it.")
    attributes = {k: v for k, v in value.items() if k != "content"}
    if isinstance(value.get("content"), str):
        return value["content"], attributes
    return json.dumps(value, ensure_ascii=False, sort_keys=True), {**attributes, JSON_VALUE: "json"}


def item(memory: Any, score: float | None = None, *, with_score: bool = True) -> dict[str, Any]:
    """LangGraph's ``Item.dict()`` (``SearchItem`` with ``score``)."""
    out: dict[str, Any] = {
        "namespace": list(memory.namespace),
        # Facts written by other dialects without a key show their id.
        "key": memory.subject or str(memory.id),
        "value": item_value(memory),
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
    }
    if with_score:
        out["score"] = None if score is None else round(score, 6)
    return out


Content = Annotated[str, Field(max_length=settings.MEMPROJ["MAX_CONTENT_CHARS"])]
# The longest action there is, with room: a longer one is refused before a
# refusal could quote it.
ACTION_MAX_CHARS = 20
# LangMem's action is a Literal of the permitted actions with a default: a
# string, never null. Which strings depends on the connection (adapt_tools
# advertises them); the tool refuses the others in upstream's words, which name
# only the permitted ones.
MANAGE_SCHEMA = {
    "type": "object",
    "properties": {
        "content": {
            "anyOf": [{"type": "string", "maxLength": settings.MEMPROJ["MAX_CONTENT_CHARS"]}, {"type": "null"}],
            "default": None,
            "description": "Content for a new or updated memory.",
        },
        "action": {"type": "string", "maxLength": ACTION_MAX_CHARS, "description": "What to do with the memory."},
        "id": {
            "anyOf": [{"type": "string", "maxLength": 100}, {"type": "null"}],
            "default": None,
            "description": "MEMORY ID of an existing memory (update or delete).",
        },
    },
}


@dialect.tool(writes=True, input_schema=MANAGE_SCHEMA)
def manage_memory(content: Content | None = None, action: str | None = None, id: str | None = None) -> str:
    """Create, update, or delete a memory to persist across conversations."""
    config = connection_config(dialect.options())
    chosen = ns.default_action(config.actions) if action is None else action
    try:
        ns.check_manage_call(chosen, config.actions, id)
    except ValueError as exc:
        raise dialect.failure("INVALID_ARGUMENT", str(exc)) from None
    key = str(uuid.uuid4())
    if id is not None:
        try:
            key = str(uuid.UUID(id))
        except ValueError:
            raise dialect.failure("INVALID_ARGUMENT", f"id must be a UUID (got {id!r}).") from None
    namespace = resolve(config)
    acting = dialect.caller()
    if chosen == "delete":
        api.fact_retract_by_key(caller=acting, namespace=namespace, subject=key)
        return f"Deleted memory {key}"
    if content is None:
        raise dialect.failure("INVALID_ARGUMENT", f"content is required to {chosen} a memory.")
    # Like upstream's store.put: updating an id nobody holds creates it.
    api.fact_store(caller=acting, subject=key, predicate=None, namespace=namespace, content=content)
    return f"{chosen}d memory {key}"


@dialect.tool()
def search_memory(
    query: Annotated[str, Field(max_length=settings.MEMPROJ["MAX_QUERY_CHARS"], description="Search query.")],
    limit: Annotated[int, Field(ge=1, le=settings.MEMPROJ["MAX_LIMIT"], description="Maximum results.")] = 10,
    offset: Annotated[int, Field(ge=0, le=10_000, description="Results to skip.")] = 0,
    filter: Annotated[
        dict[str, Any] | None,
        Field(
            description='Match stored attributes, e.g. {"category": "preference"}, {"profile": {"tone": "warm"}} '
            'or {"score": {"$gte": 3}} (operators: $eq, $ne, $gt, $gte, $lt, $lte).'
        ),
    ] = None,
) -> CallToolResult:
    """Search your long-term memories for information relevant to your current context."""
    config = connection_config(dialect.options())
    namespace = resolve(config)
    found = api.memory_search_accessed(
        caller=dialect.caller(),
        query=api.SearchQuery(
            query, types=["fact"], limit=limit, offset=offset, namespace_prefix=namespace, attributes=filter
        ),
    )
    items = [item(i.memory, i.score) for i in found]
    text = TextContent(type="text", text=json.dumps(items, ensure_ascii=False, separators=(",", ":")))
    if config.response_format == "content_and_artifact":
        return CallToolResult(content=[text], structured_content={"result": items})
    return CallToolResult(content=[text])
