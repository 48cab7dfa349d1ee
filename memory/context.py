"""The token-budgeted memory block for system-prompt injection (the butlers memory module's
memory_context): facts, rules and recent episodes in separate sections, each
ordered by score with deterministic tie-breakers, never over the budget."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from memory import validation
from memory.models import Kind
from memory.retrieval import RetrievalFilter, channel_hits
from memory.scoring import ChannelHit, RetrievalParams
from memory.selectors.memories import (
    ScoredMemory,
    composite_rank,
    memories_for_hits,
    query_vector_later,
    read_boundary,
    recent_episodes,
    require_read,
    retrieval_params,
)
from memory.tokenizer import count_tokens
from policy.caller import Caller

SECTIONS = (("facts", "Facts"), ("rules", "Rules"), ("episodes", "Recent episodes"))
HEADER = "# Memory context"
MIN_BUDGET = 32
MAX_BUDGET = 100_000


@dataclass
class ContextBlock:
    text: str
    token_count: int
    token_budget: int
    included: dict[str, list[ScoredMemory]] = field(default_factory=dict)
    omitted: int = 0


def render_line(item: ScoredMemory) -> str:
    memory = item.memory
    short_id = str(memory.id)
    if memory.kind == Kind.FACT:
        key = " / ".join(part for part in (memory.subject, memory.predicate) if part)
        return f"- [fact {short_id}] {key + ': ' if key else ''}{memory.content}"
    if memory.kind == Kind.RULE:
        if memory.maturity == "anti_pattern":
            return f"- [rule {short_id}] AVOID (proven harmful): {memory.content}"
        return f"- [rule {short_id}, {memory.maturity}] {memory.content}"
    return f"- [episode {memory.occurred_at:%Y-%m-%d %H:%M}] {memory.content}"


# A line's token count depends on its text alone, and the same memories come back
# turn after turn: counting each distinct line once per process saves most of the
# tokenizer's share of a context call. Kept small: a line holds up to
# MAX_CONTENT_CHARS, so 2,048 lines stay within ~32 MB per process at worst.
_line_tokens = functools.lru_cache(maxsize=2048)(count_tokens)


def _render(sections: Mapping[str, list[ScoredMemory]]) -> str:
    parts = [HEADER]
    for key, title in SECTIONS:
        parts.append(f"\n## {title}")
        items = sections.get(key, [])
        parts.extend(render_line(item) for item in items) if items else parts.append("(none)")
    return "\n".join(parts)


def _quotas(overrides: Mapping[str, float] | None) -> dict[str, float]:
    quotas = dict(settings.MEMPROJ["CONTEXT_QUOTAS"])
    for key, value in (overrides or {}).items():
        if key not in quotas:
            # Quoted short: the key is the client's, as long as the body allows.
            shown = key if len(key) <= 50 else key[:47] + "..."
            raise validation.InvalidArgument(f"section quotas take facts, rules and episodes (got {shown!r}).")
        quotas[key] = validation.number(value, field=f"quota for {key}", low=0, high=1)
    total = sum(quotas.values())
    if total <= 0:
        raise validation.InvalidArgument("at least one section quota must be above 0.")
    return {key: value / total for key, value in quotas.items()}


def build_context(
    *,
    caller: Caller,
    trigger_prompt: str,
    butler: str,
    token_budget: int | None = None,
    quotas: Mapping[str, float] | None = None,
    per_section_candidates: int | None = None,
    params: RetrievalParams | None = None,
) -> ContextBlock:
    require_read(caller)
    params = retrieval_params(caller, params)
    per_section = params.k_final if per_section_candidates is None else per_section_candidates
    prompt = validation.query(trigger_prompt, field="trigger_prompt")
    butler = validation.label(butler, field="butler")
    budget = settings.MEMPROJ["CONTEXT_TOKEN_BUDGET"] if token_budget is None else token_budget
    # The tenant policy bounds a context answer (its scopes.*.max_tokens).
    policy_cap = caller.policy.max_tokens_for(butler)
    if isinstance(budget, int | float) and not isinstance(budget, bool) and MAX_BUDGET >= budget > policy_cap:
        raise validation.InvalidArgument(
            f"token_budget {budget} is above the tenant policy's max_tokens ({policy_cap}) for this scope."
        )
    budget = int(validation.number(budget, field="token_budget", low=MIN_BUDGET, high=MAX_BUDGET))
    decision = read_boundary(caller)
    shares = _quotas(quotas)
    now = timezone.now()

    # Facts and rules scoped to the butler (plus global), one hybrid pass.
    flt = RetrievalFilter(
        kinds=[Kind.FACT, Kind.RULE], now=now, scopes=sorted({"global", butler}), use_tags=decision.use_tags
    )
    # The model embeds the prompt while the recent episodes and the keyword channel are read.
    vector = query_vector_later(caller, prompt, "hybrid", params)
    try:
        episodes = recent_episodes(caller=caller, butler=butler, now=now, limit=per_section)
    except BaseException:
        vector()  # always awaited: the wait settles the embedder's breaker
        raise
    hits = channel_hits(caller=caller, flt=flt, query_text=prompt, query_vector=vector, params=params)
    ranked = composite_rank(memories_for_hits(caller=caller, hits=hits, decision=decision), now, params)
    episode_hits = {e.id: hits.get(e.id, ChannelHit()) for e in episodes}
    candidates = {
        "facts": [s for s in ranked if s.memory.kind == Kind.FACT][:per_section],
        "rules": [s for s in ranked if s.memory.kind == Kind.RULE][:per_section],
        "episodes": composite_rank([(e, episode_hits[e.id]) for e in episodes], now, params),
    }

    # Greedy fill per section within its share; what a section leaves unused
    # rolls over to the next. Within a section the first item that does not fit
    # ends it, so lower-scored memories are always the ones omitted.
    chosen: dict[str, list[ScoredMemory]] = {key: [] for key, _ in SECTIONS}
    fixed_cost = _line_tokens(_render(chosen))
    available = budget - fixed_cost
    carry = 0
    for key, _title in SECTIONS:
        allowance = int(available * shares[key]) + carry
        used = 0
        for item in candidates[key]:
            cost = _line_tokens(render_line(item)) + 1  # +1 for the newline joining it
            if used + cost > allowance:
                break
            chosen[key].append(item)
            used += cost
        carry = allowance - used

    # Token counts of a joined text can differ from the sum of its lines (BPE
    # merges across boundaries), so verify the whole and drop the lowest-scored
    # line until it fits. This is what guarantees the budget.
    text = _render(chosen)
    tokens = count_tokens(text)
    while tokens > budget and any(chosen.values()):
        worst_key = min((key for key in chosen if chosen[key]), key=lambda k: (chosen[k][-1].score, k))
        chosen[worst_key].pop()
        text = _render(chosen)
        tokens = count_tokens(text)
    if tokens > budget:
        raise validation.InvalidArgument(f"token_budget {budget} is too small even for the section headings.")
    total_candidates = sum(len(v) for v in candidates.values())
    return ContextBlock(
        text=text,
        token_count=tokens,
        token_budget=budget,
        included=chosen,
        omitted=total_candidates - sum(len(v) for v in chosen.values()),
    )
