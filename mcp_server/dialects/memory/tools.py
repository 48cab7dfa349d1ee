"""The `memory` dialect (the butlers memory module's tools): episodes, facts and rules.

Glue only: resolve the caller, call one service or selector, shape the answer."""

from datetime import datetime
from typing import Annotated, Any, Literal

from django.conf import settings
from pydantic import BaseModel, Field

from mcp_server.dialect import Dialect, bracketed
from memory import api

INSTRUCTIONS = """\
Long-term memory with three kinds of record:
- episode: something that happened in a session (expires after 7 days unless consolidated);
- fact: a durable subject/predicate statement ("user" / "favorite_color" = "blue"); storing a new
  fact for the same subject+predicate supersedes the old one automatically;
- rule: a behavioural guideline that starts as a candidate and matures with helpful/harmful feedback.
Start a task with memory_context or memory_recall; store what you learn as you go; mark rules
helpful or harmful after applying them.
"""

# Errors read `[CODE] message` (CODE: INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED,
# EMBEDDING_ERROR, STORAGE_ERROR, INTERNAL; CONFLICT for an idempotency key reused with other arguments).
HTTP_STATUS = {
    "INVALID_ARGUMENT": 422,
    "NOT_FOUND": 404,
    "PERMISSION_DENIED": 403,
    "CONFLICT": 409,
    "RATE_LIMIT": 429,
    "QUOTA_EXCEEDED": 403,  # a tenant quota of the policy (quotas.*): retrying does not help
}


def http_status(text: str) -> int:
    """The plain HTTP surface's status for a `[CODE] message` error."""
    code = text[1 : text.find("]")] if text.startswith("[") else ""
    return HTTP_STATUS.get(code, 503 if code in ("STORAGE_ERROR", "EMBEDDING_ERROR") else 500)


dialect = Dialect("memory", INSTRUCTIONS, render_error=bracketed, http_status=http_status)
# The butlers memory module names these arguments memory_type / memory_id.
BUTLERS_ALIASES = {"memory_type": "type", "memory_id": "id"}

LIMITS = settings.MEMPROJ
MemoryType = Literal["episode", "fact", "rule"]
Content = Annotated[str, Field(max_length=LIMITS["MAX_CONTENT_CHARS"])]
Query = Annotated[str, Field(max_length=LIMITS["MAX_QUERY_CHARS"])]
Label = Annotated[str, Field(max_length=100)]
Key = Annotated[str, Field(max_length=200)]
Tags = Annotated[
    list[Annotated[str, Field(max_length=LIMITS["MAX_TAG_CHARS"])]] | None,
    Field(description="Optional labels.", max_length=LIMITS["MAX_TAGS"]),
]
MemoryId = Annotated[str, Field(description="The memory's UUID.", max_length=100)]


class ConflictRef(BaseModel):
    id: str
    kind: str = Field(description="duplicate or contradiction")
    other_memory_id: str
    similarity: float | None
    reason: str


class MemoryRecord(BaseModel):
    type: str
    id: str
    content: str
    scope: str
    tags: list[str]
    importance: float
    validity: str
    created_at: datetime
    updated_at: datetime
    reference_count: int
    embedding_status: str
    butler: str | None = None
    session_id: str | None = None
    expires_at: datetime | None = None
    subject: str | None = None
    predicate: str | None = None
    confidence: float | None = None
    effective_confidence: float | None = None
    permanence: str | None = None
    decay_rate: float | None = None
    last_confirmed_at: datetime | None = None
    superseded_by: str | None = None
    fact_state: str | None = Field(default=None, description="active, fading or expired by effective confidence.")
    maturity: str | None = None
    success_count: int | None = None
    harmful_count: int | None = None
    applied_count: int | None = None
    effectiveness_score: float | None = None
    last_applied_at: datetime | None = None
    open_conflicts: list[ConflictRef] = Field(
        default_factory=list,
        description="Likely duplicates/contradictions found in the background; supersede or forget one of the pair.",
    )


def record(memory: Any, conflicts: list[api.OpenConflict] | None = None) -> MemoryRecord:
    view = api.memory_view(memory)
    base: dict[str, Any] = dict(
        type=memory.kind,
        id=str(memory.id),
        content=memory.content,
        scope=memory.scope,
        tags=list(memory.tags),
        importance=memory.importance,
        validity=memory.validity,
        created_at=memory.created_at,
        updated_at=memory.updated_at,
        reference_count=memory.reference_count,
        embedding_status=memory.embedding_status,
    )
    if memory.kind == "episode":
        base.update(butler=memory.butler, session_id=memory.session_id or None, expires_at=memory.expires_at)
    else:
        base.update(
            confidence=memory.confidence,
            effective_confidence=view.effective_confidence,
            permanence=memory.permanence,
            decay_rate=memory.decay_rate,
            last_confirmed_at=memory.last_confirmed_at,
        )
    if memory.kind == "fact":
        base.update(
            subject=memory.subject,
            predicate=memory.predicate,
            superseded_by=str(memory.superseded_by_id) if memory.superseded_by_id else None,
            fact_state=view.fact_state,
        )
    if memory.kind == "rule":
        base.update(
            maturity=memory.maturity,
            success_count=memory.success_count,
            harmful_count=memory.harmful_count,
            applied_count=memory.applied_count,
            effectiveness_score=view.effectiveness,
            last_applied_at=memory.last_applied_at,
        )
    base["open_conflicts"] = [
        ConflictRef(
            id=str(c.id),
            kind=c.kind,
            other_memory_id=str(c.other_memory_id),
            similarity=c.similarity,
            reason=c.reason,
        )
        for c in conflicts or []
    ]
    return MemoryRecord(**base)


class StoredEpisode(BaseModel):
    id: str
    type: Literal["episode"] = "episode"
    importance: float
    expires_at: datetime
    embedding_status: str = Field(description="'ready', or 'pending' if the vector will be added by a worker.")


class StoredFact(BaseModel):
    id: str
    type: Literal["fact"] = "fact"
    superseded_ids: list[str] = Field(description="Facts with the same subject+predicate that this one replaced.")
    decay_rate: float
    embedding_status: str


class StoredRule(BaseModel):
    id: str
    type: Literal["rule"] = "rule"
    maturity: str
    confidence: float
    embedding_status: str


class ScoredResult(BaseModel):
    type: str
    id: str
    content: str
    score: float
    confidence: float | None
    scope: str
    created_at: datetime
    subject: str | None = None
    predicate: str | None = None
    maturity: str | None = None


class ResultList(BaseModel):
    results: list[ScoredResult]
    count: int


def scored(item: api.ScoredMemory) -> ScoredResult:
    memory = item.memory
    return ScoredResult(
        type=memory.kind,
        id=str(memory.id),
        content=memory.content,
        score=round(item.score, 6),
        confidence=None if item.effective_confidence is None else round(item.effective_confidence, 6),
        scope=memory.scope,
        created_at=memory.created_at,
        subject=memory.subject or None,
        predicate=memory.predicate or None,
        maturity=memory.maturity or None,
    )


def results(items: list[api.ScoredMemory]) -> ResultList:
    return ResultList(results=[scored(i) for i in items], count=len(items))


class ForgetResult(BaseModel):
    id: str
    type: str
    validity: str


class ContextResult(BaseModel):
    text: str
    token_count: int
    token_budget: int
    sections: dict[str, list[str]] = Field(description="Ids included per section, in order.")
    omitted: int = Field(description="Candidates left out to stay within the budget.")


class Stats(BaseModel):
    scope: str | None
    facts: dict[str, int]
    rules: dict[str, int]
    episodes: dict[str, Any]
    pending_embeddings: int
    open_conflicts: int = Field(description="Conflict candidates waiting for review (memory_get shows each pair).")


@dialect.tool(writes=True)
def memory_store_episode(
    content: Annotated[Content, Field(description="What happened, as a self-contained sentence or short paragraph.")],
    butler: Annotated[Label, Field(description="The agent/butler recording it, e.g. 'general' or 'health'.")],
    session_id: Annotated[Key | None, Field(description="Conversation or session id, if any.")] = None,
    importance: Annotated[
        float, Field(ge=0, le=10, description="0-10; 5 is ordinary, 9+ is critical (e.g. an allergy).")
    ] = 5.0,
) -> StoredEpisode:
    """Record an episode: an observation from the current session. Episodes expire after the
    configured TTL (7 days by default) unless consolidation turns them into facts or rules.
    Use memory_store_fact instead for durable knowledge about a subject."""
    memory = api.episode_store(
        caller=dialect.caller(), content=content, butler=butler, session_id=session_id, importance=importance
    )
    assert memory.expires_at is not None
    return StoredEpisode(
        id=str(memory.id),
        importance=memory.importance,
        expires_at=memory.expires_at,
        embedding_status=memory.embedding_status,
    )


@dialect.tool(writes=True)
def memory_store_fact(
    subject: Annotated[Key, Field(description="Who or what the fact is about, e.g. 'user'.")],
    predicate: Annotated[Key, Field(description="The attribute, e.g. 'favorite_color'.")],
    content: Annotated[Content, Field(description="The fact itself, e.g. 'blue' or a full sentence.")],
    importance: Annotated[float, Field(ge=0, le=10, description="0-10, default 5.")] = 5.0,
    permanence: Annotated[
        Literal["permanent", "stable", "standard", "volatile", "ephemeral"],
        Field(description="How fast confidence decays: permanent never decays; ephemeral fades in days."),
    ] = "standard",
    scope: Annotated[Label, Field(description="'global' or a butler scope such as 'health'.")] = "global",
    tags: Tags = None,
) -> StoredFact:
    """Store a durable fact. If an active fact with the same subject and predicate exists it is
    superseded (kept for audit, no longer retrieved) and its id is returned in superseded_ids."""
    result = api.fact_store(
        caller=dialect.caller(),
        subject=subject,
        predicate=predicate,
        content=content,
        importance=importance,
        permanence=permanence,
        scope=scope,
        tags=tags,
    )
    return StoredFact(
        id=str(result.memory.id),
        superseded_ids=[str(i) for i in result.superseded_ids],
        decay_rate=result.memory.decay_rate,
        embedding_status=result.memory.embedding_status,
    )


@dialect.tool(writes=True)
def memory_store_rule(
    content: Annotated[Content, Field(description="The guideline, phrased as an instruction.")],
    scope: Annotated[Label, Field(description="'global' or a butler scope.")] = "global",
    tags: Tags = None,
) -> StoredRule:
    """Store a behavioural rule. New rules are candidates (confidence 0.5); they become
    established and proven as memory_mark_helpful accumulates, and are demoted or turned into
    anti-patterns by memory_mark_harmful."""
    memory = api.rule_store(caller=dialect.caller(), content=content, scope=scope, tags=tags)
    return StoredRule(
        id=str(memory.id),
        maturity=memory.maturity,
        confidence=memory.confidence,
        embedding_status=memory.embedding_status,
    )


@dialect.tool()
def memory_search(
    query: Annotated[Query, Field(description="Natural-language query.")],
    types: Annotated[list[MemoryType] | None, Field(description="Kinds to search; default all three.")] = None,
    scope: Annotated[Label | None, Field(description="Restrict to this scope plus 'global'.")] = None,
    mode: Annotated[
        Literal["hybrid", "semantic", "keyword"],
        Field(description="hybrid (vector + keyword, default), semantic (vector) or keyword."),
    ] = "hybrid",
    limit: Annotated[int, Field(ge=1, le=LIMITS["MAX_LIMIT"], description="1-100, default 20.")] = 20,
    min_confidence: Annotated[
        float | None, Field(ge=0, le=1, description="Drop facts/rules whose effective confidence is below this (0-1).")
    ] = None,
) -> ResultList:
    """Search episodes, facts and rules. Returns scored results (type, id, content, score,
    confidence) best first. Superseded, retracted and expired memories are never returned."""
    return results(
        api.memory_search(
            caller=dialect.caller(),
            query=api.SearchQuery(
                query, types=types, scope=scope, mode=mode, limit=limit, min_confidence=min_confidence
            ),
        )
    )


@dialect.tool()
def memory_recall(
    topic: Annotated[Query, Field(description="What you need to know about, e.g. 'user dietary needs'.")],
    scope: Annotated[Label | None, Field(description="Your butler scope; 'global' is always included.")] = None,
    limit: Annotated[int, Field(ge=1, le=LIMITS["MAX_LIMIT"], description="1-100, default 10.")] = 10,
) -> ResultList:
    """The primary way to remember: facts and rules (not episodes) ranked by a composite of
    relevance, importance, recency and effective confidence. Counts as a reference for each
    result returned."""
    return results(api.memory_recall(caller=dialect.caller(), topic=topic, scope=scope, limit=limit))


@dialect.tool(aliases=BUTLERS_ALIASES)
def memory_get(
    type: Annotated[MemoryType, Field(description="episode, fact or rule.")],
    id: MemoryId,
) -> MemoryRecord:
    """Fetch one memory's full record by type and id (counts as a reference), including any
    open conflicts the background check found with other memories."""
    acting = dialect.caller()
    memory = api.memory_get(caller=acting, kind=type, memory_id=id)
    return record(memory, api.conflicts_open_for(caller=acting, memory_id=memory.id))


@dialect.tool(aliases=BUTLERS_ALIASES, writes=True)
def memory_confirm(
    type: Annotated[MemoryType, Field(description="fact or rule; episodes have no decay to reset.")],
    id: MemoryId,
) -> MemoryRecord:
    """Confirm a fact or rule is still true: resets its decay clock so its effective confidence
    returns to its stored confidence."""
    return record(api.memory_confirm(caller=dialect.caller(), kind=type, memory_id=id))


@dialect.tool(writes=True)
def memory_mark_helpful(
    rule_id: Annotated[str, Field(description="The rule's UUID.", max_length=100)],
) -> MemoryRecord:
    """Report that applying a rule helped. Increments success and applied counts, recomputes
    effectiveness and may promote the rule (candidate -> established -> proven)."""
    return record(
        api.memory_feedback(caller=dialect.caller(), memory_id=rule_id, signal="helpful", kinds=["rule"]).memory
    )


@dialect.tool(writes=True)
def memory_mark_harmful(
    rule_id: Annotated[str, Field(description="The rule's UUID.", max_length=100)],
    reason: Annotated[str | None, Field(description="What went wrong.", max_length=2000)] = None,
) -> MemoryRecord:
    """Report that applying a rule caused harm. Harm weighs 4x in effectiveness
    (success / (success + 4 x harmful + 0.01)); the rule may be demoted or become an anti-pattern."""
    outcome = api.memory_feedback(
        caller=dialect.caller(), memory_id=rule_id, signal="harmful", kinds=["rule"], reason=reason
    )
    return record(outcome.memory)


@dialect.tool(aliases=BUTLERS_ALIASES, writes=True)
def memory_forget(
    type: Annotated[MemoryType, Field(description="episode, fact or rule.")],
    id: MemoryId,
) -> ForgetResult:
    """Forget a memory: it is retracted (kept for audit and review, never retrieved again)."""
    memory = api.memory_forget(caller=dialect.caller(), kind=type, memory_id=id)
    return ForgetResult(id=str(memory.id), type=memory.kind, validity=memory.validity)


@dialect.tool()
def memory_stats(
    scope: Annotated[Label | None, Field(description="Count only this scope plus 'global'.")] = None,
) -> Stats:
    """Counts and health: facts (total/active/fading/expired), rules (total/candidate/
    established/proven), episodes (total/unconsolidated/expired) and the episode backlog age."""
    return Stats(**api.memory_stats(caller=dialect.caller(), scope=scope))


@dialect.tool()
def memory_context(
    trigger_prompt: Annotated[Query, Field(description="The user's request you are about to work on.")],
    butler: Annotated[Label, Field(description="Your butler name; selects scoped facts, rules and episodes.")],
    token_budget: Annotated[
        int, Field(ge=32, le=100_000, description="Maximum tokens (cl100k_base) of the block.")
    ] = 3000,
    section_quotas: Annotated[
        dict[str, float] | None,
        Field(description="Optional shares of the budget for 'facts', 'rules', 'episodes'."),
    ] = None,
) -> ContextResult:
    """Build a memory block to put in your system prompt: facts, rules and recent episodes
    relevant to the prompt, highest-scored first, never more than token_budget tokens."""
    block = api.build_context(
        caller=dialect.caller(),
        trigger_prompt=trigger_prompt,
        butler=butler,
        token_budget=token_budget,
        quotas=section_quotas,
    )
    return ContextResult(
        text=block.text,
        token_count=block.token_count,
        token_budget=block.token_budget,
        sections={k: [str(i.memory.id) for i in v] for k, v in block.included.items()},
        omitted=block.omitted,
    )
