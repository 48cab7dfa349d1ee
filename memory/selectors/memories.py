"""Reads: search, recall, stats and context over the caller's tenant."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min, Q
from django.utils import timezone

from memory import scoring, validation
from memory.embeddings import embed_one
from memory.errors import EmbeddingUnavailable, InvalidArgument, NotFound, PermissionDenied
from memory.models import ConflictCandidate, Kind, Maturity, Memory, Validity
from memory.read_model import effective_confidence_of
from memory.retrieval import RetrievalFilter, channel_hits
from memory.scoring import ChannelHit
from policy.caller import Caller

SEARCH_MODES = ("hybrid", "semantic", "keyword")
DEFAULT_K_VEC = 48
DEFAULT_K_TXT = 48


def require_read(caller: Caller) -> None:
    if not caller.has_scope("read"):
        raise PermissionDenied("this token cannot read memories; ask an admin for a token with the 'read' scope.")


@dataclass
class ScoredMemory:
    memory: Memory
    score: float
    relevance: float
    effective_confidence: float | None
    hit: ChannelHit


def tie_break_key(item: ScoredMemory) -> tuple:
    """Seed 000: score DESC, created_at DESC, id ASC."""
    return (-round(item.score, 12), -item.memory.created_at.timestamp(), str(item.memory.id))


def _relevance(hit: ChannelHit, mode: str) -> float:
    if mode == "semantic":
        return max(0.0, hit.vector_similarity or 0.0)
    if mode == "keyword":
        value = hit.text_rank_value or 0.0
        return value / (1.0 + value)
    return scoring.fuse(hit)


def query_vector(query: str, mode: str) -> list[float] | None:
    if mode == "keyword":
        return None
    try:
        return embed_one(query)
    except EmbeddingUnavailable:
        if mode == "semantic":
            raise
        return None  # hybrid degrades to keyword-only rather than failing the read


def _candidates(
    *, caller: Caller, query: str, mode: str, flt: RetrievalFilter, k_vec: int, k_txt: int
) -> list[tuple[Memory, ChannelHit]]:
    vector = query_vector(query, mode)
    hits = channel_hits(
        caller=caller,
        flt=flt,
        query_text=query if mode != "semantic" else None,
        query_vector=vector,
        k_vec=k_vec if mode != "keyword" else 0,
        k_txt=k_txt if mode != "semantic" else 0,
    )
    rows = Memory.objects.for_caller(caller).without_vectors().in_bulk(list(hits))
    return [(rows[pk], hit) for pk, hit in hits.items() if pk in rows]


def memory_search(
    *,
    caller: Caller,
    query: str,
    types: Sequence[str] | None = None,
    scope: str | None = None,
    mode: str = "hybrid",
    limit: int = 20,
    min_confidence: float | None = None,
    namespace: Sequence[str] | None = None,
    tags: Sequence[str] | None = None,
    collections: Sequence[str] | None = None,
    created_after: datetime | None = None,
) -> list[ScoredMemory]:
    require_read(caller)
    query = validation.query(query)
    kinds = [validation.kind(t) for t in (types or Kind.values)]
    if not kinds:
        raise InvalidArgument("types must name at least one of episode, fact, rule.")
    mode = validation.choice(mode, field="mode", allowed=SEARCH_MODES)
    limit = validation.limit(limit)
    if scope is not None:
        scope = validation.label(scope, field="scope")
    if min_confidence is not None:
        min_confidence = validation.number(min_confidence, field="min_confidence", low=0, high=1)
    now = timezone.now()
    flt = RetrievalFilter(
        kinds=kinds,
        now=now,
        scopes=sorted({"global", scope}) if scope else None,
        namespace=namespace,
        tags_all=validation.tags(tags) or None,
        min_confidence=min_confidence,
        collections=collections,
        created_after=created_after,
    )
    k = max(limit, 1)
    scored = [
        ScoredMemory(
            memory=memory,
            score=_relevance(hit, mode),
            relevance=_relevance(hit, mode),
            effective_confidence=effective_confidence_of(memory, now),
            hit=hit,
        )
        for memory, hit in _candidates(
            caller=caller, query=query, mode=mode, flt=flt, k_vec=max(DEFAULT_K_VEC, k), k_txt=max(DEFAULT_K_TXT, k)
        )
    ]
    scored.sort(key=tie_break_key)
    return scored[:limit]


def composite_rank(candidates: list[tuple[Memory, ChannelHit]], now: datetime) -> list[ScoredMemory]:
    out = []
    for memory, hit in candidates:
        relevance = scoring.fuse(hit)
        confidence = effective_confidence_of(memory, now)
        reference_time = memory.last_confirmed_at or memory.created_at
        out.append(
            ScoredMemory(
                memory=memory,
                score=scoring.recall_score(
                    relevance=relevance,
                    importance=memory.importance,
                    recency_value=scoring.recency(reference_time, now),
                    confidence=1.0 if confidence is None else confidence,
                ),
                relevance=relevance,
                effective_confidence=confidence,
                hit=hit,
            )
        )
    out.sort(key=tie_break_key)
    return out


def memory_recall_candidates(
    *, caller: Caller, topic: str, scope: str | None = None, limit: int = 10, kinds: Sequence[str] = ("fact", "rule")
) -> list[ScoredMemory]:
    """Composite-scored facts and rules (seed 000 memory_recall), without side effects."""
    require_read(caller)
    topic = validation.query(topic, field="topic")
    limit = validation.limit(limit)
    if scope is not None:
        scope = validation.label(scope, field="scope")
    now = timezone.now()
    flt = RetrievalFilter(kinds=list(kinds), now=now, scopes=sorted({"global", scope}) if scope else None)
    candidates = _candidates(
        caller=caller, query=topic, mode="hybrid", flt=flt, k_vec=max(DEFAULT_K_VEC, limit), k_txt=DEFAULT_K_TXT
    )
    return composite_rank(candidates, now)[:limit]


def memory_fetch(*, caller: Caller, kind: str, memory_id: object) -> Memory:
    require_read(caller)
    kind = validation.kind(kind)
    pk = validation.memory_id(memory_id)
    memory = Memory.objects.for_caller(caller).filter(pk=pk, kind=kind).without_vectors().first()
    if memory is None:
        raise NotFound(f"no {kind} with id {pk} in this tenant; check the type and id, or use memory_search.")
    return memory


def memory_stats(*, caller: Caller, scope: str | None = None) -> dict:
    require_read(caller)
    if scope is not None:
        scope = validation.label(scope, field="scope")
    now = timezone.now()
    base = Memory.objects.for_caller(caller).in_scopes(scope)
    live = Q(validity=Validity.ACTIVE)
    not_expired = Q(expires_at__isnull=True) | Q(expires_at__gt=now)

    fact_rows = base.filter(kind=Kind.FACT).aggregate(
        total=Count("id"),
        superseded=Count("id", filter=Q(validity=Validity.SUPERSEDED)),
        retracted=Count("id", filter=Q(validity=Validity.RETRACTED)),
    )
    states = (
        base.filter(kind=Kind.FACT)
        .filter(live)
        .with_effective_confidence(now)
        .aggregate(
            active=Count("id", filter=Q(effective_confidence__gte=scoring.FADING_BELOW)),
            fading=Count(
                "id",
                filter=Q(effective_confidence__gte=scoring.EXPIRED_BELOW)
                & Q(effective_confidence__lt=scoring.FADING_BELOW),
            ),
            expired=Count("id", filter=Q(effective_confidence__lt=scoring.EXPIRED_BELOW)),
        )
    )

    rules = base.filter(kind=Kind.RULE).aggregate(
        total=Count("id"),
        active=Count("id", filter=live),
        **{m: Count("id", filter=live & Q(maturity=m)) for m in Maturity.values},
    )
    episodes = base.filter(kind=Kind.EPISODE).aggregate(
        total=Count("id"),
        unconsolidated=Count("id", filter=live & not_expired & Q(consolidated_at__isnull=True)),
        expired=Count("id", filter=Q(expires_at__lte=now)),
        oldest_unconsolidated=Min("created_at", filter=live & not_expired & Q(consolidated_at__isnull=True)),
    )
    oldest = episodes.pop("oldest_unconsolidated")
    pending_embeddings = base.exclude(embedding_status="ready").count()
    open_conflicts = ConflictCandidate.objects.for_caller(caller).open().filter(memory__in=base.values("pk")).count()
    return {
        "scope": scope,
        "facts": {
            "total": fact_rows["total"],
            "active": states["active"],
            "fading": states["fading"],
            "expired": states["expired"],
            "superseded": fact_rows["superseded"],
            "retracted": fact_rows["retracted"],
        },
        "rules": {
            "total": rules["total"],
            "candidate": rules["candidate"],
            "established": rules["established"],
            "proven": rules["proven"],
            "anti_pattern": rules["anti_pattern"],
        },
        "episodes": {
            "total": episodes["total"],
            "unconsolidated": episodes["unconsolidated"],
            "expired": episodes["expired"],
            "backlog_age_seconds": (now - oldest).total_seconds() if oldest else 0.0,
            "oldest_unconsolidated_at": oldest.isoformat() if oldest else None,
        },
        "pending_embeddings": pending_embeddings,
        "open_conflicts": open_conflicts,
    }


def recent_episodes(*, caller: Caller, butler: str, now: datetime, limit: int = 50) -> list[Memory]:
    return list(
        Memory.objects.for_caller(caller)
        .retrievable(now)
        .filter(kind=Kind.EPISODE, butler=butler)
        .without_vectors()
        .order_by("-created_at", "id")[:limit]
    )


def memory_ids(items: Sequence[ScoredMemory]) -> list[uuid.UUID]:
    return [item.memory.id for item in items]
