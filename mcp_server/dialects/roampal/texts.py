# ruff: noqa: E501 - roampal's texts are kept verbatim, long lines included
"""roampal v0.3.5's words, verbatim: the tool descriptions, the KNOWN CONTEXT
block, the scoring prompts, the result lines and the normalized memory its
tools and hook server answer with. The server instructions, score_memories (a
newer clients' tool) and the lines on naming a memory by id are ours. The
tools (tools.py) and the hook server (routes.py) both render with these
functions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.utils import timezone

from memory import api

INSTRUCTIONS = """\
You have outcome-based persistent memory that learns across sessions (Roampal).
Call get_context_insights(query) before responding; score memories with score_response when a
<roampal-score-required> prompt appears; store significant learnings with record_response and
permanent facts with add_to_memory_bank.
"""

CONTENT_HINT_CHARS = 30  # the content hint of the OpenCode scoring reference
CONTEXT_CONTENT_CHARS = 500  # a KNOWN CONTEXT line's content, at most
# A KNOWN CONTEXT line says "NN% proven" from this Wilson lower bound on (roampal
# v0.3.5's get_context_for_injection): proven means proven useful over its uses,
# so a memory scored "worked" once (Wilson 0.21) is not, whatever its score.
PROVEN_WILSON = 0.7

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

# roampal v0.3.5's get_context_insights description (its system overview, with its audit's `uses ≥3` for patterns),
# and its memory-hygiene section after YOUR ROLE.
GET_CONTEXT_INSIGHTS = """\
You have outcome-based persistent memory that learns across sessions.

HOW IT WORKS:
Your memories are scored every time they surface. Scores drive the lifecycle:
• working (new, 24h) → score ≥0.7 + 2 uses → history (30d) → score ≥0.9 + uses ≥3 + 5 proven successes → patterns (permanent)
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

# roampal v0.3.5's search_memory description, with its verification section after READING RESULTS.
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

# roampal v0.3.5's score_response description, with its active-memory-management section after
# PER-MEMORY SCORING.
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

# roampal v0.3.5's record_response description.
RECORD_RESPONSE = """\
Store a key takeaway when the transcript alone won't capture important learning.

OPTIONAL - Only use for significant exchanges:
• Major decisions made
• Complex solutions that worked
• User corrections (what you got wrong and why)
• Important context that would be lost

Most routine exchanges don't need this - the transcript is enough.

Key takeaways start at 0.7 (user explicitly asked to remember = higher confidence).
Scoring happens via score_response on the next turn: +0.2 worked, +0.05 partial, -0.3 failed."""

# roampal v0.3.5's add_to_memory_bank description: its ALWAYS_INJECT and SIZE GUIDANCE sections, then
# STORAGE DISCIPLINE.
ADD_TO_MEMORY_BANK = """\
Store PERMANENT facts that help maintain continuity across sessions.

WHAT BELONGS HERE:
• User identity (name, role, background) - MUST use tags=["identity"]
• Preferences (communication style, tools, workflows)
• Goals and projects (what they're working on, priorities)
• Progress tracking (what worked, what failed, strategy iterations)
• Useful context that would be lost between sessions

WHAT DOES NOT BELONG:
• Raw conversation exchanges (auto-captured in working/history)
• Temporary session facts (current task details)
• Every fact you hear - be SELECTIVE, this is for PERMANENT knowledge

TAG MEANINGS:
• identity - name, role, background (REQUIRED for cold start detection)
• preference - communication style, tools they like, how they work
• goal - what they're trying to achieve long-term
• project - current projects, codebases, repos
• system_mastery - things you learned about being effective for THIS user
• agent_growth - meta-learning about how to improve as an assistant

ALWAYS_INJECT:
Use sparingly. Only for facts needed on EVERY message (core identity).
Most facts should NOT be always_inject - they surface via semantic search when relevant.

SIZE GUIDANCE:
• Keep facts AS SMALL AS POSSIBLE - aim for ~300 chars or less
• The first ~300 chars of each fact appear in cold start profile summaries
• Longer facts work but only the beginning shows on cold start - put the key info first
• Research dumps belong in books collection, not memory_bank
• If you notice massive facts (1000+ chars), offer to condense them
• One concept per fact - split multi-topic content into separate memories

Rule of thumb: If it helps maintain continuity across sessions OR enables learning/improvement, store it. If it's session-specific, don't.

Note: memory_bank is NOT outcome-scored. Facts persist until deleted.

STORAGE DISCIPLINE:
• confidence=0.9+ is reserved for facts you VERIFIED against source
  (code, docs, tool output). Not for things you "know"
• confidence=0.7 is the default — use it unless you have evidence
• confidence=0.5 for unverified claims, approximate numbers, or
  things the user told you that you couldn't confirm
• Before storing, ask: "Will this still be true next week?" If not,
  it doesn't belong in memory_bank — let working/history handle it
• One fact per memory. Don't combine unrelated information"""

# roampal v0.3.5's update_memory and delete_memory descriptions, and how to name a memory by id (the
# newer clients' form, which upstream's later releases took).
UPDATE_MEMORY = """\
Update existing memory when information changes or needs correction.

WHEN TO USE: When you discover a memory_bank fact is outdated, wrong, or incomplete — fix it immediately. Don't wait to be told. If you gave wrong info because of a stale memory, update it in the same turn you discover the error. This is YOUR memory — maintain it.

UPDATE vs DELETE: Update when the fact is still relevant but details changed (version, path, status). Delete when the fact is no longer relevant at all or has been replaced by a different memory.

Name the memory by old_content (matched by meaning against memory_bank) or by id (its [id:memory_bank_...] tag). The old version is kept for audit, never retrieved."""

DELETE_MEMORY = """\
Delete outdated/irrelevant memories from memory_bank.

WHEN TO USE: When a memory_bank fact is wrong, stale, redundant, or harmful. Deleting bad memories is as important as storing good ones. If a memory has been misleading you across sessions, don't just score it 'failed' — delete it. memory_bank is not outcome-scored, so scoring alone won't remove it. You must act directly.

UPDATE vs DELETE: Delete when the fact is completely wrong or no longer relevant. Update (use update_memory instead) when the fact is still relevant but details changed.

Name the memory by content (matched by meaning against memory_bank) or by id (its [id:...] tag, any collection). A deleted memory is kept for audit, never retrieved."""

# The Stop hook's answer while the previous exchange is still unscored.
BLOCK_MESSAGE = (
    "Before finishing, score the previous exchange: call score_response(outcome=..., memory_scores={...}) "
    "for the memory IDs listed in the <roampal-score-required> prompt."
)


# --- Rendering ---------------------------------------------------------------------------------


def age(when: datetime, now: datetime | None = None) -> str:
    """`5m`, `5h`, `5d`; past 30 days in months of 30 days, past 365 in years,
    as roampal v0.3.5's normalize_memory writes it (`2mo`, `1y`)."""
    seconds = max(0.0, ((now or timezone.now()) - when).total_seconds())
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h"
    days = int(seconds // 86400)
    if days > 365:
        return f"{days // 365}y"
    if days > 30:
        return f"{days // 30}mo"
    return f"{days}d"


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


def created_at(memory: Any) -> datetime:
    """roampal's created_at of a memory: when it happened (``occurred_at``: an
    import keeps upstream's created_at there, a butlers fact its valid_at), the
    time ``days_back`` and the ``created_at`` filter select on and recency sorts
    by, so that a memory shows the date it was found by."""
    return memory.occurred_at or memory.created_at


def shape(hit: api.CollectionHit, now: datetime | None = None) -> dict[str, Any]:
    """roampal v0.3.5's normalized memory, as a dict (optional keys absent, not null)."""
    m = hit.memory
    out: dict[str, Any] = {
        "id": hit.id,
        "collection": hit.collection,
        "content": memory_text(m),
        "created_at": created_at(m).isoformat(),
        "age": age(created_at(m), now),
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
    parts = [age(created_at(m), now)]
    if hit.collection == "memory_bank":
        parts += [f"imp:{m.importance / 10:.1f}", f"conf:{m.confidence:.1f}"]
    elif hit.collection != "books":
        parts += [f"s:{m.outcome_score:.2f}", f"w:{hit.wilson:.2f}", f"{m.applied_count} uses"]
        if hit.outcomes:
            parts.append(outcome_marks(hit.outcomes))
    return f"{number}. [{hit.collection}] ({', '.join(parts)}) [id:{hit.id}] {memory_text(m).translate(_BIDI_CONTROLS)}"


# Explicit bidirectional embeddings, overrides and isolates (U+202A-U+202E,
# U+2066-U+2069): in a line that shows a memory's text beside its [id:...] tag,
# an override in the text would display the tag and what follows reordered
# (spoofing which id a line names). Right-to-left text keeps its natural
# direction without them.
_BIDI_CONTROLS = dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def line_text(memory: Any) -> str:
    """A memory's text as one line of a block: its whitespace runs one space,
    without explicit bidirectional controls (``_BIDI_CONTROLS``)."""
    return " ".join(memory_text(memory).translate(_BIDI_CONTROLS).split())


def context_line(hit: api.CollectionHit, now: datetime | None = None) -> str:
    """KNOWN CONTEXT line: `• {content} [id:{doc_id}] ({age}, {NN% proven, }{collection})`,
    NN the Wilson lower bound in percent (truncated, as upstream), from PROVEN_WILSON."""
    m = hit.memory
    content = line_text(m)
    if len(content) > CONTEXT_CONTENT_CHARS:
        content = content[: CONTEXT_CONTENT_CHARS - 3] + "..."
    parts = [age(created_at(m), now)]
    if hit.wilson >= PROVEN_WILSON:
        parts.append(f"{int(hit.wilson * 100)}% proven")
    parts.append(hit.collection)
    return f"• {content} [id:{hit.id}] ({', '.join(parts)})"


def known_context_block(context: api.KnownContext, now: datetime | None = None) -> str:
    """The preamble, then the block: its header followed by the memories, as
    every block in roampal v0.3.5's release notes reads ("The context below...")."""
    lines = [context_line(h, now) for h in (*context.user_facts, *context.relevant)]
    if not lines:
        return ""
    return PREAMBLE + "\n\n═══ KNOWN CONTEXT ═══\n" + "\n".join(lines) + "\n═══ END CONTEXT ═══"


def scores_template(ids: Iterable[str]) -> str:
    entries = ",\n".join(f'        "{i}": "___"' for i in ids)
    return "    memory_scores={\n" + entries + ("\n" if entries else "") + "    }"


def scoring_prompt(ids: Sequence[str]) -> str:
    """roampal v0.3.5's lean scoring prompt (Claude Code / Cursor): ids only."""
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
    """roampal v0.3.5's OpenCode scoring prompt: refers to the SCORING REFERENCE block."""
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
