"""Every scoring formula of the seeds, in one module (DESIGN §6)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

# Seed 000: permanence labels map to decay rates (per day); permanent never decays.
DECAY_RATES: dict[str, float] = {
    "permanent": 0.0,
    "stable": 0.002,
    "standard": 0.008,
    "volatile": 0.03,
    "ephemeral": 0.1,
}
DEFAULT_PERMANENCE = "standard"

# Fact states by effective confidence (issue 3 / memory_stats).
FADING_BELOW = 0.5
EXPIRED_BELOW = 0.1

# Rule maturity thresholds.
RULE_CANDIDATE_CONFIDENCE = 0.5  # seed 000: new rules are candidates at 0.5
ESTABLISHED_MIN_SUCCESS = 5
ESTABLISHED_MIN_EFFECTIVENESS = 0.6
PROVEN_MIN_SUCCESS = 15
PROVEN_MIN_EFFECTIVENESS = 0.8
PROVEN_MIN_AGE_DAYS = 30
ANTI_PATTERN_MIN_HARMFUL = 3
ANTI_PATTERN_BELOW_EFFECTIVENESS = 0.3
MATURITY_CONFIDENCE = {"candidate": 0.5, "established": 0.75, "proven": 0.9}

# Recall composite weights (relevance, importance, recency, effective confidence).
RECALL_WEIGHTS = {"relevance": 0.6, "importance": 0.15, "recency": 0.05, "confidence": 0.2}
RECENCY_HALF_LIFE_DAYS = 30.0

# Hybrid fusion. The alpha blend beat reciprocal-rank fusion at every k on
# MADial-Bench (nDCG@10 0.654 vs 0.602, paired-bootstrap 95% interval of the
# gain +0.025..+0.082; docs/benchmarks.md), so it is the default; RRF stays
# available (MEMPROJ_FUSION=rrf) and for tenant policies that ask for it. The
# choice and alpha are settings (MEMPROJ["FUSION"], MEMPROJ["FUSION_ALPHA"]).
RRF_K = 60


def days_between(earlier: datetime, later: datetime) -> float:
    return max(0.0, (later - earlier).total_seconds() / 86400.0)


def effective_confidence(confidence: float, decay_rate: float, confirmed_at: datetime, now: datetime) -> float:
    """confidence * exp(-decay_rate * days since last confirmation)."""
    return confidence * math.exp(-decay_rate * days_between(confirmed_at, now))


def fact_state(effective: float) -> str:
    if effective < EXPIRED_BELOW:
        return "expired"
    if effective < FADING_BELOW:
        return "fading"
    return "active"


def fact_state_schedule(
    *, confidence: float, decay_rate: float, confirmed_at: datetime, now: datetime
) -> tuple[str, datetime | None]:
    """A fact's state now, and when decay will next move it to another state
    (None: never). Solving confidence * exp(-rate * days) = threshold for days
    lets the decay sweep visit only facts whose state is due to change."""
    state = fact_state(effective_confidence(confidence, decay_rate, confirmed_at, now))
    threshold = {"active": FADING_BELOW, "fading": EXPIRED_BELOW}.get(state)
    if threshold is None or decay_rate <= 0 or confidence <= 0:
        return state, None
    # One second past the crossing, and never in the past, so the sweep never
    # finds a fact due again before its state has really changed.
    crossing = confirmed_at + timedelta(days=math.log(confidence / threshold) / decay_rate, seconds=1)
    return state, max(crossing, now + timedelta(seconds=1))


def rule_effectiveness(success: int, harmful: int) -> float:
    """Seed 000: success / (success + 4 x harmful + 0.01)."""
    return success / (success + 4 * harmful + 0.01)


def rule_maturity(*, maturity: str, success: int, harmful: int, age_days: float) -> str:
    """Next maturity after an outcome: promotion, one-step demotion, or
    inversion into an anti-pattern when a rule keeps causing harm."""
    effectiveness = rule_effectiveness(success, harmful)
    if harmful >= ANTI_PATTERN_MIN_HARMFUL and effectiveness < ANTI_PATTERN_BELOW_EFFECTIVENESS:
        return "anti_pattern"
    if maturity == "anti_pattern":
        return maturity
    if maturity == "proven" and effectiveness < PROVEN_MIN_EFFECTIVENESS:
        return "established"
    if maturity == "established" and effectiveness < ESTABLISHED_MIN_EFFECTIVENESS:
        return "candidate"
    if (
        maturity in ("candidate", "established")
        and success >= PROVEN_MIN_SUCCESS
        and effectiveness >= PROVEN_MIN_EFFECTIVENESS
        and age_days >= PROVEN_MIN_AGE_DAYS
    ):
        return "proven"
    if (
        maturity == "candidate"
        and success >= ESTABLISHED_MIN_SUCCESS
        and effectiveness >= ESTABLISHED_MIN_EFFECTIVENESS
    ):
        return "established"
    return maturity


def recency(reference: datetime, now: datetime, half_life_days: float = RECENCY_HALF_LIFE_DAYS) -> float:
    return 0.5 ** (days_between(reference, now) / half_life_days)


def recall_score(*, relevance: float, importance: float, recency_value: float, confidence: float) -> float:
    w = RECALL_WEIGHTS
    return (
        w["relevance"] * relevance
        + w["importance"] * (importance / 10.0)
        + w["recency"] * recency_value
        + w["confidence"] * confidence
    )


@dataclass(frozen=True)
class ChannelHit:
    """One candidate from the vector and/or keyword channel (ranks are 1-based)."""

    vector_similarity: float | None = None
    vector_rank: int | None = None
    text_rank_value: float | None = None
    text_rank: int | None = None


def fuse_rrf(hit: ChannelHit, k: int = RRF_K) -> float:
    """Reciprocal rank fusion, normalised to [0, 1] (1 = first in both channels)."""
    total = 0.0
    if hit.vector_rank is not None:
        total += 1.0 / (k + hit.vector_rank)
    if hit.text_rank is not None:
        total += 1.0 / (k + hit.text_rank)
    return total / (2.0 / (k + 1))


def fuse(hit: ChannelHit) -> float:
    """Hybrid relevance in [0, 1] with the configured fusion (settings.MEMPROJ)."""
    from django.conf import settings

    conf = settings.MEMPROJ
    return fuse_rrf(hit) if conf["FUSION"] == "rrf" else fuse_alpha(hit, conf["FUSION_ALPHA"])


def fuse_alpha(hit: ChannelHit, alpha: float) -> float:
    """S = alpha * S_vec + (1 - alpha) * S_text, both in [0, 1]."""
    s_vec = max(0.0, hit.vector_similarity or 0.0)
    s_txt = hit.text_rank_value or 0.0
    s_txt = s_txt / (1.0 + s_txt)  # ts_rank_cd is unbounded; squash to [0, 1)
    return alpha * s_vec + (1.0 - alpha) * s_txt


# Outcome learning (seed 003 roampal v0.3.5, shared by every dialect's feedback).
UNSCORED_OUTCOME_SCORE = 0.5  # roampal: an unscored memory starts at 0.5
OUTCOME_SCALE_DAYS = 30.0
WILSON_Z = 1.96


def outcome_score_after(score: float, delta: float, days_since_used: float) -> float:
    """roampal: score += delta / (1 + days since last use / 30), clamped to [0, 1]."""
    return min(1.0, max(0.0, score + delta / (1.0 + days_since_used / OUTCOME_SCALE_DAYS)))


def wilson_lower_bound(successes: float, uses: int, z: float = WILSON_Z) -> float:
    """Lower bound of the Wilson score interval; 0.5 for an unused memory (seed 003).
    Reference values: (1, 1) 0.2065, (90, 100) 0.8256, (50, 100) 0.4038."""
    if uses <= 0:
        return 0.5
    p = min(1.0, max(0.0, successes / uses))
    denominator = 1 + z * z / uses
    centre = p + z * z / (2 * uses)
    margin = z * math.sqrt((p * (1 - p) + z * z / (4 * uses)) / uses)
    return (centre - margin) / denominator


# Roampal collections (seed 003, upstream promotion_service / scoring_service).
WORKING_TTL = timedelta(hours=24)
HISTORY_TTL = timedelta(days=30)
HISTORY_MIN_SCORE, HISTORY_MIN_USES = 0.7, 2  # working -> history (uses and successes reset)
PATTERNS_MIN_SCORE, PATTERNS_MIN_USES, PATTERNS_MIN_SUCCESS = 0.9, 3, 5.0  # history -> patterns
DEMOTE_BELOW = 0.4  # patterns -> history
DELETE_BELOW = 0.2
DELETE_YOUNG_BELOW = 0.1  # a memory at most 7 days old gets more room before deletion
YOUNG_DAYS = 7.0
SCORED_COLLECTIONS = ("working", "history", "patterns")  # memory_bank and books are never deleted
DELETED = "deleted"


def collection_next(*, collection: str, score: float, uses: int, success: float, age_days: float) -> str | None:
    """Where a scored memory goes next: another collection, ``DELETED``, or None
    (stays). Deletion is checked first: a pattern that collapsed below the
    deletion threshold is not merely demoted."""
    if collection not in SCORED_COLLECTIONS:
        return None
    if score < (DELETE_YOUNG_BELOW if age_days <= YOUNG_DAYS else DELETE_BELOW):
        return DELETED
    if collection == "working" and score >= HISTORY_MIN_SCORE and uses >= HISTORY_MIN_USES:
        return "history"
    if (
        collection == "history"
        and score >= PATTERNS_MIN_SCORE
        and uses >= PATTERNS_MIN_USES
        and success >= PATTERNS_MIN_SUCCESS
    ):
        return "patterns"
    if collection == "patterns" and score < DEMOTE_BELOW:
        return "history"
    return None


# Ranking: similarity and the learned (outcome) score, with the weight moving to
# the learned score as a memory proves itself (upstream scoring_service's tiers).
def learned_weight(uses: int, score: float) -> float:
    if uses >= 5 and score >= 0.8:
        return 0.6  # proven
    if uses >= 3:
        return 0.45  # established
    if uses >= 1:
        return 0.3  # tried
    return 0.2  # new: mostly similarity


MEMORY_BANK_WILSON_AFTER_USES = 3
MEMORY_BANK_QUALITY_WEIGHT = 0.5


def memory_bank_quality(importance: float, confidence: float, successes: float, uses: int) -> float:
    """memory_bank: importance x confidence, blended 80/20 with Wilson after 3 uses."""
    quality = importance * confidence
    if uses >= MEMORY_BANK_WILSON_AFTER_USES:
        quality = 0.8 * quality + 0.2 * wilson_lower_bound(successes, uses)
    return quality


def collection_rank(
    *, collection: str, similarity: float, score: float, uses: int, quality: float | None = None
) -> float:
    """final_rank_score of seed 003: books by similarity alone, memory_bank by
    similarity and quality, the scored collections by similarity and learned score."""
    if collection == "books":
        return similarity
    if collection == "memory_bank":
        q = quality if quality is not None else 0.5
        return (1 - MEMORY_BANK_QUALITY_WEIGHT) * similarity + MEMORY_BANK_QUALITY_WEIGHT * q
    weight = learned_weight(uses, score)
    return (1 - weight) * similarity + weight * score
