"""One outcome mechanism for every dialect (issue 8): a signal from any dialect
feeds the same counters on the memory row, and the consequences (learned score,
maturity, confidence) are rules stated once here.

Signals and their sources:
- the butlers memory module: ``helpful`` / ``harmful`` (memory_mark_helpful / _harmful);
- roampal v0.3.5: ``worked`` / ``partial`` / ``failed`` / ``unknown``;
- pce-memory v0.14.0: ``helpful`` / ``harmful`` / ``outdated`` / ``duplicate``.

Counters: ``success_count`` (roampal's fractional successes), ``harmful_count``,
``applied_count`` (roampal's ``uses``: +1 on every report), ``outcome_score``
(roampal's learned score, 0.5 when unscored), ``utility`` (pce's critic) and
``confidence``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from memory import scoring
from memory.embedtext import following_turns
from memory.models import Collection, Kind, Maturity, Memory, Validity
from memory.services.vectors import turns_unembed


class Signal(StrEnum):
    HELPFUL = "helpful"
    HARMFUL = "harmful"
    WORKED = "worked"
    PARTIAL = "partial"
    FAILED = "failed"
    UNKNOWN = "unknown"
    OUTDATED = "outdated"
    DUPLICATE = "duplicate"


@dataclass(frozen=True)
class Effect:
    success: float = 0.0
    harmful: int = 0
    score: float = 0.0
    utility: float = 0.0
    confidence: float = 0.0


# roampal v0.3.5's score / success deltas and pce-memory v0.14.0's utility / confidence
# deltas, as their code applies them. The butlers memory module's helpful and
# harmful are the same judgement as roampal's worked and failed, so they move
# the learned score the same way; pce's helpful/harmful share those rows.
EFFECTS: dict[Signal, Effect] = {
    Signal.HELPFUL: Effect(success=1.0, score=0.2, utility=0.10, confidence=0.05),
    Signal.HARMFUL: Effect(harmful=1, score=-0.3, utility=-0.20, confidence=-0.10),
    Signal.WORKED: Effect(success=1.0, score=0.2),
    Signal.PARTIAL: Effect(success=0.5, score=0.05),
    Signal.FAILED: Effect(score=-0.3),
    Signal.UNKNOWN: Effect(success=0.25),
    Signal.OUTDATED: Effect(confidence=-0.20),
    Signal.DUPLICATE: Effect(utility=-0.05),
}


def maturity_set(rule: Memory, maturity: str, at: datetime) -> list[str]:
    """The one place where a rule's maturity changes. Its confidence follows
    the maturity (scoring.MATURITY_CONFIDENCE), whether outcomes, the maturity
    sweep or a reviewer moved it, so a hand-promoted rule ranks like an earned
    one. Returns the fields to save."""
    rule.maturity = maturity
    fields = ["maturity"]
    if maturity in scoring.MATURITY_CONFIDENCE:
        rule.confidence = scoring.MATURITY_CONFIDENCE[maturity]
        rule.last_confirmed_at = at
        fields += ["confidence", "last_confirmed_at"]
    return fields


def signal_apply(memory: Memory, signal: Signal, now: datetime) -> tuple[list[str], str | None]:
    """Apply one outcome to the row (not saved). Returns the changed fields and,
    for a rule whose maturity moved, the maturity it had before."""
    effect = EFFECTS[signal]
    last_used = memory.last_applied_at or memory.created_at or now
    memory.outcome_score = scoring.outcome_score_after(
        memory.outcome_score, effect.score, scoring.days_between(last_used, now)
    )
    memory.success_count += effect.success
    memory.harmful_count += effect.harmful
    memory.applied_count += 1
    memory.utility += effect.utility
    memory.last_applied_at = now
    fields = ["outcome_score", "success_count", "harmful_count", "applied_count", "utility", "last_applied_at"]
    if memory.kind != Kind.RULE:
        # A rule's confidence follows its maturity; everything else's follows the signals.
        memory.confidence = min(1.0, max(0.0, memory.confidence + effect.confidence))
        fields.append("confidence")
        return fields, None
    memory.effectiveness_score = scoring.rule_effectiveness(memory.success_count, memory.harmful_count)
    fields.append("effectiveness_score")
    before = memory.maturity or Maturity.CANDIDATE
    after = scoring.rule_maturity(
        maturity=before,
        success=memory.success_count,
        harmful=memory.harmful_count,
        age_days=scoring.days_between(memory.created_at, now),
    )
    if after == before:
        return fields, None
    return fields + maturity_set(memory, after, now), before


def collection_apply(memory: Memory, now: datetime, *, unembed_next_turn: bool = True) -> tuple[list[str], str | None]:
    """roampal v0.3.5's lifecycle for one memory of a collection (not saved): promotion,
    demotion or deletion by its learned score, uses and successes. Returns the
    changed fields and the collection it left (None: nothing moved). Deletion is
    memproj's forget: the row is retracted (retrieval-excluded, audited), and,
    as ``memory_forget`` does, the turn after it in its session (a working or
    history memory of a conversation) loses the vector made with its text and
    is embedded again (``vectors.turns_unembed``), inside the caller's
    transaction, which holds the tenant's write lock and the memory's row; a
    caller that deletes many at once passes ``unembed_next_turn=False`` and
    does it for all of them (``collections.collections_lifecycle``)."""
    before = memory.collection
    target = scoring.collection_next(
        collection=before,
        score=memory.outcome_score,
        uses=memory.applied_count,
        success=memory.success_count,
        age_days=scoring.days_between(memory.created_at, now),
    )
    if target is None:
        return [], None
    if target == scoring.DELETED:
        if unembed_next_turn:
            # Read while the row is still active in the database (saved by the caller).
            turns_unembed(following_turns(memory_ids=[memory.pk], now=now, tenant_id=memory.tenant_id))
        memory.validity = Validity.RETRACTED
        return ["validity"], before
    fields = ["collection", "kind", "expires_at", "maturity"]
    memory.collection = target
    if target == Collection.HISTORY:
        memory.kind, memory.expires_at, memory.maturity = Kind.EPISODE, now + scoring.HISTORY_TTL, ""
        if before == Collection.WORKING:
            # upstream: a memory starts its history with fresh counters.
            memory.applied_count, memory.success_count = 0, 0.0
            fields += ["applied_count", "success_count"]
        return fields, before
    # patterns: a proven rule, permanent.
    memory.kind, memory.expires_at = Kind.RULE, None
    return fields + maturity_set(memory, Maturity.ESTABLISHED, now)[1:], before
