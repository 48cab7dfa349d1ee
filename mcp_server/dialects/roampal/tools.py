"""The `roampal` dialect: roampal v0.3.5's MCP tools over the core.

Glue only: the collections, lifecycle, ranking, ids and outcome counters are
the core's (memory.api); roampal's words are in texts.py. The hook server
(routes.py) answers ``/api/search`` through ``find``, the path search_memory
takes."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from django.utils import timezone
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from mcp_server.dialect import Dialect
from mcp_server.dialects.roampal.texts import (
    ADD_TO_MEMORY_BANK,
    DELETE_MEMORY,
    GET_CONTEXT_INSIGHTS,
    INSTRUCTIONS,
    RECORD_RESPONSE,
    SCORE_MEMORIES,
    SCORE_RESPONSE,
    SEARCH_MEMORY,
    SELF_AUDIT,
    UPDATE_MEMORY,
    context_line,
    memory_text,
    result_line,
    shape,
)
from memory import api


def render_error(code: str, message: str, details: Mapping[str, Any] | None = None) -> str:
    """Roampal's tools answer text; an error is a line the model can act on."""
    return f"Error: {message}"


dialect = Dialect("roampal", INSTRUCTIONS, render_error=render_error, routes="mcp_server.dialects.roampal.routes")

Outcome = Literal["worked", "failed", "partial", "unknown"]
CollectionName = Literal["books", "working", "history", "patterns", "memory_bank"]
MAX_SCORES = 50
# Keys a metadata filter may set (search_memory's metadata, /api/search's
# metadata_filters): each is a condition the read builds in this process and the
# database tests, and within the filter's JSON size limit a client could name
# thousands of fields, which every search by time or meaning built and ran.
MAX_METADATA_KEYS = 20
# When get_context_insights adds the SELF-AUDIT prompt: the context holds this
# many memory_bank items (roampal v0.3.5 leaves the trigger to the server).
SELF_AUDIT_MIN_FACTS = 3

# --- Shapes -------------------------------------------------------------------------------------


class MemoryShape(BaseModel):
    """roampal v0.3.5's normalized memory (importance/confidence on memory_bank only;
    embedding_similarity/final_rank_score only from a semantic search)."""

    id: str
    collection: str
    content: str
    created_at: str
    age: str
    score: float
    wilson_score: float
    uses: int
    success_count: float
    learned_score: float
    last_outcome: str
    outcome_history: str
    tags: list[str]
    importance: float | None = None
    confidence: float | None = None
    embedding_similarity: float | None = None
    final_rank_score: float | None = None
    effectiveness: float | None = None
    metadata: dict[str, Any]


class SearchResult(BaseModel):
    count: int
    results: list[MemoryShape]


class ContextResult(BaseModel):
    query: str
    user_facts: list[MemoryShape]
    relevant_memories: list[MemoryShape]
    self_audit: bool


class ScoreResult(BaseModel):
    # Optional: _result drops None, and a required field missing from the
    # structured content failed the SDK's output check (an internal error).
    outcome: str | None = None
    updated: int
    scored: dict[str, str] = Field(description="memory id -> outcome applied")
    skipped: list[str] = Field(
        description="ids not found, books (not scored), or naming a memory another id of this call scored"
    )
    exchange_id: str | None = Field(default=None, description="the previous exchange the outcome was applied to")
    stored: list[str] = Field(default_factory=list, description="ids stored from exchange_summary / facts")


class StoredResult(BaseModel):
    id: str
    collection: str
    content: str


class DeletedResult(BaseModel):
    id: str
    deleted: bool


def self_audit_due(context: api.KnownContext) -> bool:
    """When get_context_insights asks the model to review the memory_bank items it shows."""
    return len(context.user_facts) >= SELF_AUDIT_MIN_FACTS


def _result(text: str, structured: BaseModel) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured.model_dump(mode="json", exclude_none=True),
    )


# --- Tools ----------------------------------------------------------------------------------------

Query = Annotated[str, Field(max_length=2000)]
MemoryId = Annotated[str, Field(max_length=200)]
Tag = Annotated[str, Field(max_length=64)]


@dialect.tool(description=GET_CONTEXT_INSIGHTS)
def get_context_insights(
    query: Annotated[
        str, Field(max_length=2000, description="Query/topic you're considering (use user's exact words)")
    ],
) -> Annotated[CallToolResult, ContextResult]:
    if not query.strip():
        # roampal v0.3.5 answers an empty query so, rather than the always-injected facts alone.
        raise dialect.failure("INVALID_ARGUMENT", "'query' is required")
    caller = dialect.caller()
    now = timezone.now()
    context = api.known_context(caller=caller, query=query)
    audit = self_audit_due(context)
    sections = [f"Known Context for '{query}':"]
    if context.user_facts:
        sections.append("User facts (memory_bank):\n" + "\n".join(context_line(h, now) for h in context.user_facts))
    if context.relevant:
        sections.append("Relevant memories:\n" + "\n".join(context_line(h, now) for h in context.relevant))
    if not (context.user_facts or context.relevant):
        sections.append("No memories found for this topic yet.")
    if audit:
        sections.append(SELF_AUDIT)
    structured = ContextResult(
        query=query,
        user_facts=[MemoryShape(**shape(h, now)) for h in context.user_facts],
        relevant_memories=[MemoryShape(**shape(h, now)) for h in context.relevant],
        self_audit=audit,
    )
    return _result("\n\n".join(sections), structured)


def find(
    caller: api.Caller,
    *,
    query: str | None,
    days_back: int | None,
    id: str | None,
    collections: Sequence[str] | None,
    metadata: Mapping[str, Any] | None,
    sort_by: str | None,
    limit: int,
    now: datetime,
) -> list[api.CollectionHit]:
    """What search_memory and the hook server's ``/api/search`` find: a direct
    lookup by id (which takes priority over query and days_back, as in roampal
    v0.3.5; an unknown id finds nothing), else a search by meaning, by time, or
    both. A blank query is no query; with neither, the call is refused."""
    if isinstance(metadata, Mapping) and len(metadata) > MAX_METADATA_KEYS:
        # The words of search_memory's schema (maxProperties), so both surfaces say the same.
        raise api.InvalidArgument(f"metadata allows at most {MAX_METADATA_KEYS} entries.")
    query = query if query and query.strip() else None
    if id:
        return api.collection_lookup(caller=caller, memory_id=id)
    if query is None and days_back is None:
        raise api.InvalidArgument("Provide at least one of: query, days_back")
    return api.collection_search(
        caller=caller,
        query=query,
        collections=collections,
        days_back=days_back,
        sort_by=sort_by,
        limit=limit,
        metadata=metadata,
        now=now,
    )


@dialect.tool(description=SEARCH_MEMORY)
def search_memory(
    query: Annotated[
        str | None,
        Field(
            max_length=2000,
            description="Search query - use the users EXACT words/phrases, do NOT simplify or extract keywords",
        ),
    ] = None,
    days_back: Annotated[
        int | None,
        Field(
            ge=1,
            le=365,
            description="Only return memories from the last N days. Can be used alone (no query needed) or "
            "combined with a semantic query.",
        ),
    ] = None,
    id: Annotated[
        str | None,
        Field(
            max_length=200,
            description="Look up a specific memory by its doc_id (e.g., 'patterns_abc123'). Returns the full "
            "memory with all metadata. Bypasses semantic search.",
        ),
    ] = None,
    collections: Annotated[
        list[CollectionName] | None,
        Field(
            max_length=5,
            description="Which collections to search. Omit for auto-routing (recommended). Manual: books, working, "
            "history, patterns, memory_bank",
        ),
    ] = None,
    metadata: Annotated[
        dict[str, Any] | None,
        Field(
            max_length=MAX_METADATA_KEYS,
            description='Optional filters. created_at and last_used take a day ("2025-11-12"), an ISO '
            'date-time, or a range ({"$gte": "2025-02-01T00:00:00"}; also $gt, $lte, $lt); other keys equal a '
            'stored metadata value, e.g. {"title": "..."}.',
        ),
    ] = None,
    sort_by: Annotated[
        Literal["relevance", "recency", "score"] | None,
        Field(description="relevance (default with a query), recency (default without), or score."),
    ] = None,
    limit: Annotated[int, Field(ge=1, le=20, description="Number of results (1-20)")] = 5,
) -> Annotated[CallToolResult, SearchResult]:
    now = timezone.now()
    hits = find(
        dialect.caller(),
        query=query,
        days_back=days_back,
        id=id,
        collections=collections,
        metadata=metadata,
        sort_by=sort_by,
        limit=limit,
        now=now,
    )
    if not hits:
        text = "No memories found."
    else:
        text = f"Found {len(hits)} memories:\n\n" + "\n".join(result_line(n, h, now) for n, h in enumerate(hits, 1))
    return _result(text, SearchResult(count=len(hits), results=[MemoryShape(**shape(h, now)) for h in hits]))


def _apply_scores(memory_scores: Mapping[str, str] | None) -> tuple[dict[str, str], list[str], set[uuid.UUID]]:
    """Each named memory's outcome, once: several ids can name one memory (the
    prefix it had when a scoring prompt listed it and the one it shows now
    after a promotion, its UUID), and a second outcome would count a second
    use. The first id given wins; the others are skipped. Also returns the
    memories scored."""
    caller = dialect.caller()
    scored: dict[str, str] = {}
    skipped: list[str] = []
    applied: set[uuid.UUID] = set()
    found = api.collection_ids(caller, list(memory_scores or {}))
    for given, outcome in (memory_scores or {}).items():
        memory = found.get(given)
        done = None if memory is None else api.collection_score(caller, given, memory, outcome, already=applied)
        if done is None:
            skipped.append(given)
            continue
        scored[given] = outcome
        applied.add(done)
    return scored, skipped, applied


def _score_exchange(outcome: str | None, already: Iterable[uuid.UUID]) -> tuple[str | None, int]:
    """The outcome of the previous exchange applies to its stored working memory,
    and to the parts that continue it when the exchange was longer than one
    memory holds (each once; not to one the model scored itself, under any of
    its ids). Returns the exchange's memory id and how many memories the
    outcome updated."""
    caller = dialect.caller()
    previous = api.exchange_mark_scored(caller=caller)
    if previous is None or previous.memory_id is None or outcome is None:
        return None, 0
    found = api.collection_ids(caller, [str(previous.memory_id)])
    memory = found.get(str(previous.memory_id))
    if memory is None:
        return None, 0
    parts = api.collection_ids(caller, api.exchange_part_ids(memory))
    named = set(already)
    updated = 0
    for given, each in [(str(previous.memory_id), memory), *parts.items()]:
        if api.collection_score(caller, given, each, outcome, already=named) is not None:
            updated += 1
    return api.display_id(memory), updated


ScoreMap = Annotated[
    dict[Annotated[str, Field(max_length=200)], Outcome] | None,
    Field(
        max_length=MAX_SCORES,
        description="Score for each memory: doc_id -> outcome. MUST include all cached memories. MAY include extras "
        "from context.",
    ),
]


@dialect.tool(description=SCORE_RESPONSE, writes=True)
def score_response(
    outcome: Annotated[Outcome, Field(description="Exchange outcome based on user's reaction")],
    memory_scores: ScoreMap = None,
) -> Annotated[CallToolResult, ScoreResult]:
    scored, skipped, applied = _apply_scores(memory_scores)
    exchange, exchange_updated = _score_exchange(outcome, applied)
    updated = len(scored) + exchange_updated
    return _result(
        f"Scored (outcome={outcome}, {updated} memories updated)",
        ScoreResult(outcome=outcome, updated=updated, scored=scored, skipped=skipped, exchange_id=exchange),
    )


@dialect.tool(description=SCORE_MEMORIES, writes=True)
def score_memories(
    memory_scores: ScoreMap,
    exchange_summary: Annotated[str | None, Field(max_length=2000)] = None,
    exchange_outcome: Outcome | None = None,
    noun_tags: Annotated[list[Tag] | None, Field(max_length=20)] = None,
    facts: Annotated[list[Annotated[str, Field(max_length=2000)]] | None, Field(max_length=10)] = None,
) -> Annotated[CallToolResult, ScoreResult]:
    caller = dialect.caller()
    scored, skipped, applied = _apply_scores(memory_scores)
    exchange, exchange_updated = _score_exchange(exchange_outcome, applied)
    stored: list[str] = []
    if exchange_summary and exchange_summary.strip():
        summary = api.working_store(caller=caller, content=exchange_summary, tags=noun_tags)
        stored.append(api.display_id(summary))
    for fact in facts or []:
        if fact.strip():
            stored.append(api.display_id(api.memory_bank_store(caller=caller, content=fact)))
    updated = len(scored) + exchange_updated
    text = f"Scored ({updated} memories updated)"
    if stored:
        text += f"; stored {', '.join(stored)}"
    return _result(
        text,
        ScoreResult(
            outcome=exchange_outcome,
            updated=updated,
            scored=scored,
            skipped=skipped,
            exchange_id=exchange,
            stored=stored,
        ),
    )


@dialect.tool(description=RECORD_RESPONSE, writes=True)
def record_response(
    key_takeaway: Annotated[
        str, Field(min_length=1, max_length=2000, description="1-2 sentence summary of the important learning")
    ],
) -> Annotated[CallToolResult, StoredResult]:
    memory = api.takeaway_store(caller=dialect.caller(), takeaway=key_takeaway)
    return _result(
        f"Recorded: {key_takeaway}",
        StoredResult(id=api.display_id(memory), collection="working", content=memory.content),
    )


@dialect.tool(description=ADD_TO_MEMORY_BANK, writes=True)
def add_to_memory_bank(
    content: Annotated[str, Field(min_length=1, max_length=2000, description="The fact to remember")],
    tags: Annotated[
        list[Tag] | None,
        Field(
            max_length=20,
            description="Categories: identity, preference, goal, project, system_mastery, agent_growth",
        ),
    ] = None,
    importance: Annotated[float, Field(ge=0, le=1, description="How critical (0.0-1.0)")] = 0.7,
    confidence: Annotated[float, Field(ge=0, le=1, description="How certain (0.0-1.0)")] = 0.7,
    always_inject: Annotated[
        bool, Field(description="If true, this memory appears in EVERY context (use for core identity only)")
    ] = False,
) -> Annotated[CallToolResult, StoredResult]:
    memory = api.memory_bank_store(
        caller=dialect.caller(),
        content=content,
        tags=tags,
        importance=importance,
        confidence=confidence,
        always_inject=always_inject,
    )
    ident = api.display_id(memory)
    return _result(
        f"Added to memory bank (ID: {ident})", StoredResult(id=ident, collection="memory_bank", content=memory.content)
    )


def _by_content(content: str) -> Any:
    """The memory_bank entry a text names, by meaning (upstream matches this way)."""
    hits = api.collection_search(caller=dialect.caller(), query=content, collections=["memory_bank"], limit=1)
    if hits and (
        content.strip() in (hits[0].memory.content.strip(), memory_text(hits[0].memory).strip())
        or (hits[0].similarity or 0) >= MATCH_SIMILARITY
    ):
        return hits[0].memory
    raise api.NotFound("no memory_bank entry matches that content; search_memory to find its id.")


MATCH_SIMILARITY = 0.6


# Newer upstream clients call update_memory(id=..., content=...).
@dialect.tool(description=UPDATE_MEMORY, aliases={"content": "new_content"}, writes=True)
def update_memory(
    new_content: Annotated[str, Field(min_length=1, max_length=2000, description="Corrected/updated fact")],
    old_content: Annotated[str | None, Field(max_length=2000, description="Old/incorrect fact to find")] = None,
    id: Annotated[str | None, Field(max_length=200, description="The id of the memory to replace.")] = None,
) -> Annotated[CallToolResult, StoredResult]:
    caller = dialect.caller()
    if id:
        target = api.collection_get(caller, id)
    elif old_content and old_content.strip():
        target = _by_content(old_content)
    else:
        raise dialect.failure("INVALID_ARGUMENT", "Provide id or old_content to name the memory to update.")
    # The core keeps the old text as a superseded version; the id stays (upstream
    # updates in place), so the answer names the memory by the id it already had.
    _, new = api.memory_bank_update(caller=caller, memory_id=target.id, content=new_content)
    ident = api.display_id(new)
    return _result(
        f"Updated memory (ID: {ident})",
        StoredResult(id=ident, collection="memory_bank", content=memory_text(new)),
    )


@dialect.tool(description=DELETE_MEMORY, writes=True)
def delete_memory(
    content: Annotated[str | None, Field(max_length=2000, description="Memory to delete (semantic match)")] = None,
    id: Annotated[str | None, Field(max_length=200, description="The id of the memory to delete.")] = None,
) -> Annotated[CallToolResult, DeletedResult]:
    caller = dialect.caller()
    if id:
        target = api.collection_get(caller, id)
    elif content and content.strip():
        target = _by_content(content)
    else:
        raise dialect.failure("INVALID_ARGUMENT", "Provide id or content to name the memory to delete.")
    # Forgotten by its current version, looked up again under the write lock
    # (an update committing since the lookup above has replaced target), by the
    # id the client sent: a delete that lost a race to another answers not
    # found naming that id, as a delete of a missing memory does.
    forgotten = api.collection_forget(caller=caller, memory_id=id or api.display_id(target))
    ident = api.display_id(forgotten)
    return _result(f"Deleted memory (ID: {ident})", DeletedResult(id=ident, deleted=True))
