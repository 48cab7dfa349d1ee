"""Hybrid retrieval in PostgreSQL: one query per channel (pgvector HNSW cosine
and tsvector GIN), both restricted by tenant, kind, scope, validity, expiry and
effective confidence in SQL, fused with the formulas of ``memory.scoring``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from memory.models import effective_confidence_sql
from memory.scoring import ChannelHit
from policy.caller import Caller

# Effective confidence in SQL, the same formula as scoring.effective_confidence.
EFFECTIVE_CONFIDENCE_SQL = effective_confidence_sql("m", "%(now)s")


@dataclass(frozen=True)
class RetrievalFilter:
    kinds: Sequence[str]
    now: datetime
    scopes: Sequence[str] | None = None
    namespace: Sequence[str] | None = None
    butler: str | None = None
    tags_all: Sequence[str] | None = None
    min_confidence: float | None = None
    exclude_maturity: Sequence[str] | None = None
    collections: Sequence[str] | None = None  # seed 003 roampal collections
    created_after: datetime | None = None  # seed 003 days_back


def _where(caller: Caller, flt: RetrievalFilter) -> tuple[str, dict]:
    clauses = [
        "m.tenant_id = %(tenant)s",
        "m.kind = ANY(%(kinds)s)",
        "m.validity = 'active'",
        "(m.expires_at IS NULL OR m.expires_at > %(now)s)",
    ]
    params: dict = {"tenant": caller.tenant_id, "kinds": list(flt.kinds), "now": flt.now}
    if flt.scopes:
        clauses.append("m.scope = ANY(%(scopes)s)")
        params["scopes"] = list(flt.scopes)
    if flt.namespace is not None:
        clauses.append("m.namespace = %(namespace)s::varchar[]")
        params["namespace"] = list(flt.namespace)
    if flt.butler:
        clauses.append("m.butler = %(butler)s")
        params["butler"] = flt.butler
    if flt.tags_all:
        clauses.append("m.tags @> %(tags)s::varchar[]")
        params["tags"] = list(flt.tags_all)
    if flt.min_confidence is not None:
        clauses.append(f"{EFFECTIVE_CONFIDENCE_SQL} >= %(min_conf)s")
        params["min_conf"] = flt.min_confidence
    if flt.exclude_maturity:
        clauses.append("NOT (m.maturity = ANY(%(excl_maturity)s))")
        params["excl_maturity"] = list(flt.exclude_maturity)
    if flt.collections:
        clauses.append("m.collection = ANY(%(collections)s)")
        params["collections"] = list(flt.collections)
    if flt.created_after is not None:
        clauses.append("m.created_at >= %(created_after)s")
        params["created_after"] = flt.created_after
    return " AND ".join(clauses), params


def vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


_iterative_scan_supported: bool | None = None


def _enable_iterative_scan(cursor) -> None:  # type: ignore[no-untyped-def]
    """pgvector >= 0.8 keeps scanning the HNSW graph until enough rows pass the
    tenant filter; older servers (a user's PostgreSQL) simply skip this."""
    global _iterative_scan_supported
    if _iterative_scan_supported is None:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
        major_minor = tuple(int(p) for p in (row[0] if row else "0.0").split(".")[:2])
        _iterative_scan_supported = major_minor >= (0, 8)
    if _iterative_scan_supported:
        cursor.execute("SET LOCAL hnsw.iterative_scan = 'relaxed_order'")
    cursor.execute("SET LOCAL hnsw.ef_search = 100")


def _competition_ranks(rows: list[tuple]) -> list[tuple[tuple, int]]:
    """Rows arrive best first; 1-based ranks where equal values share a rank ("1224" ranking), so that
    identical memories fuse to identical scores and the seed's tie-breakers
    (created_at DESC, id ASC) decide, not the arbitrary order within a channel."""
    ranked: list[tuple[tuple, int]] = []
    previous: object = None
    rank = 0
    for position, row in enumerate(rows, start=1):
        if position == 1 or row[1] != previous:
            rank = position
        previous = row[1]
        ranked.append((row, rank))
    return ranked


def channel_hits(
    *,
    caller: Caller,
    flt: RetrievalFilter,
    query_text: str | None,
    query_vector: Sequence[float] | None,
    k_vec: int,
    k_txt: int,
) -> dict[uuid.UUID, ChannelHit]:
    """Top k_vec by cosine similarity and top k_txt by keyword rank, merged by id."""
    where, params = _where(caller, flt)
    hits: dict[uuid.UUID, ChannelHit] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        if query_vector is not None and k_vec > 0:
            _enable_iterative_scan(cursor)
            params_v = dict(params, qvec=vector_literal(query_vector), k=k_vec)
            # {where} is built from fixed fragments; every value is a bound parameter.
            cursor.execute(
                f"""
                SELECT id, 1 - distance AS similarity FROM (
                    SELECT m.id, m.embedding <=> %(qvec)s::vector AS distance
                    FROM memory_memory m
                    WHERE {where} AND m.embedding IS NOT NULL
                    ORDER BY distance
                    LIMIT %(k)s
                ) ranked ORDER BY distance, id
                """,
                params_v,
            )
            for (memory_id, similarity), rank in _competition_ranks(cursor.fetchall()):
                hits[memory_id] = ChannelHit(vector_similarity=float(similarity), vector_rank=rank)
        if query_text and k_txt > 0:
            # Any query word may match (OR), ranked by cover density: plainto_tsquery
            # alone would demand every word, which drops most natural-language queries.
            params_t = dict(params, q=query_text, k=k_txt)
            cursor.execute(
                f"""
                WITH q AS (
                    SELECT nullif(replace(plainto_tsquery('english', %(q)s)::text, '&', '|'), '')::tsquery AS tsq
                )
                SELECT m.id, ts_rank_cd(m.search_vector, q.tsq, 32) AS rank
                FROM memory_memory m, q
                WHERE {where} AND q.tsq IS NOT NULL AND m.search_vector @@ q.tsq
                ORDER BY rank DESC, m.id
                LIMIT %(k)s
                """,
                params_t,
            )
            for (memory_id, value), rank in _competition_ranks(cursor.fetchall()):
                previous = hits.get(memory_id, ChannelHit())
                hits[memory_id] = ChannelHit(
                    vector_similarity=previous.vector_similarity,
                    vector_rank=previous.vector_rank,
                    text_rank_value=float(value),
                    text_rank=rank,
                )
    return hits
