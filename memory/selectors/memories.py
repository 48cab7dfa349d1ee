"""Reads: search, recall, stats and context over the caller's tenant."""

from __future__ import annotations

import functools
import operator
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection
from django.db.models import Count, Min, Q
from django.utils import timezone

from memory import attribute_filter, scoring, validation
from memory.embeddings import embed_query_later
from memory.errors import EmbeddingUnavailable, InvalidArgument, NotFound, PermissionDenied
from memory.models import (
    Collection,
    ConflictCandidate,
    Kind,
    Maturity,
    Memory,
    MemoryQuerySet,
    Validity,
    retrievable_q,
)
from memory.read_model import Rankable, effective_confidence_of
from memory.retrieval import RetrievalFilter, channel_search, vector_query_text
from memory.scoring import ChannelHit, RetrievalParams
from memory.selectors.aliases import memory_pk
from policy.boundary import BoundaryDecision, boundary_for, redact_content
from policy.caller import Caller

SEARCH_MODES = ("hybrid", "semantic", "keyword")

# A memory stored in parts (a roampal exchange longer than one memory holds)
# lists, under this metadata key, the ids of the memories that continue it.
CONTINUED_IN = "exchange_continued_in"
# ... and each of those names the one it continues under this key.
CONTINUES = "exchange_of"


def exchange_parts(tenant_id: uuid.UUID, head_id: uuid.UUID) -> MemoryQuerySet:
    """The parts exchange ``head_id`` was stored in after its head (none unless
    it was longer than one memory holds): the memories of its tenant that name
    it as the exchange they continue (``CONTINUES``). The head's own list
    (``CONTINUED_IN``) only says which rows to look at, by primary key rather
    than by scanning the tenant's metadata; it is metadata a store or an import
    keeps as it comes, so it can name any memory, and what it names is a part
    only if it names the head back. Every part an exchange is stored in is
    both listed and linked back (``memory.services.collections.exchange_complete``
    writes the two together). Forgetting an exchange and scoring it both take
    its parts from here. Without vectors."""
    listed = (
        Memory.objects.filter(tenant_id=tenant_id, pk=head_id)
        .values_list(f"metadata__{CONTINUED_IN}", flat=True)
        .first()
    )
    ids: list[uuid.UUID] = []
    for value in listed if isinstance(listed, list) else []:
        try:
            ids.append(uuid.UUID(str(value)))
        except ValueError:
            continue
    return Memory.objects.filter(
        tenant_id=tenant_id, pk__in=ids, **{f"metadata__{CONTINUES}": str(head_id)}
    ).without_vectors()


def require_read(caller: Caller) -> None:
    if not caller.has_scope("read"):
        raise PermissionDenied("this token cannot read memories; ask an admin for a token with the 'read' scope.")


def retrieval_params(caller: Caller, overrides: RetrievalParams | None = None) -> RetrievalParams:
    """The parameters of one read, resolved once: the deployment's settings, then
    the tenant policy's retrieval section (alpha, channel depths, recency
    half-lives by kind: issue 11), unless a caller passes its own."""
    if overrides is not None:
        return overrides
    policy = caller.policy.retrieval
    return RetrievalParams.resolve(
        {
            "alpha": policy.alpha,
            "k_vec": policy.k_vec,
            "k_txt": policy.k_txt,
            "recency_half_life_days": dict(policy.half_life_days_by_kind),
            "default_half_life_days": policy.recency_half_life_days,
        }
    )


# --- boundary-first (issue 11) ----------------------------------------------------------------
def read_boundary(caller: Caller, use_tags: Sequence[str] | None = None) -> BoundaryDecision:
    """What this read may see: the caller's tenant policy and the read's use tags
    (default ``answer:task``). The one retrieval path filters on it in SQL
    (memory.retrieval.boundary_where); the selectors below filter their own
    queries with ``MemoryQuerySet.visible_in`` and redact with ``boundary_apply``."""
    return boundary_for(caller.policy, use_tags)


def boundary_apply(decision: BoundaryDecision, memories: Sequence[Memory]) -> None:
    """Redact, in place, the content of memories whose class the policy redacts
    (pce-memory v0.14.0's redact-before-send). The rows are read copies from here on:
    Memory.save() refuses them, so a redacted text can never be written back."""
    for memory in memories:
        if decision.redact.get(memory.boundary_class):
            memory.content = redact_content(decision, memory.boundary_class, memory.content)
            memory._memproj_redacted = True  # type: ignore[attr-defined]


def boundary_view(caller: Caller, memory: Memory, use_tags: Sequence[str] | None = None) -> Memory:
    """A memory a write hands back to its caller (confirm, outcome feedback), as
    the caller's reads would see it: redacted, or with its content withheld when
    its class is not visible to them. The write itself is not refused: an agent
    may confirm or forget what it stored, it just does not get the text back."""
    decision = read_boundary(caller, use_tags)
    if memory.boundary_class not in decision.visible:
        memory.content = f"[WITHHELD: boundary class {memory.boundary_class!r} is not visible to this read]"
        memory._memproj_redacted = True  # type: ignore[attr-defined]
    else:
        boundary_apply(decision, [memory])
    return memory


def memories_for_hits(
    *, caller: Caller, hits: dict[uuid.UUID, ChannelHit], decision: BoundaryDecision
) -> list[tuple[Memory, ChannelHit]]:
    """Load the rows behind channel hits (already boundary-filtered in SQL; the
    queryset filters again so a hit from any other source cannot leak), redacted."""
    rows = memory_rows_by_id(caller, decision, list(hits))
    boundary_apply(decision, list(rows.values()))
    return [(rows[pk], hit) for pk, hit in hits.items() if pk in rows]


@dataclass(frozen=True)
class _RowStatement:
    """The statement that loads memories by id as the queryset
    ``Memory.objects.for_caller(caller).visible_in(classes).without_vectors()
    .in_bulk(ids)`` would, with that queryset's columns and value converters,
    compiled once per process instead of on every read. ``select`` is its
    SELECT list and FROM clause alone, for the other reads written the same way."""

    select: str
    sql: str
    attnames: tuple[str, ...]
    # Column index -> (its converters, its expression), as SQLCompiler.get_converters gives them.
    converters: tuple[tuple[int, tuple[list[Any], Any]], ...]


@functools.cache
def _row_statement() -> _RowStatement:
    template = Memory.objects.without_vectors().filter(pk=uuid.UUID(int=0))
    compiler = template.query.get_compiler(connection=connection)
    compiler.setup_query()
    columns = [col for col, _, _ in compiler.select]
    table = connection.ops.quote_name(Memory._meta.db_table)
    selected = ", ".join(compiler.compile(col)[0] for col in columns)
    where = f'{table}."tenant_id" = %s AND {table}."boundary_class" = ANY(%s) AND {table}."id" = ANY(%s)'
    # The model's own column and table names; every value is a parameter.
    select = f"SELECT {selected} FROM {table}"  # noqa: S608
    return _RowStatement(
        select=select,
        sql=f"{select} WHERE {where}",
        attnames=tuple(col.target.attname for col in columns),
        converters=tuple(compiler.get_converters(columns).items()),
    )


def memory_rows(sql: str, params: Sequence[Any]) -> list[Memory]:
    """The memories (without their vectors) that ``sql``, written after
    ``_row_statement().select``, returns, built as the ORM builds them."""
    statement = _row_statement()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    out = []
    for fetched in rows:
        values = list(fetched)
        for index, (converters, expression) in statement.converters:
            for converter in converters:
                values[index] = converter(values[index], expression, connection)
        out.append(Memory.from_db(connection.alias, statement.attnames, values))
    return out


def memory_rows_by_id(caller: Caller, decision: BoundaryDecision, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Memory]:
    """The caller's memories of these ids in the read's visible classes, without
    their vectors (not redacted: ``boundary_apply`` does that)."""
    if not ids:
        return {}
    rows = memory_rows(_row_statement().sql, [caller.tenant_id, sorted(decision.visible), list(ids)])
    return {memory.pk: memory for memory in rows}


def _always_injected_queryset(now: datetime) -> MemoryQuerySet:
    """roampal's memory_bank facts marked ``always_inject`` that retrieval may
    return, most important and newest first: the rule and order of
    ``memory_bank_always_injected``, but for the tenant and the visible classes
    (each read's parameters)."""
    return (
        Memory.objects.retrievable(now)
        .filter(collection=Collection.MEMORY_BANK, metadata__contains={"always_inject": True})
        .order_by("-importance", "-created_at")
    )


# The read's time while the statement is compiled: where it lands among the
# compiled parameters is where each read's ``now`` goes.
_NOW_SLOT = datetime(1970, 1, 1, 0, 0, 0, 123457, tzinfo=UTC)


@dataclass(frozen=True)
class _Statement:
    sql: str
    # The compiled parameters, each _NOW_SLOT standing for the read's time.
    params: tuple[Any, ...]


@functools.cache
def _always_injected_statement() -> _Statement:
    """``_always_injected_queryset``'s WHERE and ORDER BY as the ORM compiles
    them (so the retrievable rule is the model's, never restated here), after
    the tenant and the visible classes as one array and before the limit."""
    query = _always_injected_queryset(_NOW_SLOT).query
    compiler = query.get_compiler(connection=connection)
    compiler.setup_query()
    where, params = compiler.compile(query.where)
    order = [compiled for _, compiled in compiler.get_order_by()]
    if any(order_params for _, order_params, _ in order):
        raise ValueError("the always-injected order must compile without parameters")
    table = connection.ops.quote_name(Memory._meta.db_table)
    # The model's own names and the ORM's compiled clauses; every value a parameter.
    sql = (
        f'{_row_statement().select} WHERE {table}."tenant_id" = %s AND {table}."boundary_class" = ANY(%s) '
        f"AND {where} ORDER BY {', '.join(sql for sql, _, _ in order)} LIMIT %s"
    )
    return _Statement(sql=sql, params=tuple(params))


def memory_bank_always_injected(caller: Caller, decision: BoundaryDecision, now: datetime, limit: int) -> list[Memory]:
    """roampal's memory_bank facts marked ``always_inject``, most important and
    newest first: the rows of ``Memory.objects.for_caller(caller)
    .visible_in(decision.visible).retrievable(now).filter(collection="memory_bank",
    metadata__contains={"always_inject": True}).without_vectors()
    .order_by("-importance", "-created_at")[:limit]``, with a statement compiled
    from that queryset once per process (every KNOWN CONTEXT block reads them;
    building and compiling that queryset cost more than running it). Not redacted."""
    statement = _always_injected_statement()
    rule = [now if isinstance(p, datetime) and p == _NOW_SLOT else p for p in statement.params]
    return memory_rows(statement.sql, [caller.tenant_id, sorted(decision.visible), *rule, limit])


class RankRow(NamedTuple):
    """The columns ranking reads (relevance, tie-breakers, composite score,
    effective confidence). A search ranks up to k_vec + k_txt candidates but
    returns ``limit`` of them: building a full model row for every candidate
    was a large share of a search's Python time, so candidates are ranked on
    these columns and only the returned rows are loaded in full (``_hydrate``). The channel
    statement returns them with its hits (``retrieval.channel_search``), already
    filtered by tenant and boundary like every read here."""

    id: uuid.UUID
    kind: str
    importance: float
    confidence: float
    decay_rate: float
    last_confirmed_at: datetime | None
    created_at: datetime
    # What roampal's collection ranking reads besides (memory.selectors.collections.rank_score).
    collection: str
    success_count: float
    applied_count: int
    outcome_score: float
    occurred_at: datetime  # when it happened: what roampal's recency orders by


def _hydrate(
    *, caller: Caller, decision: BoundaryDecision, ranked_ids: Sequence[uuid.UUID], want: int
) -> dict[uuid.UUID, Memory]:
    """Full rows (redacted) of the first ``want`` of ``ranked_ids`` that still
    exist and are visible: a row deleted or reclassified since it was ranked is
    replaced by the next one, as a single read would have ranked without it."""
    rows: dict[uuid.UUID, Memory] = {}
    start = 0
    while len(rows) < want and start < len(ranked_ids):
        chunk = list(ranked_ids[start : start + want - len(rows)])
        start += len(chunk)
        rows.update(memory_rows_by_id(caller, decision, chunk))
    boundary_apply(decision, list(rows.values()))
    return rows


@dataclass
class ScoredMemory:
    memory: Memory
    score: float
    relevance: float
    effective_confidence: float | None
    hit: ChannelHit


def order_key(score: float, created_at: datetime, memory_id: uuid.UUID) -> tuple:
    """The order of the butlers memory module: score DESC, created_at DESC, id ASC
    (the id's 128-bit number orders as its text does, and as PostgreSQL orders uuids)."""
    return (-round(score, 12), -created_at.timestamp(), memory_id.int)


def tie_break_key(item: ScoredMemory) -> tuple:
    return order_key(item.score, item.memory.created_at, item.memory.id)


def query_vector_later(
    caller: Caller, query: str, mode: str, params: RetrievalParams
) -> Callable[[], list[float] | None]:
    """The vector of ``query`` for ``mode`` (of what the vector channel embeds
    for it, ``retrieval.vector_query_text``), started now and awaited by
    calling the result (``retrieval.channel_search`` runs the keyword channel
    meanwhile): None for keyword mode, and for hybrid when the embedder is unavailable."""
    if mode == "keyword":
        return lambda: None
    text = vector_query_text(caller, query, params)
    try:
        # short wait, breaker and cache: a slow embedder costs ~nothing
        wait: Callable[[], list[float] | None] = embed_query_later(text)
    except EmbeddingUnavailable:
        if mode == "semantic":
            raise
        return lambda: None  # hybrid degrades to keyword-only rather than failing the read

    def result() -> list[float] | None:
        try:
            return wait()
        except EmbeddingUnavailable:
            if mode == "semantic":
                raise
            return None

    return result


class QueryVectors:
    """The query vectors of one request's searches: each question embedded once
    however many searches of it the request runs. roampal's KNOWN CONTEXT runs
    two (its memory_bank facts and its other collections); run in turn, as they
    are when the process is busy, the second would embed the question again."""

    def __init__(self) -> None:
        self._waits: dict[tuple[str, str, float], Callable[[], list[float] | None]] = {}
        self._lock = threading.Lock()

    def later(self, caller: Caller, query: str, mode: str, params: RetrievalParams) -> Callable[[], list[float] | None]:
        """``query_vector_later``, started by the first search that asks; a
        wait can be called again for the same vector."""
        key = (query, mode, params.vector_query_common_share)  # what decides the text embedded
        with self._lock:
            wait = self._waits.get(key)
            if wait is None:
                wait = self._waits[key] = query_vector_later(caller, query, mode, params)
            return wait


def _candidates(
    *,
    caller: Caller,
    query: str,
    mode: str,
    flt: RetrievalFilter,
    params: RetrievalParams,
    vectors: QueryVectors | None = None,
) -> tuple[list[tuple[RankRow, ChannelHit]], BoundaryDecision]:
    decision = read_boundary(caller, flt.use_tags)
    hits, columns = channel_search(
        caller=caller,
        flt=flt,
        query_text=query if mode != "semantic" else None,
        query_vector=None if mode == "keyword" else (vectors or QueryVectors()).later(caller, query, mode, params),
        params=params,
        columns=RankRow._fields[1:],
    )
    return [(RankRow(pk, *columns[pk]), hit) for pk, hit in hits.items()], decision


@dataclass(frozen=True)
class SearchQuery:
    """What one search asks: the text and every filter, in one value that a
    dialect builds from its own arguments and hands to ``memory_search`` (or
    ``memory_search_accessed``, or roampal's collection ranking). Nothing is
    checked when it is built: the search validates each field when it runs, so
    a bad value is the same InvalidArgument whichever dialect sent it."""

    text: str
    types: Sequence[str] | None = None  # memory kinds; None: all three
    scope: str | None = None  # this scope plus 'global'
    mode: str = "hybrid"  # one of SEARCH_MODES
    limit: int = 20
    offset: int = 0
    min_confidence: float | None = None  # effective confidence of facts and rules
    namespace: Sequence[str] | None = None  # exactly this namespace
    namespace_prefix: Sequence[str] | None = None  # namespaces starting with it (LangGraph store)
    tags: Sequence[str] | None = None  # every one of them
    collections: Sequence[str] | None = None  # roampal v0.3.5 collections
    created_after: datetime | None = None
    attributes: Mapping[str, Any] | None = None  # LangGraph's store filter (memory.attribute_filter)
    use_tags: Sequence[str] | None = None  # the read's boundary use tags; None: answer:task
    params: RetrievalParams | None = None  # None: the tenant policy's retrieval parameters


def memory_search(*, caller: Caller, query: SearchQuery) -> list[ScoredMemory]:
    ranking = memory_search_ranking(caller=caller, query=query)
    hits = {row.id: (relevance, hit) for row, relevance, hit in ranking.items}
    ordered = list(hits)
    rows = ranking.load(caller, ordered, ranking.limit)
    return [
        ScoredMemory(
            memory=rows[pk],
            score=hits[pk][0],
            relevance=hits[pk][0],
            effective_confidence=effective_confidence_of(rows[pk], ranking.now),
            hit=hits[pk][1],
        )
        for pk in ordered
        if pk in rows
    ]


@dataclass
class SearchRanking:
    """A search's candidates ranked on their ranking columns, best first from
    ``offset`` on, before any full row is loaded: ``memory_search`` loads the
    first ``limit``; a reader that ranks its first ``limit`` again (roampal's
    collection_search) loads only the rows it returns."""

    items: list[tuple[RankRow, float, ChannelHit]]  # (row, relevance, hit)
    limit: int
    decision: BoundaryDecision
    now: datetime

    def load(self, caller: Caller, ranked_ids: Sequence[uuid.UUID], want: int) -> dict[uuid.UUID, Memory]:
        return _hydrate(caller=caller, decision=self.decision, ranked_ids=ranked_ids, want=want)


def memory_search_ranking(*, caller: Caller, query: SearchQuery, vectors: QueryVectors | None = None) -> SearchRanking:
    """``query``'s candidates ranked; ``vectors``: the request's query vectors,
    when it runs several searches of one question."""
    require_read(caller)
    params = retrieval_params(caller, query.params)
    offset = _offset(query.offset)
    attributes = attribute_filter.parse(query.attributes)
    text = validation.query(query.text)
    decision = read_boundary(caller, query.use_tags)
    kinds = [validation.kind(t) for t in (query.types or Kind.values)]
    if not kinds:
        raise InvalidArgument("types must name at least one of episode, fact, rule.")
    mode = validation.choice(query.mode, field="mode", allowed=SEARCH_MODES)
    limit = validation.limit(query.limit)
    scope = validation.label(query.scope, field="scope") if query.scope is not None else None
    min_confidence = query.min_confidence
    if min_confidence is not None:
        min_confidence = validation.number(min_confidence, field="min_confidence", low=0, high=1)
    namespace_prefix = query.namespace_prefix
    now = timezone.now()
    flt = RetrievalFilter(
        kinds=kinds,
        now=now,
        scopes=sorted({"global", scope}) if scope else None,
        namespace=validation.namespace(query.namespace) if query.namespace is not None else None,
        tags_all=validation.tags(query.tags) or None,
        min_confidence=min_confidence,
        collections=query.collections,
        created_after=query.created_after,
        use_tags=decision.use_tags,
        namespace_prefix=validation.namespace(namespace_prefix, field="namespace_prefix") or None
        if namespace_prefix
        else None,
        attributes=attributes,
    )
    k = max(limit + offset, 1)
    params = params.with_(k_vec=max(params.k_vec, k), k_txt=max(params.k_txt, k))
    candidates, decision = _candidates(caller=caller, query=text, mode=mode, flt=flt, params=params, vectors=vectors)
    relevance = scoring.channel_relevance({row.id: hit for row, hit in candidates}, mode, params)
    ordered = sorted(candidates, key=lambda c: order_key(relevance[c[0].id], c[0].created_at, c[0].id))
    return SearchRanking(
        items=[(row, relevance[row.id], hit) for row, hit in ordered[offset:]],
        limit=limit,
        decision=decision,
        now=now,
    )


MAX_OFFSET = 10_000
# A LangGraph client lists namespaces 100 at a time by default; a page of them is small.
MAX_NAMESPACES_LIMIT = 1000


def _offset(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (0 <= value <= MAX_OFFSET):
        raise InvalidArgument(f"offset must be an integer from 0 to {MAX_OFFSET} (got {value!r}).")
    return value


def memory_list_recent(
    *,
    caller: Caller,
    kinds: Sequence[str] = (Kind.FACT,),
    limit: int = 10,
    offset: int = 0,
    namespace_prefix: Sequence[str] | None = None,
    attributes: Mapping[str, Any] | None = None,
    use_tags: Sequence[str] | None = None,
) -> list[Memory]:
    """Retrievable memories newest first (memento's list_recent_memories, a
    LangGraph store search without a query), boundary-filtered and redacted.
    No side effects."""
    require_read(caller)
    limit = validation.limit(limit)
    offset = _offset(offset)
    matching = attribute_filter.parse(attributes)
    decision = read_boundary(caller, use_tags)
    rows = (
        Memory.objects.for_caller(caller)
        .visible_in(decision.visible)
        .retrievable(timezone.now())
        .filter(kind__in=[validation.kind(k) for k in kinds])
        .without_vectors()
    )
    if namespace_prefix:
        prefix = validation.namespace(namespace_prefix, field="namespace_prefix")
        rows = rows.filter(**{f"namespace__0_{len(prefix)}": prefix})
    if matching:
        rows = rows.filter(attribute_filter.expression(matching))
    found = list(rows.order_by("-created_at", "id")[offset : offset + limit])
    boundary_apply(decision, found)
    return found


def memory_similar(
    *,
    caller: Caller,
    memory: Memory,
    threshold: float | None = None,
    limit: int = 5,
    use_tags: Sequence[str] | None = None,
) -> list[tuple[Memory, float]]:
    """The caller's retrievable memories of the same kind and namespace whose
    vectors are closest to ``memory``'s, at or above ``threshold`` cosine
    similarity, most similar first, never ``memory`` itself. Empty while its
    vector is pending. The default threshold is the SIMILAR_THRESHOLD setting."""
    require_read(caller)
    if memory.embedding is None:
        return []
    if threshold is None:
        threshold = float(settings.MEMPROJ_PIPELINE["SIMILAR_THRESHOLD"])
    decision = read_boundary(caller, use_tags)
    rows = list(
        Memory.objects.for_caller(caller)
        .visible_in(decision.visible)
        .retrievable(timezone.now())
        .filter(kind=memory.kind, namespace=memory.namespace)
        .exclude(pk=memory.pk)
        .nearest_first(memory.embedding, tenant_id=caller.tenant_id, max_distance=1.0 - threshold)
        .without_vectors()[:limit]
    )
    boundary_apply(decision, rows)
    return [(row, 1.0 - float(row.distance)) for row in rows]  # type: ignore[attr-defined]


@functools.cache
def _supersedes_sql() -> str:
    table = connection.ops.quote_name(Memory._meta.db_table)
    # The clauses and order of ``Memory.objects.for_caller(caller).visible_in(classes)
    # .filter(superseded_by_id__in=ids).order_by("updated_at", "id")
    # .values_list("superseded_by_id", "pk")``, the lists as arrays; the model's
    # own names, every value a parameter.
    return (
        f'SELECT {table}."superseded_by_id", {table}."id" FROM {table} '  # noqa: S608
        f'WHERE {table}."tenant_id" = %s AND {table}."boundary_class" = ANY(%s) '
        f'AND {table}."superseded_by_id" = ANY(%s) ORDER BY {table}."updated_at" ASC, {table}."id" ASC'
    )


def memory_supersedes_map(*, caller: Caller, memory_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, uuid.UUID]:
    """For each given memory that replaced another: the id it replaced (the
    most recent one when it replaced several). A statement compiled once per
    process: memento reads it for every answer, and building and compiling
    the queryset cost more than running it."""
    require_read(caller)
    visible = sorted(read_boundary(caller).visible)
    if not memory_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_supersedes_sql(), [caller.tenant_id, visible, list(memory_ids)])
        pairs = cursor.fetchall()
    return {new: old for new, old in pairs if new is not None}


def fact_get_by_key(
    *,
    caller: Caller,
    namespace: Sequence[str],
    subject: str,
    predicate: str = "",
    use_tags: Sequence[str] | None = None,
) -> Memory | None:
    """The active fact under a key in a namespace (a LangGraph store get); None
    when there is none or its boundary class is not visible to this read."""
    require_read(caller)
    namespace = validation.namespace(namespace)
    subject = validation.identifier(subject, field="key")
    decision = read_boundary(caller, use_tags)
    memory = (
        Memory.objects.for_caller(caller)
        .visible_in(decision.visible)
        .retrievable(timezone.now())
        .filter(kind=Kind.FACT, namespace=namespace, subject=subject, predicate=predicate)
        .without_vectors()
        .first()
    )
    if memory is not None:
        boundary_apply(decision, [memory])
    return memory


def namespaces_list(
    *,
    caller: Caller,
    prefix: Sequence[str] | None = None,
    suffix: Sequence[str] | None = None,
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[tuple[str, ...]]:
    """Distinct namespaces holding retrievable facts (a LangGraph store's
    list_namespaces): filtered by prefix / suffix, truncated to max_depth,
    in the order of Python's sort of tuples of str, one page of them.

    The database does the matching, truncation, distinct, order and paging,
    so this process reads one page, however many namespaces the tenant has."""
    require_read(caller)
    # Checked, not left to slicing: a negative offset or limit would page from the end.
    limit = validation.limit(limit, maximum=MAX_NAMESPACES_LIMIT)
    offset = _offset(offset)
    prefix = validation.namespace(prefix, field="prefix") if prefix is not None else None
    suffix = validation.namespace(suffix, field="suffix") if suffix is not None else None
    rows = (
        Memory.objects.for_caller(caller)
        .visible_in(read_boundary(caller).visible)
        .retrievable(timezone.now())
        .filter(kind=Kind.FACT)
        .exclude(namespace=[])
        .order_by()
        .values("namespace")
    )
    base, base_params = rows.query.sql_with_params()
    sql, params = _namespaces_page_sql(base, prefix, suffix, max_depth)
    with connection.cursor() as cursor:
        cursor.execute(sql, [*base_params, *params, limit, offset])
        return [tuple(namespace) for (namespace,) in cursor.fetchall()]


# PostgreSQL's array subscripts are int4; a larger depth truncates nothing, as in Python.
_MAX_SUBSCRIPT = 2**31 - 1


def _namespaces_page_sql(
    base: str, prefix: Sequence[str] | None, suffix: Sequence[str] | None, max_depth: int | None
) -> tuple[str, list[str]]:
    """The statement behind ``namespaces_list`` over ``base`` (a query of the
    candidate rows' ``namespace`` column), with its parameters after base's,
    before LIMIT and OFFSET. Matching follows LangGraph: a prefix or suffix
    matches as many segments as it has, ``*`` any one of them. Truncation is
    Python's ``namespace[:max_depth]`` (none for a falsy depth; a negative
    one counts from the end). Sorted under COLLATE "C": arrays compare
    element by element, a shorter array before any longer one it begins, and
    "C" compares UTF-8 bytes, which is code point order, as Python compares
    str, whatever the database's own collation."""
    where: list[str] = []
    params: list[str] = []
    if prefix:
        where.append(f"cardinality(m.namespace) >= {len(prefix)}")
        for position, part in enumerate(prefix, start=1):
            if part != "*":
                where.append(f"m.namespace[{position}] = %s")
                params.append(part)
    if suffix:
        where.append(f"cardinality(m.namespace) >= {len(suffix)}")
        for back, part in enumerate(reversed(suffix)):
            if part != "*":
                where.append(f"m.namespace[cardinality(m.namespace) - {back}] = %s")
                params.append(part)
    depth = operator.index(max_depth) if max_depth else 0
    if not depth:
        end = "cardinality(m.namespace)"
    elif depth > 0:
        end = str(min(depth, _MAX_SUBSCRIPT))
    else:
        end = f"cardinality(m.namespace) - {min(-depth, _MAX_SUBSCRIPT)}"
    sql = (
        f'SELECT DISTINCT m.namespace[1:{end}] COLLATE "C" AS ns FROM ({base}) AS m '  # noqa: S608
        f"{'WHERE ' + ' AND '.join(where) if where else ''} ORDER BY ns LIMIT %s OFFSET %s"
    )
    return sql, params


def composite_scores(
    candidates: Sequence[tuple[Rankable, ChannelHit]], now: datetime, params: RetrievalParams
) -> dict[uuid.UUID, tuple[float, float, float | None]]:
    """Per candidate: (composite score, fused relevance, effective confidence)."""
    out = {}
    fused = scoring.fuse_all({m.id: hit for m, hit in candidates}, params)
    for memory, _hit in candidates:
        relevance = fused[memory.id]
        confidence = effective_confidence_of(memory, now)
        reference_time = memory.last_confirmed_at or memory.created_at
        score = scoring.recall_score(
            relevance=relevance,
            importance=memory.importance,
            recency_value=scoring.recency(reference_time, now, params.half_life(memory.kind)),
            confidence=1.0 if confidence is None else confidence,
        )
        out[memory.id] = (score, relevance, confidence)
    return out


def composite_rank(
    candidates: list[tuple[Memory, ChannelHit]], now: datetime, params: RetrievalParams
) -> list[ScoredMemory]:
    composite = composite_scores(candidates, now, params)
    out = [
        ScoredMemory(
            memory=memory,
            score=composite[memory.id][0],
            relevance=composite[memory.id][1],
            effective_confidence=composite[memory.id][2],
            hit=hit,
        )
        for memory, hit in candidates
    ]
    out.sort(key=tie_break_key)
    return out


def memory_recall_candidates(
    *,
    caller: Caller,
    topic: str,
    scope: str | None = None,
    limit: int = 10,
    kinds: Sequence[str] = ("fact", "rule"),
    use_tags: Sequence[str] | None = None,
    params: RetrievalParams | None = None,
) -> list[ScoredMemory]:
    """Composite-scored facts and rules (the butlers memory module's memory_recall), without side effects."""
    require_read(caller)
    decision = read_boundary(caller, use_tags)
    params = retrieval_params(caller, params)
    topic = validation.query(topic, field="topic")
    limit = validation.limit(limit)
    if scope is not None:
        scope = validation.label(scope, field="scope")
    now = timezone.now()
    flt = RetrievalFilter(
        kinds=list(kinds), now=now, scopes=sorted({"global", scope}) if scope else None, use_tags=decision.use_tags
    )
    params = params.with_(k_vec=max(params.k_vec, limit))
    candidates, decision = _candidates(caller=caller, query=topic, mode="hybrid", flt=flt, params=params)
    composite = composite_scores(candidates, now, params)
    hit_of = {row.id: hit for row, hit in candidates}
    ordered = [
        row.id
        for row, _ in sorted(candidates, key=lambda c: order_key(composite[c[0].id][0], c[0].created_at, c[0].id))
    ]
    rows = _hydrate(caller=caller, decision=decision, ranked_ids=ordered, want=limit)
    return [
        ScoredMemory(
            memory=rows[pk],
            score=composite[pk][0],
            relevance=composite[pk][1],
            effective_confidence=composite[pk][2],
            hit=hit_of[pk],
        )
        for pk in ordered
        if pk in rows
    ]


def memory_fetch(*, caller: Caller, kind: str, memory_id: object, use_tags: Sequence[str] | None = None) -> Memory:
    require_read(caller)
    kind = validation.kind(kind)
    pk = memory_pk(caller, memory_id)
    decision = read_boundary(caller, use_tags)
    # A memory whose boundary class this read may not see is "not found", like
    # another tenant's: its existence is not revealed.
    memory = (
        Memory.objects.for_caller(caller)
        .visible_in(decision.visible)
        .filter(pk=pk, kind=kind)
        .without_vectors()
        .first()
    )
    if memory is None:
        raise NotFound(f"no {kind} with id {pk} in this tenant; check the type and id, or use memory_search.")
    boundary_apply(decision, [memory])
    return memory


def memory_stats(*, caller: Caller, scope: str | None = None) -> dict:
    require_read(caller)
    if scope is not None:
        scope = validation.label(scope, field="scope")
    now = timezone.now()
    base = Memory.objects.for_caller(caller).in_scopes(scope)
    # Active as every read sees it: a memory past its TTL is never retrieved,
    # though it keeps validity=ACTIVE until the expiry sweep deletes it.
    live = retrievable_q(now)
    past_ttl = Q(expires_at__lte=now)
    backlog = live & Q(consolidated_at__isnull=True)

    fact_rows = base.filter(kind=Kind.FACT).aggregate(
        total=Count("id"),
        superseded=Count("id", filter=Q(validity=Validity.SUPERSEDED)),
        retracted=Count("id", filter=Q(validity=Validity.RETRACTED)),
    )
    # A fact not yet deleted past its TTL is expired, whatever its confidence:
    # the states still add up to the facts neither superseded nor retracted.
    states = (
        base.filter(kind=Kind.FACT, validity=Validity.ACTIVE)
        .with_effective_confidence(now)
        .aggregate(
            active=Count("id", filter=live & Q(effective_confidence__gte=scoring.FADING_BELOW)),
            fading=Count(
                "id",
                filter=live
                & Q(effective_confidence__gte=scoring.EXPIRED_BELOW)
                & Q(effective_confidence__lt=scoring.FADING_BELOW),
            ),
            expired=Count("id", filter=past_ttl | Q(effective_confidence__lt=scoring.EXPIRED_BELOW)),
        )
    )

    rules = base.filter(kind=Kind.RULE).aggregate(
        total=Count("id"),
        active=Count("id", filter=live),
        **{m: Count("id", filter=live & Q(maturity=m)) for m in Maturity.values},
    )
    episodes = base.filter(kind=Kind.EPISODE).aggregate(
        total=Count("id"),
        unconsolidated=Count("id", filter=backlog),
        expired=Count("id", filter=past_ttl),
        oldest_unconsolidated=Min("created_at", filter=backlog),
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


def recent_episodes(
    *, caller: Caller, butler: str, now: datetime, limit: int = 50, use_tags: Sequence[str] | None = None
) -> list[Memory]:
    decision = read_boundary(caller, use_tags)
    episodes = list(
        Memory.objects.for_caller(caller)
        .retrievable(now)
        .visible_in(decision.visible)
        .filter(kind=Kind.EPISODE, butler=butler)
        .without_vectors()
        .order_by("-created_at", "id")[:limit]
    )
    boundary_apply(decision, episodes)
    return episodes


def memory_ids(items: Sequence[ScoredMemory]) -> list[uuid.UUID]:
    return [item.memory.id for item in items]
