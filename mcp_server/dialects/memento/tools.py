"""The `memento` dialect (the Memento MCP tools spec): store_memory with similar-memory
suggestions, supersede_memory, search_memories, list_recent_memories; plus the
Memento server's own `remember` / `recall` over the same core.

A memento memory is a core fact without a subject/predicate key (never
superseded automatically), in the root namespace. Searches and lists read every
fact of the tenant, whichever dialect wrote it, and move ``accessed_at``.

Glue only: resolve the caller, call one core function, shape the answer."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from django.conf import settings
from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer
from pydantic.json_schema import SkipJsonSchema

from mcp_server.dialect import Dialect, DialectFailure
from memory import api

INSTRUCTIONS = """\
Memento: long-term memory of facts about the user and their situation.

When to store memories (store_memory):
- When users explicitly say "remember that..." or similar (source="explicit").
- When learning new facts about users, preferences, or situations (source="extracted").
- When information updates or changes (e.g., "I moved to...").
- After successful interactions that reveal preferences.

When to search memories (search_memories):
- Before making personalized recommendations.
- When context from past conversations would be helpful.
- When users ask "Do you remember..." or reference past discussions.
- To avoid asking for information already provided.

Handling conflicts:
1. store_memory returns similar memories and, when one may be outdated, an action_required field.
2. Review if the memories truly conflict (e.g., old location vs new location).
3. Call supersede_memory if the old information is now outdated.
4. Otherwise, keep both memories if they're complementary.

Memory content best practices: keep memories atomic (one fact per memory), use clear, specific
language, include relevant context in the content, and be consistent with naming (always "the user"
or always "John").
"""

# The spec's error codes; the codes the core raises map onto them.
CODES = {
    "NOT_FOUND": "MEMORY_NOT_FOUND",
    "INVALID_ARGUMENT": "INVALID_PARAMETER",
    "STORAGE_ERROR": "STORAGE_ERROR",
    "EMBEDDING_ERROR": "EMBEDDING_ERROR",
    "PERMISSION_DENIED": "PERMISSION_DENIED",
    "QUOTA_EXCEEDED": "QUOTA_EXCEEDED",
    "TIMEOUT": "STORAGE_ERROR",
    "INTERNAL": "INTERNAL_ERROR",
}


def render_error(code: str, message: str, details: Mapping[str, Any] | None = None) -> str:
    """The spec's ``{"error": {"code": ..., "message": ...}}`` as the tool error's text
    (exactly those two keys: the spec's shape has no details)."""
    return json.dumps({"error": {"code": CODES.get(code, code), "message": message}})


def render_plain(code: str, message: str, details: Mapping[str, Any] | None = None) -> str:
    """The Memento server's own tools (remember, recall) answer errors as plain sentences."""
    return message[:1].upper() + message[1:]


dialect = Dialect("memento", INSTRUCTIONS, render_error=render_error)

MAX_CONTENT_CHARS = settings.MEMPROJ["MAX_CONTENT_CHARS"]
MAX_QUERY_CHARS = settings.MEMPROJ["MAX_QUERY_CHARS"]
# The Memento server's `remember` limit (4,000 characters).
REMEMBER_MAX_CHARS = 4000
MemoryId = Annotated[str, Field(max_length=100)]


# The specification's optional members (``supersedes?: string``,
# ``relevance_score?: number // Only in search results``): a member with nothing
# to say is left out of the answer, never sent as null, and the outputSchema
# advertises the one type it has when present.
Absent = SkipJsonSchema[None]


def _not_required(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def _without_absent(data: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if not (key in names and value is None)}


class Memory(BaseModel):
    """The Memento spec's Memory object."""

    id: str
    content: str
    confidence: float = Field(description="0-1 score.")
    source: Literal["explicit", "extracted"] = Field(description="explicit or extracted.")
    created_at: datetime
    updated_at: datetime
    accessed_at: datetime = Field(description="When a search or list last returned this memory.")
    supersedes: str | Absent = Field(
        default=None, description="ID of the memory this replaces.", json_schema_extra=_not_required
    )
    superseded_by: str | Absent = Field(
        default=None, description="ID of the memory that replaces this.", json_schema_extra=_not_required
    )
    relevance_score: float | Absent = Field(
        default=None, description="Only in search results.", json_schema_extra=_not_required
    )

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _without_absent(handler(self), ("supersedes", "superseded_by", "relevance_score"))


def _source(stored: str) -> Literal["explicit", "extracted"]:
    """The specification's two sources. Facts other dialects, the worker or an
    import wrote carry no source or their own ("pce", "consolidation",
    "langgraph", ...): none was an explicit "remember", so they read as extracted."""
    return "explicit" if stored == "explicit" else "extracted"


def _records(rows: list[Any], scores: list[float] | None = None) -> list[Memory]:
    replaced = api.memory_supersedes_map(caller=dialect.caller(), memory_ids=[m.id for m in rows])
    out = []
    for index, memory in enumerate(rows):
        view = api.memory_view(memory)
        out.append(
            Memory(
                id=str(memory.id),
                content=memory.content,
                confidence=memory.confidence,
                source=_source(memory.source),
                created_at=memory.created_at,
                updated_at=memory.updated_at,
                accessed_at=view.accessed_at,
                supersedes=str(replaced[memory.id]) if memory.id in replaced else None,
                superseded_by=str(memory.superseded_by_id) if memory.superseded_by_id else None,
                relevance_score=None if scores is None else round(scores[index], 4),
            )
        )
    return out


class StoreResult(BaseModel):
    created: Memory = Field(description="The newly created memory.")
    similar: list[Memory] = Field(description="Existing memories similar to the new one that might be outdated.")
    action_required: str | None = Field(description="The call to make if an old memory is now outdated, else null.")
    # memproj's addition, only when it has something to say.
    note: str | Absent = Field(
        default=None,
        description="Present only when similar memories could not be checked.",
        json_schema_extra=_not_required,
    )

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _without_absent(handler(self), ("note",))


class SupersedeResult(BaseModel):
    success: bool
    message: str


class MemoryList(BaseModel):
    memories: list[Memory]


@dialect.tool(writes=True)
def store_memory(
    content: Annotated[
        str,
        Field(
            max_length=MAX_CONTENT_CHARS,
            description="The fact or information to remember. Should be a clear, standalone statement.",
        ),
    ],
    confidence: Annotated[
        float, Field(ge=0, le=1, description="Confidence score from 0-1. Default 1.0 for explicit facts.")
    ] = 1.0,
    source: Annotated[
        Literal["explicit", "extracted"],
        Field(
            description="Whether user explicitly asked to remember (explicit) or extracted from conversation "
            "(extracted)."
        ),
    ] = "extracted",
) -> StoreResult:
    """Store a new memory. Always succeeds. Returns similar memories that might be outdated. ALWAYS check the response for supersede suggestions."""  # noqa: E501
    acting = dialect.caller()
    memory = api.fact_store(
        caller=acting, subject=None, predicate=None, content=content, confidence=confidence, source=source
    ).memory
    similar = [row for row, _ in api.memory_similar(caller=acting, memory=memory)]
    created = _records([memory])[0]
    note = None
    if memory.embedding is None:
        note = (
            "The embedder is unavailable right now: the memory is stored and keyword-searchable, and gets its "
            "vector shortly; similar memories could not be checked."
        )
    action = None
    if similar:
        action = f'Call supersede_memory("{similar[0].id}", "{memory.id}") to mark the old memory as outdated.'
    return StoreResult(created=created, similar=_records(similar), action_required=action, note=note)


@dialect.tool(writes=True)
def supersede_memory(
    old_memory_id: Annotated[MemoryId, Field(description="ID of the outdated memory")],
    new_memory_id: Annotated[MemoryId, Field(description="ID of the new memory that replaces it")],
) -> SupersedeResult:
    """Mark an old memory as outdated when replaced by newer information. Call this when store_memory suggests it."""
    for value in (old_memory_id, new_memory_id):
        try:
            uuid.UUID(value)
        except ValueError:
            raise dialect.failure("NOT_FOUND", f"Memory with ID {value} not found") from None
    try:
        # A memento memory is a fact: an episode or a rule (stored through another
        # dialect) is not one its reads show, nor one it replaces or is replaced by.
        api.memory_supersede(caller=dialect.caller(), old_id=old_memory_id, new_id=new_memory_id, kinds=["fact"])
    except api.NotFound as exc:
        raise dialect.failure("NOT_FOUND", f"Memory with ID {exc.memory_id} not found") from exc
    return SupersedeResult(success=True, message=f"Memory {old_memory_id} marked as superseded by {new_memory_id}")


@dialect.tool()
def search_memories(
    query: Annotated[str, Field(max_length=MAX_QUERY_CHARS, description="Natural language search query")],
    limit: Annotated[int, Field(ge=1, le=20, description="Maximum number of results to return")] = 5,
) -> MemoryList:
    """Search for relevant memories based on a query. Automatically filters out superseded memories."""
    found = api.memory_search_accessed(
        caller=dialect.caller(), query=api.SearchQuery(query, types=["fact"], limit=limit)
    )
    return MemoryList(memories=_records([i.memory for i in found], [i.score for i in found]))


@dialect.tool()
def list_recent_memories(
    limit: Annotated[int, Field(ge=1, le=50, description="Number of recent memories to return")] = 10,
) -> MemoryList:
    """Get the most recently created memories. Useful for reviewing what was just stored."""
    rows = api.memory_list_recent_accessed(caller=dialect.caller(), kinds=["fact"], limit=limit)
    return MemoryList(memories=_records(rows))


# The Memento server's own tools: plain-text answers and errors, in its words.


@dialect.tool(writes=True, render_error=render_plain)
def remember(
    content: Annotated[str, Field(description="The text to remember (at most 4,000 characters).")],
    confidence: Annotated[float, Field(description="How sure you are, from 0.0 to 1.0.")],
) -> str:
    """Store a memory (the upstream Memento server's tool). Answers with the new memory's id."""
    if not content.strip():
        raise DialectFailure("Memory text cannot be empty.", "INVALID_ARGUMENT")
    if len(content) > REMEMBER_MAX_CHARS:
        raise DialectFailure(
            f"Memory text exceeds maximum length of {REMEMBER_MAX_CHARS} characters (got {len(content)}).",
            "INVALID_ARGUMENT",
        )
    if not 0.0 <= confidence <= 1.0:
        raise DialectFailure(f"Invalid confidence value {confidence}: must be between 0.0 and 1.0.", "INVALID_ARGUMENT")
    memory = api.fact_store(
        caller=dialect.caller(), subject=None, predicate=None, content=content, confidence=confidence
    )
    return f"Memory stored with id: {memory.memory.id}"


@dialect.tool(render_error=render_plain)
def recall(
    query: Annotated[str, Field(max_length=MAX_QUERY_CHARS, description="What to look for.")],
    limit: Annotated[int, Field(le=100, description="Maximum number of results (default 10).")] = 10,
) -> str:
    """Find memories relevant to a query (the upstream Memento server's tool), best first with scores."""
    if not query.strip():
        raise DialectFailure("Query cannot be empty.", "INVALID_ARGUMENT")
    if limit < 1:
        raise DialectFailure("Limit must be at least 1.", "INVALID_ARGUMENT")
    found = api.memory_search_accessed(
        caller=dialect.caller(), query=api.SearchQuery(query, types=["fact"], limit=limit)
    )
    if not found:
        return f'No memories found for "{query}".'
    lines = [f'Found {len(found)} result(s) for "{query}":']
    lines += [f"{n}. (score: {item.score:.3f}) {item.memory.content}" for n, item in enumerate(found, start=1)]
    return "\n".join(lines)
