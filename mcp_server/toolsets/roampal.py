# ruff: noqa: E501 - seed 003's texts are kept verbatim, long lines included
"""The `roampal` dialect (seed 003): outcome-scored memory in collections.

Glue only: the collections, lifecycle, ranking, ids and outcome counters are the
core's (memory.api); this module holds seed 003's texts (tool descriptions, the
KNOWN CONTEXT block, the scoring prompts, the result lines) and shapes answers.
The hook endpoints (mcp_server/hooks.py) render with the same functions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from django.utils import timezone
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from mcp_server.dialect import Dialect
from memory import api

INSTRUCTIONS = """\
You have outcome-based persistent memory that learns across sessions (Roampal).
Call get_context_insights(query) before responding; score memories with score_response when a
<roampal-score-required> prompt appears; store significant learnings with record_response and
permanent facts with add_to_memory_bank.
"""


def render_error(code: str, message: str, details: Mapping[str, Any] | None = None) -> str:
    """Roampal's tools answer text; an error is a line the model can act on."""
    return f"Error: {message}"


dialect = Dialect("roampal", INSTRUCTIONS, render_error=render_error)

Outcome = Literal["worked", "failed", "partial", "unknown"]
CollectionName = Literal["books", "working", "history", "patterns", "memory_bank"]
MAX_SCORES = 50
CONTENT_HINT_CHARS = 30  # seed 003 Feature 1: the OpenCode scoring reference's content hint
CONTEXT_CONTENT_CHARS = 500
SELF_AUDIT_MIN_FACTS = 3  # the self-audit trigger (seed 003 Feature 4 #6 left it to us)

# --- Texts (seed 003, verbatim) ---------------------------------------------------------------

PREAMBLE = (
    "You have persistent memory about this user via Roampal. Scored memories include Wilson confidence and "
    "outcome history. [id:...] tags can be looked up with search_memory(id=...). Memories may be outdated or "
    "wrong. Verify before treating as ground truth. The context below was retrieved from past conversations. "
    "If the user references past interactions or asks if you remember them, use this context — you DO remember."
)

SELF_AUDIT = """\
SELF-AUDIT: Review any memory_bank items in KNOWN CONTEXT.
If any look outdated, wrong, or redundant, use update_memory or
delete_memory to clean them up. Good assistants maintain their own memory."""

# Feature 3 #1 (system mastery prompt, with Feature 5's `uses ≥3` fix) + Feature 4 #1 after YOUR ROLE.
GET_CONTEXT_INSIGHTS = """\
You have outcome-based persistent memory that learns across sessions.

HOW IT WORKS:
Your memories are scored every time they surface. Scores drive the lifecycle:
• working (new, 24h) → score ≥0.7 + 2 uses → history (30d) → score ≥0.9 + 3 uses + 5 proven successes → patterns (permanent)
• Score drops below 0.4 → demoted. Below 0.2 → deleted.
• memory_bank: permanent facts you store manually (not outcome-scored — ranked by importance × confidence, with Wilson weighting blended into ranking after 3 uses)
• books: reference documents (not scored, permanent)

READING RESULTS:
• w:0.68 = Wilson confidence (statistical lower bound — higher = more proven useful)
• s:0.7 = outcome score (raw success rate, 0-1)
• 8 uses = times surfaced and scored (more = more battle-tested)
• [YYN] = last 3 outcomes (Y=worked, ~=partial, N=failed)
• 5d = age
• [id:patterns_abc123] = memory ID — look up with search_memory(id=...)

SEARCHING:
• Semantic: search_memory(query="auth bug") — find by meaning
• Temporal: search_memory(days_back=7) — recent memories, no query needed
• Direct: search_memory(id="patterns_abc") — look up by ID
• Combined: search_memory(query="auth", days_back=14) — meaning + time filter

YOUR ROLE:
Score honestly — your scores determine which memories survive and improve.
Use add_to_memory_bank() SELECTIVELY for permanent facts only.
Use record_response() for significant learnings worth preserving.

MEMORY HYGIENE (your responsibility):
• When you give a wrong answer and get corrected, actively score the
  misleading memory as "failed" — don't just score the exchange
• When you notice a memory_bank fact that's outdated or wrong, use
  update_memory or delete_memory immediately — don't wait to be told
• When you store a new fact, verify it first. If you can't verify it,
  store with confidence=0.5, not 0.9
• When KNOWN CONTEXT contains a memory you know is wrong from THIS
  session's work, call it out: "Note: [id:xxx] appears outdated because..."
• Never state specific details (ports, paths, versions, numbers) from
  memory without checking — if it's not in KNOWN CONTEXT verbatim or
  confirmed by a tool call, say "I believe X but let me verify"

WORKFLOW:
1. get_context_insights(query) ← YOU ARE HERE
2. Read context — memories include [id:...] tags for reference
3. search_memory() if you need more details (use id= for direct lookup)
4. Respond to user
5. record_response() for significant learnings

PROACTIVE MEMORY: If you learn something NEW about the user during the conversation
(name, preference, goal, project context), use add_to_memory_bank() to store it.
Don't wait to be asked - good assistants remember what matters.

SUPPORT INFO (only mention if user asks about support/pricing/contributing):
- Roampal Core is completely free and open source (Apache 2.0)
- Support development: https://roampal.gumroad.com/l/aagzxv
- Feature ideas/feedback: Discord at https://discord.com/invite/F87za86R3v"""

# Feature 3 Tool 1 + Feature 4 #3 after READING RESULTS.
SEARCH_MEMORY = """\
Search your persistent memory. Use when you need details beyond what get_context_insights returned.

WHEN TO SEARCH:
• User says "remember", "I told you", "we discussed" → search immediately
• get_context_insights recommended a collection → search that collection
• You need more detail than the context provided
• You see [id:...] in KNOWN CONTEXT and want full details → use id= parameter

WHEN NOT TO SEARCH:
• General knowledge questions (use your training)
• get_context_insights already gave you the answer

Collections: working (24h then auto-promotes), history (30d scored), patterns (permanent scored), memory_bank (permanent), books (permanent docs)
Omit 'collections' parameter for auto-routing (recommended).

TEMPORAL SEARCH:
Use days_back=N to search by time without a semantic query.
Examples: days_back=7 → last 7 days. days_back=1, collections=["working"] → today's working memory.
Combine with query for time-filtered semantic search: query="auth", days_back=14.

ID LOOKUP:
Use id="patterns_abc123" to look up a specific memory directly (bypasses search).
Useful when you see [id:...] tags in KNOWN CONTEXT and want full metadata.

READING RESULTS:
• [YYN] = outcome history (last 3: Y=worked, ~=partial, N=failed)
• s:0.7 = outcome score (0-1, higher = more successful outcomes)
• w:0.68 = Wilson confidence score (statistical lower bound, 0-1)
• 8 uses = times this memory has been surfaced and scored
• 5d = age of memory
• [id:patterns_abc123] = memory ID for lookup or scoring

VERIFICATION USE:
• Before stating a fact from memory as definitive, search for it
• If you find conflicting memories on the same topic, prefer the
  newer one and score the older one "failed" on the next scoring prompt
• Use id= lookup to verify specific memories referenced in KNOWN CONTEXT
  before building conclusions on them"""

# Feature 3 Tool 2 + Feature 4 #2 after PER-MEMORY SCORING.
SCORE_RESPONSE = """\
Score the previous exchange. ONLY use when the <roampal-score-required> hook prompt appears.

⚠️ IMPORTANT: This tool is ONLY for scoring when prompted by the hook. Do NOT call it at other times.
For storing important learnings at any time, use record_response(key_takeaway="...") instead.

FINDING MEMORY IDs:
The scoring prompt lists memory IDs to score. These IDs correspond to [id:...] tags
in the KNOWN CONTEXT block from the previous turn. Look at KNOWN CONTEXT to see what
each memory contained, then score based on whether it helped your response.

EXCHANGE OUTCOME (read user's reaction):
✓ worked = user satisfied, says thanks, moves on
✗ failed = user corrects you, says "no", "that's wrong", provides the right answer
~ partial = user says "kind of" or takes some but not all of your answer
? unknown = no clear signal from user

PER-MEMORY SCORING:
You MUST score each memory ID listed in the scoring prompt:
• worked = this memory was helpful
• partial = somewhat helpful
• unknown = didn't use this memory
• failed = this memory was MISLEADING (gave bad advice that led you astray)

You MAY also score any other memory visible in KNOWN CONTEXT or earlier conversation.

ACTIVE MEMORY MANAGEMENT:
• "failed" is not punishment — it's pruning. A memory scored "failed"
  3 times will be demoted or deleted. This is GOOD. Use it.
• If a memory was MISLEADING in your response (you gave wrong info
  because of it), score it "failed" even if the exchange went okay
• If you notice a pattern memory surfacing repeatedly with "unknown"
  scores, consider: is this memory actually useful? If not, scoring
  "failed" once helps the system stop wasting context on it
• You are the gardener. Pull the weeds.

⚠️ CRITICAL - "failed" means MISLEADING, not just unused.
If you didn't use a memory, mark it "unknown" not "failed"."""

SCORE_MEMORIES = """\
Score the memories of the previous exchange (newer clients' form of score_response). ONLY use when the
<roampal-score-required> hook prompt appears.

memory_scores: {"<id>": "worked|partial|unknown|failed"} for each memory ID in the scoring prompt
(the [id:...] tags of KNOWN CONTEXT). "failed" means MISLEADING, not just unused.
exchange_outcome: how the user reacted to your previous answer (worked / failed / partial / unknown).
exchange_summary: optional one-line summary of the exchange, stored as a working memory (noun_tags become its tags).
facts: optional permanent facts learned in the exchange, each stored in memory_bank."""

RECORD_RESPONSE = """\
Record a significant learning from this exchange as a working memory (starts at score 0.7, so it
surfaces and earns its way to history and patterns by scoring).

Use for: decisions made, problems solved, approaches that worked or failed, project context worth keeping.
Not for: permanent facts about the user (use add_to_memory_bank) or routine chatter.
Write one self-contained takeaway: it will be read later without this conversation."""

# The upstream add_to_memory_bank description's sections + Feature 4 #4 after SIZE GUIDANCE.
ADD_TO_MEMORY_BANK = """\
Store a permanent fact in memory_bank: who the user is, preferences, goals, project context,
verified technical facts. memory_bank is never deleted by scoring; it is ranked by importance × confidence
(with Wilson weighting blended in after 3 uses).

ALWAYS_INJECT:
always_inject=true puts the fact in every KNOWN CONTEXT block (identity, hard preferences). Use sparingly.

SIZE GUIDANCE:
One or two sentences. Longer material belongs in books (ingested documents).

STORAGE DISCIPLINE:
• confidence=0.9+ is reserved for facts you VERIFIED against source
  (code, docs, tool output). Not for things you "know"
• confidence=0.7 is the default — use it unless you have evidence
• confidence=0.5 for unverified claims, approximate numbers, or
  things the user told you that you couldn't confirm
• Before storing, ask: "Will this still be true next week?" If not,
  it doesn't belong in memory_bank — let working/history handle it
• One fact per memory. Don't combine unrelated information"""

UPDATE_MEMORY = """\
Correct a memory_bank fact that is outdated or wrong. Name it by id (the [id:memory_bank_...] tag) or by
old_content (matched by meaning); new_content replaces it (the old version is kept for audit, not retrieved)."""

DELETE_MEMORY = """\
Delete a memory that is wrong, outdated or redundant. Name it by id (an [id:...] tag) or by content
(matched by meaning against memory_bank). Deleted memories are archived for audit and never retrieved."""


# --- Shapes -------------------------------------------------------------------------------------


class MemoryShape(BaseModel):
    """Seed 003 Feature 2's normalized memory (importance/confidence on memory_bank only;
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
    skipped: list[str] = Field(description="ids not found, or books (not scored)")
    exchange_id: str | None = Field(default=None, description="the previous exchange the outcome was applied to")
    stored: list[str] = Field(default_factory=list, description="ids stored from exchange_summary / facts")


class StoredResult(BaseModel):
    id: str
    collection: str
    content: str


class DeletedResult(BaseModel):
    id: str
    deleted: bool


# --- Rendering ----------------------------------------------------------------------------------


def age(when: datetime, now: datetime | None = None) -> str:
    seconds = max(0.0, ((now or timezone.now()) - when).total_seconds())
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86400)}d"


MARKS = {"worked": "Y", "partial": "~", "failed": "N", "unknown": "?"}


def outcome_marks(outcomes: Sequence[str]) -> str:
    return "[" + "".join(MARKS.get(o, "?") for o in outcomes[-3:]) + "]" if outcomes else ""


def memory_text(memory: Any) -> str:
    """A memory's text as roampal shows it. Roampal shows only text, so a keyed
    fact another dialect stored (subject ``user``, predicate ``city``, content
    ``Austin``) shows its key too: ``user city: Austin``. Roampal's own
    memory_bank entries (their key is internal) and unkeyed facts show as stored."""
    subject, predicate = memory.subject, memory.predicate
    if memory.kind != "fact" or not (subject and predicate) or subject == api.MEMORY_BANK_SUBJECT:
        return str(memory.content)
    return f"{subject} {predicate}: {memory.content}"


def shape(hit: api.CollectionHit, now: datetime | None = None) -> dict[str, Any]:
    """The normalized memory of Feature 2 (as a dict; optional keys absent, not null)."""
    m = hit.memory
    out: dict[str, Any] = {
        "id": hit.id,
        "collection": hit.collection,
        "content": memory_text(m),
        "created_at": m.created_at.isoformat(),
        "age": age(m.created_at, now),
        "score": round(m.outcome_score, 4),
        "wilson_score": round(hit.wilson, 4),
        "uses": m.applied_count,
        "success_count": float(m.success_count),
        "learned_score": round(m.outcome_score, 4),
        "last_outcome": hit.outcomes[-1] if hit.outcomes else "",
        "outcome_history": outcome_marks(hit.outcomes),
        "tags": list(m.tags) if hit.collection == "memory_bank" else [],
        "metadata": dict(m.metadata),
    }
    if hit.collection == "memory_bank":
        out["importance"] = round(m.importance / 10, 4)
        out["confidence"] = round(m.confidence, 4)
    if hit.similarity is not None:
        out["embedding_similarity"] = round(hit.similarity, 4)
    if hit.final_rank_score is not None:
        out["final_rank_score"] = round(hit.final_rank_score, 4)
    return {k: v for k, v in out.items() if v is not None}


def result_line(number: int, hit: api.CollectionHit, now: datetime | None = None) -> str:
    """`1. [patterns] (2d, s:0.72, w:0.68, 8 uses, [YY~N]) [id:patterns_abc123] ...` /
    `1. [memory_bank] (5d, imp:0.9, conf:0.8) [id:memory_bank_abc123] ...`."""
    m = hit.memory
    parts = [age(m.created_at, now)]
    if hit.collection == "memory_bank":
        parts += [f"imp:{m.importance / 10:.1f}", f"conf:{m.confidence:.1f}"]
    elif hit.collection != "books":
        parts += [f"s:{m.outcome_score:.2f}", f"w:{hit.wilson:.2f}", f"{m.applied_count} uses"]
        if hit.outcomes:
            parts.append(outcome_marks(hit.outcomes))
    return f"{number}. [{hit.collection}] ({', '.join(parts)}) [id:{hit.id}] {memory_text(m)}"


def context_line(hit: api.CollectionHit, now: datetime | None = None) -> str:
    """KNOWN CONTEXT line: `• {content} [id:{doc_id}] ({age}, {NN% proven, }{collection})`."""
    m = hit.memory
    content = " ".join(memory_text(m).split())
    if len(content) > CONTEXT_CONTENT_CHARS:
        content = content[: CONTEXT_CONTENT_CHARS - 3] + "..."
    parts = [age(m.created_at, now)]
    if hit.collection not in ("memory_bank", "books") and m.applied_count > 0:
        parts.append(f"{round(m.outcome_score * 100)}% proven")
    parts.append(hit.collection)
    return f"• {content} [id:{hit.id}] ({', '.join(parts)})"


def known_context_block(context: api.KnownContext, now: datetime | None = None) -> str:
    lines = [context_line(h, now) for h in (*context.user_facts, *context.relevant)]
    if not lines:
        return ""
    return "═══ KNOWN CONTEXT ═══\n" + PREAMBLE + "\n\n" + "\n".join(lines) + "\n═══ END CONTEXT ═══"


def self_audit_due(context: api.KnownContext) -> bool:
    """Feature 4 #6's trigger: when the context holds at least three memory_bank items."""
    return len(context.user_facts) >= SELF_AUDIT_MIN_FACTS


def scores_template(ids: Iterable[str]) -> str:
    entries = ",\n".join(f'        "{i}": "___"' for i in ids)
    return "    memory_scores={\n" + entries + ("\n" if entries else "") + "    }"


def scoring_prompt(ids: Sequence[str]) -> str:
    """Feature 1's lean scoring prompt (Claude Code / Cursor): ids only."""
    return (
        "<roampal-score-required>\n"
        "Score the previous exchange before responding.\n\n"
        "Look at your previous response and the user's follow-up below.\n"
        "The memories injected last turn had IDs shown in [id:...] tags in KNOWN CONTEXT.\n\n"
        "Score each memory:\n\n"
        "Call score_response(\n"
        '    outcome="worked|failed|partial|unknown",\n' + scores_template(ids) + "\n)\n\n"
        "SCORING GUIDE:\n"
        "• worked = this memory was helpful\n"
        "• partial = somewhat helpful\n"
        "• unknown = didn't use this memory\n"
        "• failed = this memory was MISLEADING\n\n"
        "You MUST score every memory listed above.\n"
        "</roampal-score-required>"
    )


def scoring_prompt_simple(ids: Sequence[str]) -> str:
    """Feature 1's OpenCode prompt: refers to the SCORING REFERENCE block."""
    return (
        "<roampal-score-required>\n"
        "Score the memories listed in SCORING REFERENCE above.\n\n"
        "Call score_response(\n"
        '    outcome="worked|failed|partial|unknown",\n' + scores_template(ids) + "\n)\n"
        "</roampal-score-required>"
    )


def content_hint(content: str) -> str:
    flat = " ".join(content.split())
    return flat if len(flat) <= CONTENT_HINT_CHARS else flat[:CONTENT_HINT_CHARS] + "..."


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
    query: Annotated[str, Field(max_length=2000, description="What the user asked (the topic to recall).")],
) -> Annotated[CallToolResult, ContextResult]:
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


@dialect.tool(description=SEARCH_MEMORY)
def search_memory(
    query: Annotated[
        str | None, Field(max_length=2000, description="What to search for (semantic). Optional with days_back or id.")
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
        Field(max_length=5, description="Collections to search; omit for auto-routing (recommended)."),
    ] = None,
    metadata: Annotated[
        dict[str, Any] | None,
        Field(
            description='Optional filters, e.g. {"created_at": {"$gte": "2025-02-01T00:00:00"}} or {"title": "..."}.'
        ),
    ] = None,
    sort_by: Annotated[
        Literal["relevance", "recency", "score"] | None,
        Field(description="relevance (default with a query), recency (default without), or score."),
    ] = None,
    limit: Annotated[int, Field(ge=1, le=20, description="How many results (1-20).")] = 5,
) -> Annotated[CallToolResult, SearchResult]:
    caller = dialect.caller()
    now = timezone.now()
    query = query if query and query.strip() else None
    if id:
        # A direct lookup takes priority over query and days_back (Feature 2).
        hits = api.collection_lookup(caller=caller, memory_id=id)
    elif query is None and days_back is None:
        raise dialect.failure("INVALID_ARGUMENT", "Provide at least one of: query, days_back")
    else:
        hits = api.collection_search(
            caller=caller,
            query=query,
            collections=collections,
            days_back=days_back,
            sort_by=sort_by,
            limit=limit,
            metadata=metadata,
            now=now,
        )
    if not hits:
        text = "No memories found."
    else:
        text = f"Found {len(hits)} memories:\n\n" + "\n".join(result_line(n, h, now) for n, h in enumerate(hits, 1))
    return _result(text, SearchResult(count=len(hits), results=[MemoryShape(**shape(h, now)) for h in hits]))


def _apply_scores(memory_scores: Mapping[str, str] | None) -> tuple[dict[str, str], list[str]]:
    caller = dialect.caller()
    scored: dict[str, str] = {}
    skipped: list[str] = []
    found = api.collection_ids(caller, list(memory_scores or {}))
    for given, outcome in (memory_scores or {}).items():
        memory = found.get(given)
        if memory is None or api.collection_of(memory) == "books":  # books are reference material, never scored
            skipped.append(given)
            continue
        api.memory_feedback(caller=caller, memory_id=memory.id, signal=outcome)
        scored[given] = outcome
    return scored, skipped


def _score_exchange(outcome: str | None, already: Iterable[str]) -> str | None:
    """The outcome of the previous exchange applies to its stored working memory
    (unless the model scored that memory itself)."""
    caller = dialect.caller()
    previous = api.exchange_mark_scored(caller=caller)
    if previous is None or previous.memory_id is None or outcome is None:
        return None
    found = api.collection_ids(caller, [str(previous.memory_id)])
    memory = found.get(str(previous.memory_id))
    if memory is None:
        return None
    if api.display_id(memory) in already or str(memory.id) in already:
        return api.display_id(memory)
    api.memory_feedback(caller=caller, memory_id=memory.id, signal=outcome)
    return api.display_id(memory)


ScoreMap = Annotated[
    dict[Annotated[str, Field(max_length=200)], Outcome] | None,
    Field(
        max_length=MAX_SCORES,
        description='Per-memory outcomes: {"<id from [id:...]>": "worked|partial|unknown|failed"}.',
    ),
]


@dialect.tool(description=SCORE_RESPONSE, writes=True)
def score_response(
    outcome: Annotated[Outcome, Field(description="How the user reacted to your previous answer.")],
    memory_scores: ScoreMap = None,
) -> Annotated[CallToolResult, ScoreResult]:
    scored, skipped = _apply_scores(memory_scores)
    exchange = _score_exchange(outcome, scored)
    updated = len(scored) + (1 if exchange and exchange not in scored else 0)
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
    scored, skipped = _apply_scores(memory_scores)
    exchange = _score_exchange(exchange_outcome, scored)
    stored: list[str] = []
    if exchange_summary and exchange_summary.strip():
        summary = api.working_store(caller=caller, content=exchange_summary, tags=noun_tags)
        stored.append(api.display_id(summary))
    for fact in facts or []:
        if fact.strip():
            stored.append(api.display_id(api.memory_bank_store(caller=caller, content=fact)))
    updated = len(scored) + (1 if exchange and exchange not in scored else 0)
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
    key_takeaway: Annotated[str, Field(min_length=1, max_length=2000, description="The learning, self-contained.")],
) -> Annotated[CallToolResult, StoredResult]:
    # upstream: a key takeaway starts at score 0.7 (one good scoring from history).
    memory = api.working_store(caller=dialect.caller(), content=f"Key takeaway: {key_takeaway}", outcome_score=0.7)
    return _result(
        f"Recorded: {key_takeaway}",
        StoredResult(id=api.display_id(memory), collection="working", content=memory.content),
    )


@dialect.tool(description=ADD_TO_MEMORY_BANK, writes=True)
def add_to_memory_bank(
    content: Annotated[str, Field(min_length=1, max_length=2000, description="One fact.")],
    tags: Annotated[
        list[Tag] | None, Field(max_length=20, description="Labels such as identity, preference, goal, project.")
    ] = None,
    importance: Annotated[float, Field(ge=0, le=1, description="How much it matters (0-1).")] = 0.7,
    confidence: Annotated[
        float, Field(ge=0, le=1, description="How sure you are (0-1); see STORAGE DISCIPLINE.")
    ] = 0.7,
    always_inject: Annotated[bool, Field(description="Show in every KNOWN CONTEXT block.")] = False,
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
    new_content: Annotated[str, Field(min_length=1, max_length=2000, description="The corrected fact.")],
    old_content: Annotated[
        str | None, Field(max_length=2000, description="The fact to replace (matched by meaning).")
    ] = None,
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
    content: Annotated[
        str | None, Field(max_length=2000, description="The memory_bank fact to delete (matched by meaning).")
    ] = None,
    id: Annotated[str | None, Field(max_length=200, description="The id of the memory to delete.")] = None,
) -> Annotated[CallToolResult, DeletedResult]:
    caller = dialect.caller()
    if id:
        target = api.collection_get(caller, id)
    elif content and content.strip():
        target = _by_content(content)
    else:
        raise dialect.failure("INVALID_ARGUMENT", "Provide id or content to name the memory to delete.")
    api.memory_forget(caller=caller, kind=target.kind, memory_id=target.id)
    ident = api.display_id(target)
    return _result(f"Deleted memory (ID: {ident})", DeletedResult(id=ident, deleted=True))
