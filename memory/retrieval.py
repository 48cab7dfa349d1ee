"""Hybrid retrieval in PostgreSQL: both channels (pgvector HNSW cosine and
tsvector GIN with BM25) in one statement, both restricted by tenant, kind,
scope, validity, expiry and effective confidence in SQL, fused with the
formulas of ``memory.scoring`` under the call's ``RetrievalParams``."""

from __future__ import annotations

import functools
import heapq
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from psycopg.sql import Literal

from memory import attribute_filter, embedtext, temporal
from memory.models import (
    COLLECTION_OF_KIND,
    EMBEDDING_DIM,
    GRAPH_GROUP_SQL,
    GRAPH_VECTOR_SQL,
    KINDS_WITH_OWN_GRAPH,
    Kind,
    effective_confidence_sql,
    graph_group_name,
    graph_group_of,
    kind_graph_name,
    vector_graph_names,
)
from memory.scoring import ChannelHit, RetrievalParams, fuse_all, with_evidence
from memproj.dbthreads import side_by_side
from memproj.pgtypes import pgvector_version
from policy.boundary import DEFAULT_USE_TAGS, boundary_for
from policy.caller import Caller

# Effective confidence in SQL, the same formula as scoring.effective_confidence.
EFFECTIVE_CONFIDENCE_SQL = effective_confidence_sql("m", "%(now)s")


@dataclass(frozen=True)
class RetrievalFilter:
    kinds: Sequence[str]
    now: datetime
    scopes: Sequence[str] | None = None
    # Scopes a read leaves out (a claim read's `project` is every scope but these).
    scopes_excluded: Sequence[str] | None = None
    namespace: Sequence[str] | None = None
    butler: str | None = None
    tags_all: Sequence[str] | None = None
    min_confidence: float | None = None
    exclude_maturity: Sequence[str] | None = None
    collections: Sequence[str] | None = None  # roampal v0.3.5 collections
    created_after: datetime | None = None  # roampal v0.3.5 days_back
    # pce-memory v0.14.0 use tags of this read (boundary-first, issue 11); the default is answer:task.
    use_tags: Sequence[str] = DEFAULT_USE_TAGS
    # LangGraph store semantics: namespaces starting with this tuple.
    namespace_prefix: Sequence[str] | None = None
    # A stored value's attributes, as LangGraph's store ``filter`` (memory.attribute_filter).
    attributes: attribute_filter.AttributeFilter | None = None


def boundary_where(caller: Caller, use_tags: Sequence[str]) -> tuple[str, dict]:
    """Boundary-first (issue 11): only the classes the caller's tenant policy lets
    these use tags see. Always applied, so no read path can forget it."""
    visible = boundary_for(caller.policy, use_tags).visible_sorted
    return "m.boundary_class = ANY(%(boundary_classes)s)", {"boundary_classes": visible}


# The namespace prefix filter (langmem). The slice alone has no statistics: the
# planner takes it at the default equality selectivity (0.5%) and, expecting a
# near-empty match, trades the vector channel's HNSW scan for a seq scan + sort of
# the whole tenant (issue 13: 0.35 s at 100k memories, 4 s at 1M, for a namespace
# holding 15% of them). The equality disjunct selects no other rows (a namespace
# equal to the prefix starts with it) but is estimated from the column's
# statistics, so memories stored exactly at the prefix (the common case) count at
# their real share and the HNSW scan is kept; a namespace that really is rare
# still estimates small and gets the exact scan, which is the faster plan there
# and the only complete one (an iterative scan stops at hnsw.max_scan_tuples).
# The namespace statistics (migration 0047) count tenant, kind, namespace and its
# slices of depth 1 to 3 together, so both disjuncts are estimated at the rows the
# tenant has there, not at the namespace's share of every tenant's rows.
# Without iterative scans (pgvector < 0.8) the slice stays alone: there an HNSW
# scan would return only the prefix's share of the ef_search nearest rows.
_NS_PREFIX_SLICE = "m.namespace[1:%(ns_depth)s] = %(ns_prefix)s::varchar[]"
_NS_PREFIX_ESTIMABLE = f"(m.namespace = %(ns_prefix)s::varchar[] OR {_NS_PREFIX_SLICE})"


_KINDS_SQL = "m.kind = ANY(%(kinds)s)"


def keyword_kinds_sql(kinds: Sequence[str]) -> str:
    """The keyword statement's condition on the kinds: one equality per kind,
    ORed, so the planner proves each kind's partial GIN index
    (memory.models._kind_search_gin) and can take their union, or the index of
    every memory where that costs less; as one ``= ANY`` of several kinds no
    partial index is proved. Only the model's own kinds are written into the
    text (as literals); no memory is of another."""
    wanted = sorted(set(kinds) & set(Kind.values))
    if not wanted:
        return "false"
    return "(" + " OR ".join(f"m.kind = '{kind}'" for kind in wanted) + ")"


def _where(caller: Caller, flt: RetrievalFilter, *, kinds_sql: str | None = _KINDS_SQL) -> tuple[str, dict]:
    """The read's filter; without a condition on the kinds (``kinds_sql``
    None) for a probe of one kind's graph, which names its kind itself: the
    planner multiplies the selectivities of two predicates on the kind as if
    they were independent (a facts read of a 100k tenant was estimated at 589
    rows for 14,901, and sorted every fact by distance instead of walking the
    facts' graph: 74 ms instead of ~3)."""
    clauses = [
        "m.tenant_id = %(tenant)s",
        *([kinds_sql] if kinds_sql else []),
        "m.validity = 'active'",
        "(m.expires_at IS NULL OR m.expires_at > %(now)s)",
    ]
    params: dict = {"tenant": caller.tenant_id, "kinds": list(flt.kinds), "now": flt.now}
    boundary_clause, boundary_params = boundary_where(caller, flt.use_tags)
    clauses.append(boundary_clause)
    params.update(boundary_params)
    if flt.scopes:
        clauses.append("m.scope = ANY(%(scopes)s)")
        params["scopes"] = list(flt.scopes)
    if flt.scopes_excluded:
        clauses.append("m.scope <> ALL(%(scopes_excluded)s)")
        params["scopes_excluded"] = list(flt.scopes_excluded)
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
    if flt.namespace_prefix:
        clauses.append(_NS_PREFIX_ESTIMABLE if iterative_scan_supported() else _NS_PREFIX_SLICE)
        params["ns_depth"], params["ns_prefix"] = len(flt.namespace_prefix), list(flt.namespace_prefix)
    if flt.attributes:
        condition, attribute_params = attribute_filter.where(flt.attributes, table="m")
        clauses.append(condition)
        params.update(attribute_params)
    if flt.exclude_maturity:
        clauses.append("NOT (m.maturity = ANY(%(excl_maturity)s))")
        params["excl_maturity"] = list(flt.exclude_maturity)
    if flt.collections:
        # The SQL twin of MemoryQuerySet.in_collections (stored or derived from the kind).
        # As a CASE, which no index matches: written as an OR, the planner built a
        # bitmap of every fact of the tenant (the kind-derived memory_bank) to AND
        # with the keyword matches (issue 13: 50-60 ms at 1M memories) instead of
        # taking the keyword index of the read's kinds and checking the collection.
        clauses.append(
            "(CASE WHEN m.collection = '' THEN m.kind = ANY(%(ckinds)s) ELSE m.collection = ANY(%(collections)s) END)"
        )
        params["collections"] = list(flt.collections)
        params["ckinds"] = [k for k, name in COLLECTION_OF_KIND.items() if name in flt.collections]
    if flt.created_after is not None:
        clauses.append("m.occurred_at >= %(created_after)s")  # when it happened (an import keeps it)
        params["created_after"] = flt.created_after
    return " AND ".join(clauses), params


@functools.cache
def _vector_format(dimensions: int) -> str:
    return "[" + ",".join(["%.7g"] * dimensions) + "]"


def vector_literal(vector: Sequence[float]) -> str:
    # One %-format of the whole vector: a search formats its query once per
    # vector statement, and a per-number format was a visible share of its Python time.
    return _vector_format(len(vector)) % tuple(vector)


_iterative_scan_supported: bool | None = None


def iterative_scan_supported() -> bool:
    """pgvector >= 0.8 (iterative index scans), asked once per process. Without
    them an HNSW scan only filters the ef_search nearest rows, so filters the
    planner would otherwise trust with the index keep their exact plan there."""
    global _iterative_scan_supported
    if _iterative_scan_supported is None:
        with connection.cursor() as cursor:
            _iterative_scan_supported = pgvector_version(cursor) >= (0, 8)
    return _iterative_scan_supported


# The keyword channel ANDs the GIN bitmap with the tenant/kind index's; at 1M
# memories in a tenant that bitmap (300k facts) overflows the default 4MB work_mem
# and turns lossy, so the heap scan rechecks every row of the lossy pages (issue 13:
# 200-300 ms of a memento read). 16MB keeps it exact; a server configured higher
# keeps its own value. For the session, set when a connection opens
# (``use_channel_session``): the keyword statement goes prepared, alone, and so
# cannot carry a SET of its own.
_WORK_MEM_SQL = (
    "SELECT set_config('work_mem', '16MB', false)"
    " WHERE pg_size_bytes(current_setting('work_mem')) < pg_size_bytes('16MB')"
)


def use_channel_session(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created``: the session settings the channel statements
    need, and prepared statements allowed where they are asked for. Django
    turns psycopg's off (``prepare_threshold`` None, for connection poolers);
    a threshold no count reaches prepares only what is sent with ``prepare=True``
    (``_PreparedCursor``): Django's own cursors bind on the client and never prepare."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(_WORK_MEM_SQL)
    if connection.connection.prepare_threshold is None:
        connection.connection.prepare_threshold = sys.maxsize


def statement_settings_sql(run_vec: bool) -> str:
    """The settings a channel statement runs with, as one string of statements
    ("" for none). pgvector >= 0.8 keeps scanning the HNSW graph until enough
    rows pass the tenant filter; older servers (a user's PostgreSQL) simply skip this."""
    if not run_vec:
        return ""
    statements = ["SET LOCAL hnsw.ef_search = 100"]
    if iterative_scan_supported():
        statements.append("SET LOCAL hnsw.iterative_scan = 'relaxed_order'")
    return "; ".join(statements)


def _statement_settings(cursor, run_vec: bool) -> None:  # type: ignore[no-untyped-def]
    """The settings alone, in the caller's transaction (the bench scripts)."""
    if prefix := statement_settings_sql(run_vec):
        cursor.execute(prefix)


# Between the settings and the channel statement in the one query string a
# channel sends (``split_settings`` undoes it for tools that EXPLAIN the statement).
_SETTINGS_END = ";\n-- channel statement\n"


def with_settings(sql: str, run_vec: bool) -> str:
    """The channel statement preceded by its settings, to be sent as one query."""
    prefix = statement_settings_sql(run_vec)
    return prefix + _SETTINGS_END + sql if prefix else sql


def split_settings(sql: str) -> tuple[str, str]:
    """A query ``with_settings`` made, as its settings (what
    ``statement_settings_sql`` gave) and the channel statement; any other query
    as no settings ("") and itself."""
    if _SETTINGS_END not in sql:
        return "", sql
    prefix, statement = sql.split(_SETTINGS_END, 1)
    return prefix, statement


# The vector channel's question without the words most of the tenant's memories
# share. Embedded, a word that is in a large share of them (a speaker's name in a
# log of "<name> said, ..." turns is in half) pulls the question towards a whole
# side of a conversation rather than the turn asked about, and when the question
# names the wrong person (who said it is misremembered) towards the wrong side.
# The keyword channel keeps every word: its IDF already weighs such words down.
# A word counts when it is one term of the tenant's keyword statistics, in more
# than ``vector_query_common_share`` of its memories and in at least
# COMMON_WORD_MIN_MEMORIES (a share of a handful of memories says little). A
# text longer than a question (temporal.MAX_QUERY_CHARS: a context such as a
# dialogue) is embedded as it is.
COMMON_WORD_MIN_MEMORIES = 10
QUERY_WORD = re.compile(r"[\w']+")
_COMMON_TERMS_SQL = """
    SELECT s.term
    FROM memory_termstat s JOIN memory_tenantstat ts ON ts.tenant_id = s.tenant_id
    WHERE s.tenant_id = %(tenant)s AND s.df >= %(min_df)s AND s.df > %(share)s * ts.docs
"""
_COMMON_WORDS_SQL = """
    SELECT w.word
    FROM unnest(%(words)s::text[]) AS w(word), memproj_query_terms(w.word) AS q(terms)
    WHERE cardinality(q.terms) = 1 AND q.terms[1] = ANY(%(common)s::text[])
"""
# A tenant's common terms change slowly: a process reads them at most once a
# minute per tenant, so a tenant without any (a store of varied facts) costs its
# questions no statement, and a word that becomes common is left out within a minute.
_COMMON_TERMS_TTL_S = 60.0
_COMMON_TERMS_KEPT = 4096
_common_terms: dict[tuple[uuid.UUID, float], tuple[float, tuple[str, ...]]] = {}


def common_terms(tenant_id: uuid.UUID, share: float) -> tuple[str, ...]:
    """The terms in more than ``share`` of the tenant's memories and in at least
    COMMON_WORD_MIN_MEMORIES of them, as this process last read them (above)."""
    key = (tenant_id, share)
    now = time.monotonic()
    kept = _common_terms.get(key)
    if kept is not None and now - kept[0] <= _COMMON_TERMS_TTL_S:
        return kept[1]
    rows = _read_rows(_COMMON_TERMS_SQL, {"tenant": tenant_id, "min_df": COMMON_WORD_MIN_MEMORIES, "share": share})
    terms = tuple(sorted(row[0] for row in rows))
    if len(_common_terms) >= _COMMON_TERMS_KEPT:
        _common_terms.clear()
    _common_terms[key] = (now, terms)
    return terms


# Whether a word is common, per tenant and share, for the common terms it was
# decided against (a word is analysed alone, so the answer holds while they do):
# roampal's two searches of one question, and the words questions repeat, cost
# no statement. Bounded: forgotten all at once when full.
_WORDS_KEPT = 100_000
_word_is_common: dict[tuple[uuid.UUID, float, str], tuple[tuple[str, ...], bool]] = {}


def forget_common_terms() -> None:
    """The next question reads its tenant's common terms again (tests)."""
    _common_terms.clear()
    _word_is_common.clear()


def common_words(caller: Caller, words: Collection[str], share: float) -> set[str]:
    """Those of the lower-case ``words`` that are one term of the tenant's
    keyword statistics and among its common terms (``common_terms``)."""
    terms = common_terms(caller.tenant_id, share)
    if not terms or not words:
        return set()
    found: set[str] = set()
    unknown: list[str] = []
    for word in words:
        kept = _word_is_common.get((caller.tenant_id, share, word))
        if kept is not None and kept[0] is terms:
            if kept[1]:
                found.add(word)
        else:
            unknown.append(word)
    if unknown:
        # Prepared: planning it (its SQL function inlined) costs more than running it.
        rows = _prepared_read(_COMMON_WORDS_SQL, {"words": sorted(unknown), "common": list(terms)})
        common = {row[0] for row in rows}
        if len(_word_is_common) + len(unknown) > _WORDS_KEPT:
            _word_is_common.clear()
        for word in unknown:
            _word_is_common[(caller.tenant_id, share, word)] = (terms, word in common)
        found |= common
    return found


def without_words(text: str, words: Collection[str]) -> str:
    """``text`` without the lower-case ``words``, or as it is when none would be left."""
    if not words:
        return text
    kept = " ".join(QUERY_WORD.sub(lambda m: "" if m.group(0).lower() in words else m.group(0), text).split())
    return kept if QUERY_WORD.search(kept) else text


def vector_query_text(caller: Caller, text: str, params: RetrievalParams) -> str:
    """What the vector channel embeds for the question ``text``: the question
    without the words the tenant's memories most share (above), or as asked
    when it has none, when every word is one, or when it is longer than a question."""
    share = params.vector_query_common_share
    if share <= 0 or len(text) > temporal.MAX_QUERY_CHARS:
        return text
    return without_words(text, common_words(caller, {word.lower() for word in QUERY_WORD.findall(text)}, share))


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


# Each channel row's conversation: the session of an episode that has one, else
# NULL. The neighbouring-turn pass (``with_neighbours``) only raises a hit that
# is an episode of a top hit's session, so with these it sends its statement
# only when a top hit's session holds another hit.
SESSION_SQL = "CASE WHEN m.kind = 'episode' AND m.session_id <> '' THEN m.session_id END"


# Vector channel: the tenant-filtered HNSW walk, top k_vec by cosine distance
# (at the graphs' half precision, memory.models.GRAPH_VECTOR_SQL).
# A read of facts, rules or documents only probes each kind's own graph
# (Memory.Meta.indexes: a partial HNSW index per such kind, which the planner
# takes because the probe's filter names the kind), merged in distance order:
# the same rows as one walk of one graph, without walking past the episodes
# near the query (issue 13), unless the graph of its tenant's graph group is
# the smaller (``walks_group_graph``). A read that includes episodes, the bulk
# kind, walks the graph of every memory of its tenant's graph group once (a
# probe per kind there was slower, at every tenant size measured).
# A memory's cosine distance to the query, as every read of the channel computes
# it: the walk orders by it, and a missed hit's look-up compares with the walk's.
_QUERY_DISTANCE_SQL = f"{GRAPH_VECTOR_SQL} <=> %(qvec)s::halfvec({EMBEDDING_DIM})"

_VECTOR_PROBE_SQL = f"""
        (SELECT m.id, {_QUERY_DISTANCE_SQL} AS distance, {SESSION_SQL} AS session
         FROM memory_memory m
         WHERE {{where}}{{kind}} AND m.embedding IS NOT NULL
         ORDER BY distance
         LIMIT %(k_vec)s)"""

_VECTOR_SQL = """
    vec AS (
        SELECT id, session, 1 - distance AS score FROM ({probes}
        ) nearest
        ORDER BY distance
        LIMIT %(k_vec)s
    )"""


# Keyword channel, common part: the query's terms analysed as documents are
# (memproj_query_terms, migrations 0010 and 0043), their document frequencies in this
# tenant (memory_termstat, migration 0011), and the candidates: every memory
# with one of the rarest terms, as long as their document frequencies fit the
# candidate budget (the rarest term always counts). A frequent term alone
# cannot make the channel rank a large share of a big tenant; it still adds to
# the score of the candidates it is in. The document frequencies count every
# memory of the tenant, so when they fit, so do those memories, and the ones
# with every term are among them. When the rarest term alone passes the budget,
# the memories with every term come first (what BM25 ranks highest, and a cheap
# GIN intersection), then the others as the scan finds them; that scan is
# skipped (a one-time filter, before any scan) in the first case.
# The tsqueries are scalar subqueries, built once per statement: as plain
# calls, memproj_any_query/memproj_all_query (an unnest, a string_agg and a
# tsquery parse) ran again for every row the GIN bitmap rechecks and the filter
# tests, once per arm in a read of several kinds' indexes.
# The query's terms are at most MAX_QUERY_TERMS, the rarest in the tenant (the
# terms no memory holds last, ties by term): scoring a candidate costs a look-up
# per term, and the cover density scorer's ts_rank_cd grows with the square of
# the terms, so without a bound the query's length set what one search costs
# (Chinese text is about a term per character). The terms left out are the
# tenant's commonest, which weigh least in BM25. Each term's document frequency
# is a look-up of its own (a subquery per term, which the planner cannot turn
# into a join): as a join, a planner that took the tenant for a small one (its
# statistics older than its vocabulary) read every term the tenant holds to
# match the query's few, and a search cost what the tenant's vocabulary did.
MAX_QUERY_TERMS = 128
_TERMS_SQL = """
    terms AS (
        SELECT term, coalesce(df, 0) AS df FROM (
            SELECT t.term,
                (SELECT nullif(s.df, 0) FROM memory_termstat s WHERE s.tenant_id = %(tenant)s AND s.term = t.term) AS df
            FROM unnest(memproj_query_terms(%(q)s)) AS t(term)
            ORDER BY df NULLS LAST, t.term
            LIMIT {max_terms}
        ) rarest
    ),
    selective AS (
        SELECT term, df FROM (
            SELECT term, df, sum(df) OVER (ORDER BY df, term) - df AS before FROM terms WHERE df > 0
        ) ordered
        WHERE before = 0 OR before + df <= %(budget)s
    ),
    cand_any AS (
        (SELECT m.id, m.search_vector, {session} AS session
         FROM memory_memory m
         WHERE {where} AND m.search_vector @@ (SELECT memproj_all_query(ARRAY(SELECT term FROM terms WHERE df > 0)))
           AND (SELECT sum(df) FROM selective) > %(budget)s
         LIMIT %(budget)s)
        UNION ALL
        (SELECT m.id, m.search_vector, {session} AS session
         FROM memory_memory m
         WHERE {where} AND m.search_vector @@ (SELECT memproj_any_query(ARRAY(SELECT term FROM selective)))
         LIMIT %(budget)s)
        LIMIT %(budget)s
    ),
    cand AS (
        SELECT DISTINCT ON (id) id, search_vector, session FROM cand_any
    )"""

# BM25 over the candidates: IDF from the tenant's statistics, term frequency
# from the lexeme's positions, document length in distinct lexemes. One
# aggregate per candidate (a lateral subquery): as a join grouped by candidate,
# the planner expanded each candidate's lexemes once per query term and sorted
# the lot to group it (issue 13: 10-15% of the keyword statement at 100k; same
# scores). Beside the score, each hit's coverage: the share of the query's IDF
# its terms hold, whatever its length (a short memory's BM25 passes the IDF
# sum, a long one's holding every term falls short of it).
_BM25_SQL = """
    stats AS (
        SELECT greatest(docs, 1) AS docs, greatest(lexemes::float8 / greatest(docs, 1), 1) AS avgdl
        FROM memory_tenantstat WHERE tenant_id = %(tenant)s
    ),
    weighted AS (
        SELECT t.term, ln(1 + (st.docs - t.df + 0.5)::float8 / (t.df + 0.5)) AS idf
        FROM terms t, stats st WHERE t.df > 0
    ),
    txt AS (
        SELECT c.id, c.session, s.score, s.matched / nullif((SELECT sum(idf) FROM weighted), 0) AS coverage
        FROM cand c
        CROSS JOIN LATERAL (
            SELECT %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * length(c.search_vector) / st.avgdl) AS k
            FROM stats st
        ) norm
        CROSS JOIN LATERAL (
            SELECT sum(w.idf * (coalesce(array_length(u.positions, 1), 1) * (%(k1)s::float8 + 1))
                / (coalesce(array_length(u.positions, 1), 1) + norm.k)) AS score,
                sum(w.idf) AS matched
            FROM unnest(ts_filter(setweight(c.search_vector, 'A', ARRAY(SELECT term FROM weighted)), '{{a}}'))
                AS u(lexeme, positions, weights)
            JOIN weighted w ON w.term = u.lexeme
        ) s
        ORDER BY s.score DESC, c.id
        LIMIT %(k_txt)s
    )"""

# Cover density (the scorer before BM25): no IDF, kept for comparison and policies.
_COVER_DENSITY_SQL = """
    txt AS (
        SELECT c.id, c.session,
            ts_rank_cd(c.search_vector, (SELECT memproj_any_query(ARRAY(SELECT term FROM terms))), 32) AS score,
            NULL::float8 AS coverage
        FROM cand c
        ORDER BY score DESC, c.id
        LIMIT %(k_txt)s
    )"""


# A query vector, or the wait for one (``memory.embeddings.embed_query_later``):
# None from the wait means the embedder is unavailable, so the vector channel is skipped.
QueryVector = Sequence[float] | Callable[[], Sequence[float] | None] | None


def channel_hits(
    *,
    caller: Caller,
    flt: RetrievalFilter,
    query_text: str | None,
    query_vector: QueryVector,
    params: RetrievalParams,
) -> dict[uuid.UUID, ChannelHit]:
    """Top ``params.k_vec`` by cosine similarity and top ``params.k_txt`` by
    keyword score (BM25 or cover density), merged by id, keeping only the hits
    with evidence (``scoring.with_evidence``) (``channel_search``)."""
    return channel_search(caller=caller, flt=flt, query_text=query_text, query_vector=query_vector, params=params)[0]


def channel_search(
    *,
    caller: Caller,
    flt: RetrievalFilter,
    query_text: str | None,
    query_vector: QueryVector,
    params: RetrievalParams,
    columns: Sequence[str] = (),
) -> tuple[dict[uuid.UUID, ChannelHit], dict[uuid.UUID, tuple]]:
    """The channel hits, and per hit the values of ``columns`` (memory_memory
    columns, e.g. what ranking reads), so a reader need not load them again.

    The two channels run side by side (``memproj.dbthreads.side_by_side``): the
    keyword channel in this thread while a side-read thread, on its own
    connection, waits for the query's embedding (``query_vector`` may be that
    wait) and runs the vector channel. Inside a transaction, or when the
    side-read threads are busy, they run in turn here, keyword first, so that
    PostgreSQL still works while the model embeds. Each statement sees its own
    snapshot, as any two reads would."""
    run_txt = bool(query_text) and params.k_txt > 0

    def keyword_rows() -> list[tuple]:
        sql, params_sql, _ = channel_statement(  # type: ignore[misc]
            caller=caller, flt=flt, query_text=query_text, query_vector=None, params=params, columns=columns
        )
        return _keyword_rows(sql, params_sql)

    vectors: list[Sequence[float]] = []  # the query's, once the vector channel has it

    def vector_rows() -> list[tuple]:
        vector = query_vector() if callable(query_vector) else query_vector
        if vector is None or params.k_vec <= 0:
            return []
        vectors.append(vector)
        sql, params_sql, _ = channel_statement(  # type: ignore[misc]
            caller=caller, flt=flt, query_text=None, query_vector=vector, params=params, columns=columns
        )
        return _channel_rows(sql, params_sql, run_vec=True)

    # Both always run: the vector channel's wait settles the embedder's breaker
    # even when the keyword channel fails.
    rows, rows_vec = side_by_side(keyword_rows, vector_rows) if run_txt else ([], vector_rows())
    if rows and rows_vec:
        rows_vec += vector_rows_missed(caller, rows, rows_vec, vectors[0])
    rows += rows_vec
    hits, columns_by_id = _hits_from_rows(rows)
    # Every reader (each dialect's search, recall, context, activation, the
    # admin's search) sees only memories that match the query in a channel.
    hits = with_evidence(hits, params.vector_floor)
    if params.time_boost > 0:
        # Time-aware ranking (issue 14): time_fit on each hit when the query names a period.
        hits = temporal.annotate(hits, query_text, flt.now)
    if params.context_top > 0 and run_txt and query_vector is not None and "episode" in flt.kinds and hits:
        sessions = {row[1]: row[4] for row in rows if row[4] is not None}
        hits = with_neighbours(caller=caller, flt=flt, hits=hits, params=params, sessions=sessions)
    return hits, columns_by_id


# The vector channel walks an HNSW graph, which is approximate: among many
# near-identical memories ("Deploy key K was rotated on <date>" for dozens of
# keys and dates) the walk can miss one, even the query's own text. The fusion
# would then score that memory as a keyword match alone and rank it below its
# near-duplicates, although an exact search would have put it first in both
# channels. So a keyword hit the walk missed gets its exact similarity, by
# primary key, when that is above the walk's last one: keyword hits an exact
# vector search would have had to return (one tied with the last may have been
# cut by the LIMIT alone). An exact walk leaves nothing to add, and the
# ranking is what it was.
# The same look-up tells which of those keyword hits have no vector yet (a
# write during an embedder outage, or one the worker has not reached): no walk
# could have returned them, and the fusion weighs them by their keyword match
# (``ChannelHit.vector_pending``), not as the vector channel's misses.
# Only the keyword channel's first hits are looked up: the look-up is a
# statement of its own on every hybrid search, and lower keyword hits rarely
# reach a result page whatever their similarity.
MISSED_LOOKUP_TOP = 10

# Channel of a row naming a keyword hit whose memory has no vector yet.
PENDING_CHANNEL = "p"

_VECTOR_MISSED_SQL = f"""
    SELECT m.id, CASE WHEN m.embedding IS NOT NULL THEN 1 - ({_QUERY_DISTANCE_SQL}) END
    FROM memory_memory m
    WHERE m.id = ANY(%(ids)s::uuid[]) AND m.tenant_id = %(tenant)s
"""


def vector_rows_missed(
    caller: Caller, rows_txt: Sequence[tuple], rows_vec: Sequence[tuple], vector: Sequence[float]
) -> list[tuple]:
    """Vector channel rows for the keyword hits the HNSW walk missed, and
    ``PENDING_CHANNEL`` rows for those without a vector (``_VECTOR_MISSED_SQL``),
    in the channel rows' shape: (channel, id, score, coverage, session, *columns)."""
    walked = {row[1] for row in rows_vec}
    best_first = sorted(rows_txt, key=lambda row: (-float(row[2]), row[1]))[:MISSED_LOOKUP_TOP]
    keyword_only = {row[1]: row for row in best_first if row[1] not in walked}
    if not keyword_only:
        return []
    lowest = min(float(row[2]) for row in rows_vec)
    found = _read_rows(
        _VECTOR_MISSED_SQL,
        {
            "ids": "{" + ",".join(str(pk) for pk in keyword_only) + "}",
            "tenant": caller.tenant_id,
            "qvec": vector_literal(vector),
        },
    )
    return [
        (PENDING_CHANNEL, pk, 0.0, None, *keyword_only[pk][4:])
        if similarity is None
        else ("v", pk, similarity, None, *keyword_only[pk][4:])
        for pk, similarity in found
        if similarity is None or similarity > lowest
    ]


# The previous and next episode of the same session of each given episode, by
# (created_at, id), under the read's filter: one probe of memory_session_turn_idx
# each way. The read's whole filter, not only the index's conditions: with a turn
# the reader may not see (a boundary class, another namespace) counted as a
# neighbour, whether a visible hit is raised would reveal that hidden turn.
_NEIGHBOURS_SQL = """
    SELECT n.id, p.id, n.after AND length(p.content) <= %(short_turn)s AND right(p.content, 8) ~ %(asks)s
    FROM memory_memory p
    CROSS JOIN LATERAL (
        (SELECT m.id, false AS after FROM memory_memory m
         WHERE {where} AND m.kind = 'episode' AND m.session_id = p.session_id AND m.session_id <> ''
           AND (m.created_at, m.id) < (p.created_at, p.id)
         ORDER BY m.created_at DESC, m.id DESC LIMIT 1)
        UNION ALL
        (SELECT m.id, true AS after FROM memory_memory m
         WHERE {where} AND m.kind = 'episode' AND m.session_id = p.session_id AND m.session_id <> ''
           AND (m.created_at, m.id) > (p.created_at, p.id)
         ORDER BY m.created_at, m.id LIMIT 1)
    ) n
    WHERE p.id = ANY(%(parents)s::uuid[]) AND p.tenant_id = %(tenant)s AND p.kind = 'episode' AND p.session_id <> ''
"""

# A short turn that ends by asking (a question mark, then at most closing
# quotes, brackets or spaces): the next turn of its session answers it. A long
# turn that ends by asking also tells (a user's plans, then "what would you
# recommend?"), and the reply to it holds less of what is asked about.
SHORT_TURN_CHARS = embedtext.PREVIOUS_CHARS
_ASKS = "[?？][\"”」』’')\\]\\s]*$"


def with_neighbours(
    *,
    caller: Caller,
    flt: RetrievalFilter,
    hits: dict[uuid.UUID, ChannelHit],
    params: RetrievalParams,
    sessions: Mapping[uuid.UUID, str],
) -> dict[uuid.UUID, ChannelHit]:
    """The hybrid's second pass over a conversation: those of the hits that
    are the previous or next turn (episode of the same session) of its first
    ``params.context_top`` hits by fused score get ``context_of`` naming that
    hit, so the fusion (``scoring.with_context``) scores them at least
    ``params.context_decay`` x its score. Only hits are raised (each has
    evidence of its own); a neighbour that matches neither channel stays out.
    ``sessions``: the session of each hit that is an episode of one (the
    channel rows' ``session``, ``SESSION_SQL``)."""
    parents = neighbour_parents(hits, sessions, params)
    if not parents:
        return hits
    where, params_sql = _where(caller, flt)
    sql = _NEIGHBOURS_SQL.format(where=where)
    params_sql["parents"] = "{" + ",".join(str(pk) for pk in parents) + "}"
    params_sql.update(asks=_ASKS, short_turn=SHORT_TURN_CHARS)
    rows = _read_rows(sql, params_sql)
    raised = [(memory_id, parent, answers) for memory_id, parent, answers in rows if memory_id in hits]
    if not raised:
        return hits
    hits = dict(hits)
    for memory_id, parent, answers in raised:
        hit = hits[memory_id]
        if parent not in hit.context_of:
            hit = replace(hit, context_of=(*hit.context_of, parent))
        if answers and parent not in hit.answers:
            hit = replace(hit, answers=(*hit.answers, parent))
        hits[memory_id] = hit
    return hits


def top_hits(hits: Mapping[uuid.UUID, ChannelHit], params: RetrievalParams) -> list[uuid.UUID]:
    """The first ``params.context_top`` hits by fused score (ties by id)."""
    fused = fuse_all(hits, params)
    return heapq.nsmallest(params.context_top, fused, key=lambda pk: (-round(fused[pk], 12), str(pk)))


def neighbour_parents(
    hits: Mapping[uuid.UUID, ChannelHit], sessions: Mapping[uuid.UUID, str], params: RetrievalParams
) -> list[uuid.UUID]:
    """The top hits (``top_hits``) whose neighbours are worth a look: a
    neighbour is raised only when it is a hit, an episode of the same session,
    so a top hit that is no episode of a session, or whose session holds no
    other hit, has none to raise; with no two hits in one session, no hit
    has, and the fusion is not even computed here."""
    per_session = Counter(sessions[pk] for pk in hits if pk in sessions)
    if all(count == 1 for count in per_session.values()):
        return []
    return [pk for pk in top_hits(hits, params) if pk in sessions and per_session[sessions[pk]] > 1]


def _channel_rows(sql: str, params_sql: dict, *, run_vec: bool) -> list[tuple]:
    """One channel's settings and statement in one round trip. Several
    statements in one query string run as one implicit transaction, which
    scopes the SET LOCALs as an explicit one would, without a BEGIN and a COMMIT
    of their own."""
    return _read_rows(with_settings(sql, run_vec), params_sql)


class _PreparedCursor(psycopg.Cursor):
    """Server-side binding, every statement prepared: psycopg names it on first
    use and keeps the connection's most recent ones (``prepared_max``)."""

    def execute(  # type: ignore[override]
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None
    ) -> _PreparedCursor:
        return super().execute(query, params, prepare=True, binary=binary)


# What a keyword statement's plan depends on, written into its text rather than
# bound: a prepared statement's generic plan knows only its text, and the plans
# differ by the tenant's size and by the kinds read (keyword_kinds_sql writes
# them into the text: a bound array cannot be proved to match the kinds' partial
# GIN indexes). So each tenant and set of kinds gets a statement of its own on
# each connection.
_PLAN_KEYS = ("tenant",)


def _keyword_rows(sql: str, params_sql: dict) -> list[tuple]:
    """The keyword channel's rows. Its statement is the longest the service
    sends, and parsing and planning it cost as much as running it at 10k memories
    a tenant: prepared, a connection plans it once per tenant (PostgreSQL keeps
    a generic plan after five custom ones when it costs no more)."""
    if not settings.MEMPROJ["DB_PREPARED"]:
        return _read_rows(sql, params_sql)
    connection.ensure_connection()
    bound = dict(params_sql)
    for name in _PLAN_KEYS:
        if name in bound:
            sql = sql.replace(f"%({name})s", Literal(bound.pop(name)).as_string(connection.connection))
    return _prepared_read(sql, bound)


def _prepared_read(sql: str, params_sql: dict) -> list[tuple]:
    """The rows of a read's statement, prepared on its connection when
    ``MEMPROJ_DB_PREPARED`` allows (inside a caller's transaction, under a
    savepoint, as ``_read_rows``)."""
    if not settings.MEMPROJ["DB_PREPARED"]:
        return _read_rows(sql, params_sql)
    connection.ensure_connection()
    if connection.in_atomic_block:
        with transaction.atomic():
            return _prepared_rows(sql, params_sql)
    return _prepared_rows(sql, params_sql)


class _PreparedDebugCursor(CursorDebugWrapper):
    """Django's query log for a prepared statement: the statement as sent, with
    its parameters (Django reads the query back from a client-binding cursor)."""

    def execute(self, sql: Any, params: Any = None) -> Any:
        with self.debug_sql(sql, params):
            return CursorWrapper.execute(self, sql, params)


def _prepared_rows(sql: str, params_sql: dict) -> list[tuple]:
    # Django's cursor wrapper around it: its error translation and execute wrappers.
    with connection.wrap_database_errors:
        raw: Any = _PreparedCursor(connection.connection)
    wrapper = _PreparedDebugCursor if connection.queries_logged else CursorWrapper
    with wrapper(raw, connection) as cursor:
        cursor.execute(sql, params_sql)
        return cursor.fetchall()


def _read_rows(query: str, params_sql: dict) -> list[tuple]:
    """The rows of a read's query (of its last statement). Inside a caller's
    transaction a savepoint keeps a failed read from aborting it."""
    if connection.in_atomic_block:
        with transaction.atomic(), connection.cursor() as cursor:
            return _rows_of_last_statement(cursor, query, params_sql)
    with connection.cursor() as cursor:
        return _rows_of_last_statement(cursor, query, params_sql)


def _rows_of_last_statement(cursor, query: str, params_sql: dict) -> list[tuple]:  # type: ignore[no-untyped-def]
    # Client-side binding (Django's default cursor for psycopg 3) sends the
    # string with the simple query protocol, which allows several statements.
    cursor.execute(query, params_sql)
    while cursor.nextset():
        pass
    return cursor.fetchall()


# How long a process trusts the graphs' sizes it read. A stale size can only
# send a read to the slower of two graphs that both hold all of its rows.
_GRAPH_SIZES_TTL_S = 60.0
_graph_sizes: tuple[float, dict[str, float]] = (float("-inf"), {})


def graph_sizes() -> dict[str, float]:
    """Rows in each HNSW graph of memories, as the planner last counted them
    (``pg_class.reltuples``: kept by VACUUM, ANALYZE and index builds; -1 when
    never counted), read at most once a minute per process."""
    global _graph_sizes
    read_at, sizes = _graph_sizes
    now = time.monotonic()
    if now - read_at > _GRAPH_SIZES_TTL_S:
        with connection.cursor() as cursor:
            cursor.execute("SELECT relname, reltuples FROM pg_class WHERE relname = ANY(%s)", [vector_graph_names()])
            sizes = {name: float(rows) for name, rows in cursor.fetchall()}
        _graph_sizes = (now, sizes)
    return sizes


def forget_graph_sizes() -> None:
    """The next read asks again (tests that change the graphs' sizes)."""
    global _graph_sizes
    _graph_sizes = (float("-inf"), {})


def walks_group_graph(tenant_id: uuid.UUID, kinds: Sequence[str]) -> bool:
    """Whether a read of ``kinds`` walks its tenant's group graph rather than
    each kind's own graph. Every one of them holds all of the tenant's rows of
    those kinds, so a walk visits fewer nodes of other tenants and kinds in the
    smaller: a small tenant's group graph is smaller than the graph of every
    tenant's facts, a large tenant's is larger. Kind graphs when a size is unknown."""
    if not set(kinds) <= set(KINDS_WITH_OWN_GRAPH):
        return True
    sizes = graph_sizes()
    group = sizes.get(graph_group_name(graph_group_of(tenant_id)), -1.0)
    own = [sizes.get(kind_graph_name(kind), -1.0) for kind in kinds]
    return group >= 0 and min(own) >= 0 and group < sum(own)


# What a reader may ask the channel rows for besides memory_memory's columns
# (``channel_search``'s ``columns``): a value read out of the row.
ROW_EXPRESSIONS = {
    # pce's claim kind as stored (jsonb, as its text; memory.claims.claim_kind_of).
    "claim_kind": "m.metadata -> 'claim_kind'",
}


def channel_statement(
    *,
    caller: Caller,
    flt: RetrievalFilter,
    query_text: str | None,
    query_vector: Sequence[float] | None,
    params: RetrievalParams,
    columns: Sequence[str] = (),
) -> tuple[str, dict, bool] | None:
    """One statement of the channels (SQL, parameters, whether it runs the
    vector channel), or None when neither channel runs. ``channel_search`` runs
    each channel as its own statement (only ``query_text`` or only
    ``query_vector``); given both, one statement runs both. Separate so that
    the bench scripts can EXPLAIN exactly what the service runs."""
    where, params_sql = _where(caller, flt)
    run_vec = query_vector is not None and params.k_vec > 0
    run_txt = bool(query_text) and params.k_txt > 0
    if not (run_vec or run_txt):
        return None
    ctes: list[str] = []
    selects: list[str] = []
    if run_vec:
        assert query_vector is not None
        kinds = sorted(set(flt.kinds))
        if not walks_group_graph(caller.tenant_id, kinds):
            probe_where = _where(caller, flt, kinds_sql=None)[0]
            probes = "\n        UNION ALL".join(
                _VECTOR_PROBE_SQL.format(where=probe_where, kind=f" AND m.kind = %(vec_kind_{i})s")
                for i in range(len(kinds))
            )
            params_sql.update({f"vec_kind_{i}": kind for i, kind in enumerate(kinds)})
        else:
            # The walk of the tenant's graph group (memory.models.GRAPH_GROUPS);
            # for one kind the planner may still take that kind's graph.
            probes = _VECTOR_PROBE_SQL.format(where=where, kind=f" AND {GRAPH_GROUP_SQL}")
        ctes.append(_VECTOR_SQL.format(probes=probes))
        selects.append("SELECT 'v' AS channel, id, score, NULL::float8 AS coverage, session FROM vec")
        params_sql.update(qvec=vector_literal(query_vector), k_vec=params.k_vec)
    if run_txt:
        txt_where = _where(caller, flt, kinds_sql=keyword_kinds_sql(flt.kinds))[0]
        ctes.append(_TERMS_SQL.format(where=txt_where, session=SESSION_SQL, max_terms=int(MAX_QUERY_TERMS)))
        scorer = _BM25_SQL if params.keyword_scorer == "bm25" else _COVER_DENSITY_SQL
        ctes.append(scorer.format())
        selects.append("SELECT 't' AS channel, id, score, coverage, session FROM txt")
        params_sql.update(
            q=query_text, k_txt=params.k_txt, budget=params.txt_candidates, k1=params.bm25_k1, b=params.bm25_b
        )
    # {where} and the fragments are fixed text; every value is a bound parameter
    # (the keyword condition's kinds, the model's own names, are literals).
    select = "\nUNION ALL\n".join(selects)
    if columns:
        assert all(name.isidentifier() for name in columns), columns
        # The hits' own columns, by primary key (rows the channels just read).
        wanted = ", ".join(ROW_EXPRESSIONS.get(name, f"m.{name}") for name in columns)
        select = f"SELECT h.*, {wanted} FROM (\n{select}\n) h JOIN memory_memory m ON m.id = h.id"
    sql = "WITH" + ",".join(ctes) + "\n" + select
    return sql, params_sql, run_vec


def _hits_from_rows(rows: list[tuple]) -> tuple[dict[uuid.UUID, ChannelHit], dict[uuid.UUID, tuple]]:
    by_channel: dict[str, list[tuple]] = {"v": [], "t": [], PENDING_CHANNEL: []}
    coverage: dict[uuid.UUID, float] = {}
    columns: dict[uuid.UUID, tuple] = {}
    for channel, memory_id, score, share, _session, *values in rows:
        by_channel[channel].append((memory_id, float(score)))
        columns[memory_id] = tuple(values)
        if share is not None:
            coverage[memory_id] = min(1.0, float(share))
    hits: dict[uuid.UUID, ChannelHit] = {}
    # Best first, ties by id, as each channel's ORDER BY had them.
    for (memory_id, similarity), rank in _competition_ranks(sorted(by_channel["v"], key=lambda r: (-r[1], r[0]))):
        hits[memory_id] = ChannelHit(vector_similarity=similarity, vector_rank=rank)
    for (memory_id, value), rank in _competition_ranks(sorted(by_channel["t"], key=lambda r: (-r[1], r[0]))):
        previous = hits.get(memory_id, ChannelHit())
        hits[memory_id] = ChannelHit(
            vector_similarity=previous.vector_similarity,
            vector_rank=previous.vector_rank,
            text_rank_value=value,
            text_rank=rank,
            text_coverage=coverage.get(memory_id),
        )
    for memory_id, _ in by_channel[PENDING_CHANNEL]:
        hits[memory_id] = replace(hits[memory_id], vector_pending=True)
    return hits, columns
