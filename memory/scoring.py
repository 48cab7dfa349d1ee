"""Every scoring formula of the five dialects, in one module: each exists once, whichever dialect asks."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, TypeVar

K = TypeVar("K")

# The butlers memory module: permanence labels map to decay rates (per day); permanent never decays.
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
RULE_CANDIDATE_CONFIDENCE = 0.5  # butlers memory module: new rules are candidates at 0.5
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

# Hybrid fusion defaults (see RetrievalParams; the deployment's settings
# MEMPROJ["FUSION"], MEMPROJ["FUSION_ALPHA"] override them, a tenant policy may
# override per call). RRF stays available for tenant policies that ask for it.
RRF_K = 60
# The fusions a deployment may choose; the benchmark's sweeps also try others
# (bench/_fusions.py: alpha, norm, minmax, dbsf).
FUSIONS = ("adaptive", "conf", "rrf")

# A hit needs evidence: a keyword match, or a cosine similarity to the query at
# or above the model's floor. The vector channel always returns its k nearest
# memories, however unrelated ("editor" against a tenant's twelve memories
# returned all twelve), so without a floor a search never comes back empty.
# Cosine scales differ by model, hence a floor per model (bench/quality.py
# --floor measures it: the largest floor that drops no labelled evidence turn
# the vector channel would otherwise rank in its top 10 on the development sets).
# A model not listed gets 0.0: only similarities at or below zero (no shared
# direction at all) count as no evidence.
VECTOR_FLOORS: dict[str, float] = {"all-MiniLM-L6-v2": 0.2}


def vector_floor_for(model_name: str) -> float:
    """The evidence floor of an embedding model (its variants, e.g. "+int8", share it)."""
    return VECTOR_FLOORS.get(model_name.split("+", 1)[0], 0.0)


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


# The latest time a fact's next state change is scheduled for: a year short
# of datetime.max, so adding a second, or showing it in any time zone, never
# leaves the calendar.
LATEST_STATE_CHANGE = datetime(9999, 1, 1, tzinfo=UTC)


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
    days = math.log(confidence / threshold) / decay_rate
    if math.isnan(days):
        return state, None
    # A confirmation near the calendar's end (an imported time) or a tiny rate
    # puts the crossing past what a datetime holds: the fact is then due at
    # LATEST_STATE_CHANGE, never an overflow.
    if days + 1 / 86400 >= (LATEST_STATE_CHANGE - confirmed_at).total_seconds() / 86400:
        return state, LATEST_STATE_CHANGE
    # One second past the crossing, and never in the past, so the sweep never
    # finds a fact due again before its state has really changed.
    crossing = confirmed_at + timedelta(days=days, seconds=1)
    return state, min(max(crossing, now + timedelta(seconds=1)), LATEST_STATE_CHANGE)


def rule_effectiveness(success: float, harmful: int) -> float:
    """The butlers memory module's effectiveness: success / (success + 4 x harmful + 0.01)."""
    return success / (success + 4 * harmful + 0.01)


def rule_maturity(*, maturity: str, success: float, harmful: int, age_days: float) -> str:
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
    # The share of the query terms' summed IDF that this memory's terms hold:
    # how much of the query's rare-word mass it matches. Unlike the raw score,
    # it is comparable across queries and memories: a memory holding every word
    # of a question gets 1 however long it is, a long dialogue whose best match
    # shares a few words gets little. None for cover density (no IDF).
    text_coverage: float | None = None
    # How well the memory's time fits the query's time expression, in [0, 1]
    # (memory/temporal.py); None when the query has none.
    time_fit: float | None = None
    # The top hits whose previous or next turn of the same session this memory
    # is (retrieval.channel_search's second pass, ``with_context``).
    context_of: tuple[Any, ...] = ()
    # Those of ``context_of`` that end by asking a question this memory, their
    # next turn, answers (``with_context``).
    answers: tuple[Any, ...] = ()
    # A keyword hit whose memory has no vector yet (written while the embedder
    # was away, or not yet reached by the worker): the vector channel could
    # not judge it, so the fusions weigh it in that channel as the keyword
    # channel does (``impute_pending``) instead of as a miss. Otherwise its own
    # text, asked for, ranks below every near-duplicate that has a vector.
    vector_pending: bool = False


KEYWORD_SCORERS = ("bm25", "cover_density")


@dataclass(frozen=True)
class RetrievalParams:
    """Everything that tunes one retrieval call, resolved once per call
    (``RetrievalParams.resolve``): the deployment's settings, then whatever a
    caller (a tenant policy) overrides. Frozen, so no step of a call can change
    what another step uses."""

    fusion: str = "adaptive"  # FUSIONS
    alpha: float = 0.7  # weight of the vector channel in conf fusion (at coverage 1 / conf_gain)
    rrf_k: int = RRF_K
    # conf fusion: how strongly the keyword channel's coverage of the query
    # moves weight to it (confidence_alpha).
    conf_gain: float = 2.0
    k_vec: int = 48  # vector channel depth
    k_txt: int = 48  # keyword channel depth
    k_final: int = 50  # fused candidates a section of memory_context ranks
    keyword_scorer: str = "bm25"  # bm25 | cover_density (ts_rank_cd, no IDF: the scorer before issue 14)
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    # The keyword channel ranks at most this many matching memories, taken from
    # the rarest query terms first (bounds its work in a large tenant).
    txt_candidates: int = 1000
    # Weight of the time fit after fusion (memory/temporal.py, time_boosted); 0 turns
    # it off (MEMPROJ_TIME_BOOST). 0.2: bench/quality.py "Chosen defaults".
    time_boost: float = 0.2
    # A hit needs a keyword match or at least this cosine similarity (VECTOR_FLOORS;
    # resolve() takes the configured model's).
    vector_floor: float = 0.0
    # Neighbouring turns (``with_context``): a hit that is the previous or next
    # episode of the same session of the hybrid's first ``context_top`` hits
    # scores at least ``context_decay`` x that hit's score; 0 turns the pass off.
    # bench/fusion_fit.py --levers measures them.
    context_top: int = 1
    context_decay: float = 0.8
    # A top hit that asks a question whose answer (the next turn) is a hit: the
    # answer takes the question's score and the question keeps this share of it;
    # 0 leaves both as they are.
    question_yield: float = 0.8
    # The vector channel embeds the question without its words that are in more
    # than this share of the tenant's memories (``retrieval.vector_query_text``);
    # 0 embeds the question as asked. bench/fusion_fit.py --vector-query measures it.
    vector_query_common_share: float = 0.3
    # Recency half-life by kind (days); kinds not listed use the default.
    recency_half_life_days: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    default_half_life_days: float = RECENCY_HALF_LIFE_DAYS

    def __post_init__(self) -> None:
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)} (got {self.fusion!r})")
        if self.keyword_scorer not in KEYWORD_SCORERS:
            raise ValueError(f"keyword_scorer must be one of {', '.join(KEYWORD_SCORERS)}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be between 0 and 1 (got {self.alpha})")
        for name in ("rrf_k", "k_vec", "k_txt", "k_final", "txt_candidates"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
                raise ValueError(f"{name} must be an integer between 1 and 100000 (got {value!r})")
        if not 0.0 <= self.time_boost <= 1.0:
            raise ValueError(f"time_boost must be between 0 and 1 (got {self.time_boost})")
        if not 0.0 <= self.conf_gain <= 100.0:
            raise ValueError(f"conf_gain must be between 0 and 100 (got {self.conf_gain})")
        if (
            isinstance(self.context_top, bool)
            or not isinstance(self.context_top, int)
            or not 0 <= self.context_top <= 100
        ):
            raise ValueError(f"context_top must be an integer between 0 and 100 (got {self.context_top!r})")
        if not 0.0 <= self.context_decay <= 1.0:
            raise ValueError(f"context_decay must be between 0 and 1 (got {self.context_decay})")
        if not 0.0 <= self.question_yield <= 1.0:
            raise ValueError(f"question_yield must be between 0 and 1 (got {self.question_yield})")
        if not 0.0 <= self.vector_query_common_share <= 1.0:
            raise ValueError(
                f"vector_query_common_share must be between 0 and 1 (got {self.vector_query_common_share})"
            )
        if not -1.0 <= self.vector_floor <= 1.0:
            raise ValueError(f"vector_floor must be between -1 and 1 (got {self.vector_floor})")
        if self.bm25_k1 < 0 or not 0.0 <= self.bm25_b <= 1.0:
            raise ValueError("bm25_k1 must be >= 0 and bm25_b between 0 and 1")
        half_lives = dict(self.recency_half_life_days)
        if any(v <= 0 for v in [*half_lives.values(), self.default_half_life_days]):
            raise ValueError("recency half-lives must be above 0 days")
        object.__setattr__(self, "recency_half_life_days", MappingProxyType(half_lives))

    @classmethod
    def resolve(cls, overrides: Mapping[str, Any] | RetrievalParams | None = None) -> RetrievalParams:
        """The deployment's settings (MEMPROJ["FUSION"], ["FUSION_ALPHA"], ...),
        then ``overrides`` (a tenant policy's values). An unknown name is refused."""
        if isinstance(overrides, RetrievalParams):
            return overrides
        from django.conf import settings

        conf = settings.MEMPROJ
        base: dict[str, Any] = {"vector_floor": vector_floor_for(str(conf.get("EMBEDDING_MODEL", "")))}
        for name, key in (
            ("fusion", "FUSION"),
            ("alpha", "FUSION_ALPHA"),
            ("keyword_scorer", "KEYWORD_SCORER"),
            ("conf_gain", "FUSION_CONF_GAIN"),
            ("time_boost", "TIME_BOOST"),
        ):
            if key in conf:
                base[name] = conf[key]
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides or {}) - known)
        if unknown:
            raise ValueError(f"unknown retrieval parameter(s): {', '.join(unknown)}")
        return cls(**{**base, **dict(overrides or {})})

    def with_(self, **changes: Any) -> RetrievalParams:
        return replace(self, **changes)

    def half_life(self, kind: str) -> float:
        return self.recency_half_life_days.get(kind, self.default_half_life_days)


def fuse_rrf(hit: ChannelHit, k: int = RRF_K) -> float:
    """Reciprocal rank fusion, normalised to [0, 1] (1 = first in both channels);
    a hit whose vector is pending counts its keyword rank in both."""
    total = 0.0
    vector_rank = hit.text_rank if hit.vector_pending else hit.vector_rank
    if vector_rank is not None:
        total += 1.0 / (k + vector_rank)
    if hit.text_rank is not None:
        total += 1.0 / (k + hit.text_rank)
    return total / (2.0 / (k + 1))


def squash_text(value: float | None) -> float:
    """Keyword scores (cover density, BM25) are unbounded; map to [0, 1)."""
    v = max(0.0, value or 0.0)
    return v / (1.0 + v)


def has_evidence(hit: ChannelHit, floor: float) -> bool:
    """A keyword match, or a vector similarity at or above ``floor``."""
    if (hit.text_rank_value or 0.0) > 0.0:
        return True
    return hit.vector_similarity is not None and hit.vector_similarity >= floor and hit.vector_similarity > 0.0


def with_evidence(hits: Mapping[K, ChannelHit], floor: float) -> dict[K, ChannelHit]:
    """The hits that match the query in at least one channel (``has_evidence``)."""
    return {key: hit for key, hit in hits.items() if has_evidence(hit, floor)}


def impute_pending(
    channels: dict[K, tuple[float, float]], hits: Mapping[K, ChannelHit]
) -> dict[K, tuple[float, float]]:
    """(S_vec, S_text) with a pending hit's S_vec set to its S_text
    (``ChannelHit.vector_pending``): a memory the vector channel could not see
    is taken to be as close as its keyword match says, so a blend of the two
    channels scores it by its keyword channel alone."""
    for key, hit in hits.items():
        if hit.vector_pending:
            channels[key] = (channels[key][1], channels[key][1])
    return channels


def channel_bests(hits: Mapping[K, ChannelHit], at_least: tuple[float, float] | None = None) -> tuple[float, float]:
    """The best (vector similarity, keyword score) among ``hits``, at least 0
    and at least ``at_least`` (an earlier page's bests)."""
    low_vec, low_txt = at_least or (0.0, 0.0)
    return (
        max([max(0.0, low_vec), *(h.vector_similarity or 0.0 for h in hits.values())]),
        max([max(0.0, low_txt), *(h.text_rank_value or 0.0 for h in hits.values())]),
    )


def normalised_channels(
    hits: Mapping[K, ChannelHit], scale: tuple[float, float] | None = None
) -> dict[K, tuple[float, float]]:
    """(S_vec, S_text) in [0, 1] for every candidate of one query: each channel's
    score divided by the best in that channel, so the best hit of a channel
    scores 1 in it whatever the channel's raw scale (cosine similarities cluster
    in 0.2-0.7 with MiniLM; BM25 is unbounded). What a formula that blends the
    channels (the hybrid fusion, pce-memory's S = alpha S_vec + (1 - alpha) S_text)
    takes as its inputs. ``scale``: bests of an earlier page of the same ranking,
    divided by when above these hits' own."""
    vec_max, txt_max = channel_bests(hits, at_least=scale)
    channels = {
        key: (
            max(0.0, hit.vector_similarity or 0.0) / vec_max if vec_max > 0 else 0.0,
            max(0.0, hit.text_rank_value or 0.0) / txt_max if txt_max > 0 else 0.0,
        )
        for key, hit in hits.items()
    }
    return impute_pending(channels, hits)


def _spread_channel(values: Mapping[K, float], how: str, depth: int | None = None) -> dict[K, float]:
    """One channel's scores over its own candidates mapped to [0, 1].
    ``minmax``: the channel's best candidate 1, and 0 at its worst candidate
    when the channel was cut at its depth (the memories beyond it scored lower:
    that is the level of "not relevant" for this query), at score 0 when it
    returned fewer (it saw every match; a small tenant's two facts with close
    scores stay close instead of becoming 1 and 0). ``dbsf``
    (distribution-based): mean - 3 sd .. mean + 3 sd clipped."""
    if not values:
        return {}
    scores = list(values.values())
    if how == "minmax":
        low, high = min(scores), max(scores)
        if depth is not None and len(scores) < depth:
            low = min(0.0, low)
    else:
        mean = sum(scores) / len(scores)
        sd = math.sqrt(sum((x - mean) ** 2 for x in scores) / len(scores))
        low, high = mean - 3 * sd, mean + 3 * sd
    if high - low <= 1e-12:
        return dict.fromkeys(values, 1.0)
    return {key: min(1.0, max(0.0, (v - low) / (high - low))) for key, v in values.items()}


def spread_channels(
    hits: Mapping[K, ChannelHit], how: str, depths: tuple[int, int] | None = None
) -> dict[K, tuple[float, float]]:
    """(S_vec, S_text) in [0, 1] for every candidate of one query, each channel
    spread over its own candidates (``_spread_channel``; ``depths`` = the
    channels' LIMITs, k_vec and k_txt); 0 in a channel that did not return the
    candidate. Unlike dividing by the best score, the vector channel's weakest
    candidate does not keep most of the best's score (MiniLM cosines cluster in
    0.2-0.7), so a strong keyword-only hit is not buried under every vector
    candidate."""
    k_vec, k_txt = depths if depths is not None else (None, None)
    vec = _spread_channel(
        {k: h.vector_similarity for k, h in hits.items() if h.vector_similarity is not None}, how, k_vec
    )
    txt = _spread_channel({k: h.text_rank_value for k, h in hits.items() if h.text_rank_value is not None}, how, k_txt)
    return impute_pending({key: (vec.get(key, 0.0), txt.get(key, 0.0)) for key in hits}, hits)


def confidence_alpha(hits: Mapping[K, ChannelHit], alpha: float, gain: float) -> float:
    """The vector channel's weight for one query under ``conf`` fusion:
    alpha / (alpha + (1 - alpha) * gain * c), c = ``keyword_coverage``. With c = 1 / gain it is
    ``alpha`` itself; a keyword hit holding all of a short question's rare
    words (c near 1) moves the weight towards the keyword channel, a long
    dialogue whose best keyword match shares a few of its words (c small)
    leaves it to the vector channel. No keyword hit: the vector channel alone;
    keyword hits without coverage (cover density): ``alpha``."""
    if not any(h.text_rank_value is not None for h in hits.values()):
        return 1.0
    coverage = keyword_coverage(hits)
    if coverage is None:
        return alpha
    keyword_weight = (1.0 - alpha) * gain * coverage
    return alpha / (alpha + keyword_weight) if alpha + keyword_weight > 0 else 1.0


def keyword_coverage(hits: Mapping[K, ChannelHit]) -> float | None:
    """How much of the query the keyword channel's answer covers: the coverage
    of its first hit (ties: the best of them). A memory further down holding
    more of the query's words does not make that answer more trustworthy.
    None without keyword hits or without coverage (cover density)."""
    coverages = [h.text_coverage for h in hits.values() if h.text_rank == 1 and h.text_coverage is not None]
    return max(coverages) if coverages else None


FUSION_FEATURES = ("bias", "coverage", "vec_gap", "txt_gap", "agree", "vec_top")


def fusion_features(hits: Mapping[K, ChannelHit]) -> tuple[float, ...]:
    """What tells, per query, which channel to trust (FUSION_FEATURES): the
    keyword channel's coverage of the query's rare-word weight, how far
    each channel's best stands out from its 10th (cosine difference; the
    share of the best BM25 score the 10th lacks), whether the channels agree
    on a top hit (one's first within the other's first five), and the best
    cosine similarity."""
    vec = sorted((h.vector_similarity for h in hits.values() if h.vector_similarity is not None), reverse=True)
    txt = sorted((h.text_rank_value for h in hits.values() if h.text_rank_value is not None), reverse=True)
    coverage = keyword_coverage(hits) or 0.0
    vec_gap = vec[0] - vec[min(9, len(vec) - 1)] if vec else 0.0
    txt_gap = 1.0 - txt[min(9, len(txt) - 1)] / txt[0] if txt and txt[0] > 0 else 0.0
    agree = any(
        (h.text_rank == 1 and (h.vector_rank or 99) <= 5) or (h.vector_rank == 1 and (h.text_rank or 99) <= 5)
        for h in hits.values()
    )
    return (1.0, coverage, vec_gap, txt_gap, float(agree), vec[0] if vec else 0.0)


# Weights of adaptive_alpha over FUSION_FEATURES, fitted by bench/fusion_fit.py
# on the five development sets (every feature: with one set left out, three of
# the five fits are these weights, and the held-out margins are below the
# better channel only at LongMemEval's R@1; docs/retrieval-quality.md).
ADAPTIVE_WEIGHTS: tuple[float, ...] = (0.18, 0.25, 9.43, -4.34, 0.77, 0.55)


def adaptive_alpha(hits: Mapping[K, ChannelHit], weights: tuple[float, ...]) -> float:
    """The vector channel's weight for one query: a logistic function of its
    ``fusion_features``. Only one channel returned anything: that channel."""
    if not any(h.text_rank_value is not None for h in hits.values()):
        return 1.0
    if not any(h.vector_similarity is not None for h in hits.values()):
        return 0.0
    z = sum(w * f for w, f in zip(weights, fusion_features(hits), strict=True))
    return sigmoid(z)


def fuse_all(hits: Mapping[K, ChannelHit], params: RetrievalParams) -> dict[K, float]:
    """The fusion (``_fuse``), then the query's time preference if it has one,
    then the neighbouring turns of the top hits (``with_context``)."""
    return with_context(
        time_boosted(_fuse(hits, params), hits, params.time_boost), hits, params.context_decay, params.question_yield
    )


def with_context(
    fused: dict[K, float], hits: Mapping[K, ChannelHit], decay: float, question_yield: float = 0.0
) -> dict[K, float]:
    """A turn next to a top hit in the same session (``ChannelHit.context_of``)
    scores at least ``decay`` x that hit's score: in a conversation of short
    turns the answer is often the reply to the turn that matches ("What did you
    recommend?" matches the request, the reply holds it), or the turn before.
    A next turn that answers a top hit's question (``ChannelHit.answers``)
    takes its score, and the question keeps ``question_yield`` of it."""
    if not any(hit.context_of for hit in hits.values()):
        return fused
    out = dict(fused)
    if decay > 0:
        for key, hit in hits.items():
            for parent in hit.context_of:
                if parent in fused and key in out:
                    out[key] = max(out[key], decay * fused[parent])
    if question_yield > 0:
        for key, hit in hits.items():
            for parent in hit.answers:
                if parent in fused and key in out:
                    out[key] = max(out[key], fused[parent])
                    out[parent] = min(out[parent], question_yield * fused[parent])
    return out


def time_boosted(fused: dict[K, float], hits: Mapping[K, ChannelHit], boost: float) -> dict[K, float]:
    """(1 - boost) * relevance + boost * time fit, when the query had a time
    expression (memory/temporal.py); the fused relevance unchanged otherwise."""
    if boost <= 0 or all(h.time_fit is None for h in hits.values()):
        return fused
    return {key: (1.0 - boost) * value + boost * (hits[key].time_fit or 0.0) for key, value in fused.items()}


def _fuse(hits: Mapping[K, ChannelHit], params: RetrievalParams) -> dict[K, float]:
    """Hybrid relevance in [0, 1] of every candidate of one query, with the
    call's fusion. Fusion is a property of the candidate set (each channel is
    spread over its own candidates), so it is computed for all of them at once.
    ``adaptive`` and ``conf``: a * S_vec + (1 - a) * S_text over min-max spread
    channels, the vector weight a set per query (``adaptive_alpha``,
    ``confidence_alpha``); ``rrf``: reciprocal rank fusion."""
    if params.fusion == "rrf":
        return {key: fuse_rrf(hit, params.rrf_k) for key, hit in hits.items()}
    if params.fusion == "adaptive":
        a = adaptive_alpha(hits, ADAPTIVE_WEIGHTS)
    else:
        a = confidence_alpha(hits, params.alpha, params.conf_gain)
    spread = spread_channels(hits, "minmax", (params.k_vec, params.k_txt))
    return {key: a * v + (1.0 - a) * t for key, (v, t) in spread.items()}


def channel_relevance(hits: Mapping[K, ChannelHit], mode: str, params: RetrievalParams) -> dict[K, float]:
    """Relevance in [0, 1] per search mode: one channel's own score, or the fusion."""
    if mode == "semantic":
        return {key: max(0.0, hit.vector_similarity or 0.0) for key, hit in hits.items()}
    if mode == "keyword":
        return {key: squash_text(hit.text_rank_value) for key, hit in hits.items()}
    return fuse_all(hits, params)


# Outcome learning (roampal v0.3.5, shared by every dialect's feedback).
UNSCORED_OUTCOME_SCORE = 0.5  # roampal: an unscored memory starts at 0.5
OUTCOME_SCALE_DAYS = 30.0
WILSON_Z = 1.96


def outcome_score_after(score: float, delta: float, days_since_used: float) -> float:
    """roampal: score += delta / (1 + days since last use / 30), clamped to [0, 1]."""
    return min(1.0, max(0.0, score + delta / (1.0 + days_since_used / OUTCOME_SCALE_DAYS)))


def wilson_lower_bound(successes: float, uses: int, z: float = WILSON_Z) -> float:
    """Lower bound of the Wilson score interval; 0.5 for an unused memory (roampal v0.3.5).
    Reference values: (1, 1) 0.2065, (90, 100) 0.8256, (50, 100) 0.4038."""
    if uses <= 0:
        return 0.5
    p = min(1.0, max(0.0, successes / uses))
    denominator = 1 + z * z / uses
    centre = p + z * z / (2 * uses)
    margin = z * math.sqrt((p * (1 - p) + z * z / (4 * uses)) / uses)
    return (centre - margin) / denominator


# Roampal collections (roampal v0.3.5's promotion_service / scoring_service).
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
    """roampal v0.3.5's final_rank_score: books by similarity alone, memory_bank by
    similarity and quality, the scored collections by similarity and learned score."""
    if collection == "books":
        return similarity
    if collection == "memory_bank":
        q = quality if quality is not None else 0.5
        return (1 - MEMORY_BANK_QUALITY_WEIGHT) * similarity + MEMORY_BANK_QUALITY_WEIGHT * q
    weight = learned_weight(uses, score)
    return (1 - weight) * similarity + weight * score


# pce-memory v0.14.0 activation ranking: S = alpha * S_vec + (1 - alpha) * S_text,
# then g = (0.6 + 0.4 sigma(utility)) * (0.5 + 0.5 confidence) * (0.3 + 0.7 recency)
# * quality, recency = exp(-ln 2 * age / half-life of the claim's kind). The seed's
# `quality` term (documented, never implemented upstream) is how well the claim
# has proved itself, 0.5 + 0.5 * Wilson lower bound of its successes over uses,
# applied when the policy's rerank.use_quality is on (1.0 when off).
PCE_HALF_LIFE_DAYS = {"fact": 120.0, "task": 14.0, "preference": 90.0, "policy_hint": 365.0}
PCE_DEFAULT_HALF_LIFE_DAYS = 30.0


@dataclass(frozen=True)
class ActivationScore:
    text: float
    vector: float
    combined: float
    utility: float
    confidence: float
    quality: float
    recency: float
    g: float

    @property
    def score(self) -> float:
        return self.combined * self.g


def sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, value))))


def activation_score(
    *,
    s_vec: float,
    s_text: float,
    alpha: float,
    utility: float,
    confidence: float,
    age_days: float,
    half_life_days: float,
    use_quality: bool,
    wilson: float = 0.5,
) -> ActivationScore:
    """Every term in [0, 1] (utility is reported raw); ``score`` = combined * g."""
    s_vec, s_text = min(1.0, max(0.0, s_vec)), min(1.0, max(0.0, s_text))
    combined = alpha * s_vec + (1.0 - alpha) * s_text
    confidence = min(1.0, max(0.0, confidence))
    quality = 0.5 + 0.5 * min(1.0, max(0.0, wilson)) if use_quality else 1.0
    recency_value = math.exp(-math.log(2) * max(0.0, age_days) / max(half_life_days, 1e-9))
    g = (0.6 + 0.4 * sigmoid(utility)) * (0.5 + 0.5 * confidence) * (0.3 + 0.7 * recency_value) * quality
    return ActivationScore(
        text=s_text,
        vector=s_vec,
        combined=combined,
        utility=utility,
        confidence=confidence,
        quality=quality,
        recency=recency_value,
        g=g,
    )
