"""Reads for roampal v0.3.5's collections: prefixed ids, search with
``days_back`` / ``id`` / ``sort_by``, the outcome history, and the memories a
KNOWN CONTEXT block shows.

Ids: the core id is a UUID. Roampal's ids carry the collection, so the display
id is ``<collection>_<first 12 hex digits of the UUID>`` (``patterns_3f9a0c12d4e5``).
It maps back through a primary-key range (every UUID starting with those 48
bits), whatever the prefix says: a memory keeps its id while it moves from
working to history to patterns, and an id cached in an old KNOWN CONTEXT block
still resolves. A full UUID (or ``<collection>_<32 hex>``) is accepted too.

An update supersedes (the core keeps every earlier text as a superseded row
pointing at its successor), yet upstream roampal updates in place and its
clients keep the id they were given. So the public id of a memory is the id of
the first version of its supersession chain, and any version's id resolves to
the current version: the id a client holds keeps working after any number of
updates, through every tool that takes one."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Q, UUIDField
from django.db.models.expressions import RawSQL
from django.utils import timezone

from memory import scoring, validation
from memory.errors import InvalidArgument, NotFound
from memory.models import Collection, Memory, Validity, collection_of
from memory.selectors.aliases import alias_targets, aliases_of
from memory.selectors.memories import (
    QueryVectors,
    RankRow,
    SearchQuery,
    SearchRanking,
    boundary_apply,
    memory_bank_always_injected,
    memory_rows_by_id,
    memory_search_ranking,
    order_key,
    read_boundary,
    require_read,
)
from memproj.dbthreads import side_by_side
from policy.caller import Caller

COLLECTIONS = ("working", "history", "patterns", "memory_bank", "books")
KINDS_OF = {"working": "episode", "history": "episode", "patterns": "rule", "memory_bank": "fact", "books": "document"}
SORTS = ("relevance", "recency", "score")
ID_HEX = 12
_DISPLAY_ID = re.compile(r"^(?:(working|history|patterns|memory_bank|books)_)?([0-9a-fA-F-]{12,36})$")
OUTCOME_SIGNALS = ("worked", "partial", "failed", "unknown")
OUTCOME_MARKS = {"worked": "Y", "partial": "~", "failed": "N", "unknown": "?"}
MEMORY_BANK_ALWAYS_INJECT_MAX = 10


CHAIN_MAX_DEPTH = 1000  # a guard against a cycle; real chains are a handful of versions


# An id roampal itself gave (v0.3.5 and later: the collection and 8 hex digits),
# kept as an alias when its store was imported (memory.services.imports).
_UPSTREAM_ID = re.compile(r"^(working|history|patterns|memory_bank|books)_([0-9a-fA-F]{8})$")
UPSTREAM_SYSTEM = "roampal"


def _display(memory: Memory, first_version: uuid.UUID, upstream_hex: str | None = None) -> str:
    """An imported memory keeps the hex digits roampal gave it; like upstream's,
    its prefix follows the collection it is in now."""
    if upstream_hex:
        return f"{collection_of(memory)}_{upstream_hex}"
    return f"{collection_of(memory)}_{first_version.hex[:ID_HEX]}"


def upstream_hexes(first_version_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The hex digits of the roampal id each (first version of a) memory was imported with."""
    out = {}
    for pk, alias in aliases_of(list(first_version_ids), system=UPSTREAM_SYSTEM).items():
        match = _UPSTREAM_ID.match(alias)
        if match:
            out[pk] = match.group(2).lower()
    return out


def _aliased(caller: Caller, memory_id: object) -> uuid.UUID | None:
    """The memory an alias names (an imported store's id); a roampal id also by
    its hex digits under any collection prefix, as a promotion keeps them."""
    if not isinstance(memory_id, str) or not memory_id.strip():
        return None
    value = memory_id.strip()
    match = _UPSTREAM_ID.match(value)
    candidates = [value] + ([f"{c}_{match.group(2).lower()}" for c in COLLECTIONS] if match else [])
    found = alias_targets(tenant_id=caller.tenant_id, aliases=candidates)
    for candidate in candidates:
        if candidate in found:
            return found[candidate]
    return None


def display_id(memory: Memory) -> str:
    """The public id: the collection and the first version's hex digits."""
    first = first_versions([memory.id])[memory.id]
    return _display(memory, first, upstream_hexes([first]).get(first))


def first_versions(memory_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, uuid.UUID]:
    """Each memory's first version, walking supersession backwards (one query).
    Where several rows were merged into one, the oldest of the deepest wins, so
    the answer only changes if a longer chain is merged in later."""
    if not memory_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH RECURSIVE chain(head, id, depth) AS (
                SELECT id, id, 0 FROM memory_memory WHERE id = ANY(%s)
                UNION ALL
                SELECT chain.head, m.id, chain.depth + 1
                FROM memory_memory m JOIN chain ON m.superseded_by_id = chain.id
                WHERE m.validity = %s AND chain.depth < %s
            )
            SELECT DISTINCT ON (chain.head) chain.head, chain.id
            FROM chain JOIN memory_memory m ON m.id = chain.id
            ORDER BY chain.head, chain.depth DESC, m.created_at, m.id
            """,
            [list(memory_ids), Validity.SUPERSEDED, CHAIN_MAX_DEPTH],
        )
        found = dict(cursor.fetchall())
    return {pk: found.get(pk, pk) for pk in memory_ids}


def _current_version(caller: Caller, memory_id: uuid.UUID) -> RawSQL:
    """The version that replaced this one last (supersession followed forwards),
    as a subquery: a filter on it reads the chain and the row in one statement,
    so in one snapshot. Two statements would let another update commit between
    them: the version the first found current would be superseded by the
    second, and the memory would look gone while it has a newer version."""
    return RawSQL(
        """
        COALESCE((
            WITH RECURSIVE chain(id, next, depth) AS (
                SELECT id, superseded_by_id, 0 FROM memory_memory WHERE id = %s AND tenant_id = %s
                UNION ALL
                SELECT m.id, m.superseded_by_id, chain.depth + 1
                FROM memory_memory m JOIN chain ON m.id = chain.next
                WHERE m.tenant_id = %s AND chain.depth < %s
            )
            SELECT id FROM chain ORDER BY depth DESC LIMIT 1
        ), %s)
        """,
        [memory_id, caller.tenant_id, caller.tenant_id, CHAIN_MAX_DEPTH, memory_id],
        output_field=UUIDField(),
    )


def id_range(value: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The primary-key range a display id (or UUID) stands for."""
    match = _DISPLAY_ID.match(value.strip()) if isinstance(value, str) else None
    digits = match.group(2).replace("-", "").lower() if match else ""
    if not match or len(digits) not in (ID_HEX, 32) or not re.fullmatch(r"[0-9a-f]+", digits):
        raise InvalidArgument(
            f"{value!r} is not a memory id; use the id shown in [id:...] tags, e.g. patterns_3f9a0c12d4e5."
        )
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


def collection_get(caller: Caller, memory_id: str, *, now: datetime | None = None) -> Memory:
    """The current version of the memory a display id (or UUID) names, if it
    is retrievable: an id of an earlier version resolves to its successor."""
    require_read(caller)
    missing = NotFound(f"no memory with id {memory_id}; it may have been deleted. Search to find current ids.")
    aliased = _aliased(caller, memory_id)
    if aliased is not None:
        named = [aliased]
    else:
        low, high = id_range(memory_id)
        named = list(
            Memory.objects.for_caller(caller).filter(pk__gte=low, pk__lte=high).values_list("pk", flat=True)[:2]
        )
    if len(named) > 1:
        raise InvalidArgument(f"the id {memory_id} is ambiguous in this tenant; pass the full UUID.")
    if not named:
        raise missing
    decision = read_boundary(caller)
    rows = list(
        Memory.objects.for_caller(caller)
        .visible_in(decision.visible)
        .retrievable(now or timezone.now())
        .filter(pk=_current_version(caller, named[0]))
        .without_vectors()
    )
    boundary_apply(decision, rows)
    if not rows:
        raise missing
    return rows[0]


def collection_lookup(*, caller: Caller, memory_id: str) -> list[CollectionHit]:
    """search_memory(id=...): the one memory, with its full scoring data; an id
    that names no memory (unknown, deleted, not even an id's shape) finds
    nothing, as upstream's lookup does."""
    try:
        return _hits([collection_get(caller, memory_id)])
    except (NotFound, InvalidArgument):
        return []


def collection_ids(caller: Caller, memory_ids: Sequence[str]) -> dict[str, Memory]:
    """Display id -> memory for the ones that exist (scoring skips unknown ids)."""
    out: dict[str, Memory] = {}
    for value in memory_ids:
        try:
            out[value] = collection_get(caller, value)
        except (NotFound, InvalidArgument):
            continue
    return out


@dataclass
class CollectionHit:
    """One memory as roampal's normalized result shape needs it."""

    memory: Memory
    wilson: float
    outcomes: list[str] = field(default_factory=list)  # newest last, at most 3
    similarity: float | None = None
    final_rank_score: float | None = None
    first_version: uuid.UUID | None = None  # set by _annotate, which looks them up together
    upstream_hex: str | None = None  # likewise: the hex of the roampal id it was imported with

    @property
    def collection(self) -> str:
        return collection_of(self.memory)

    @property
    def id(self) -> str:
        if self.first_version is None:
            return display_id(self.memory)
        return _display(self.memory, self.first_version, self.upstream_hex)


def _hits(memories: Sequence[Memory], similarity: Mapping[uuid.UUID, float] | None = None) -> list[CollectionHit]:
    hits = _bare_hits(memories, similarity)
    _annotate(hits)
    return hits


def _bare_hits(memories: Sequence[Memory], similarity: Mapping[uuid.UUID, float] | None = None) -> list[CollectionHit]:
    """The hits without what ``_annotate`` adds (outcomes, first version, roampal id)."""
    out = []
    for memory in memories:
        hit = CollectionHit(
            memory=memory, wilson=scoring.wilson_lower_bound(memory.success_count, memory.applied_count)
        )
        if similarity is not None:
            hit.similarity = similarity.get(memory.id, 0.0)
            hit.final_rank_score = rank_score(memory, hit.similarity)
        out.append(hit)
    return out


# What ``outcome_histories``, ``first_versions`` and ``upstream_hexes`` read, in
# one statement: rows of (what, memory, first version, text), where what is 'f'
# (the memory's first version), 'o' (an outcome, oldest first) or 'a' (the
# roampal id the first version was imported with).
_ANNOTATIONS_SQL = """
    WITH RECURSIVE chain(head, id, depth) AS (
        SELECT id, id, 0 FROM memory_memory WHERE id = ANY(%(ids)s)
        UNION ALL
        SELECT chain.head, m.id, chain.depth + 1
        FROM memory_memory m JOIN chain ON m.superseded_by_id = chain.id
        WHERE m.validity = %(superseded)s AND chain.depth < %(max_depth)s
    ),
    firsts AS (
        SELECT DISTINCT ON (chain.head) chain.head, chain.id AS first
        FROM chain JOIN memory_memory m ON m.id = chain.id
        ORDER BY chain.head, chain.depth DESC, m.created_at, m.id
    )
    SELECT 'f', head, first, NULL::text, NULL::bigint FROM firsts
    UNION ALL
    SELECT 'o', memory_id, NULL::uuid, event_type, id FROM (
        SELECT id, memory_id, event_type,
               row_number() OVER (PARTITION BY memory_id ORDER BY id DESC) AS turn
        FROM memory_memoryevent
        WHERE memory_id = ANY(%(ids)s) AND event_type = ANY(%(outcomes)s)
    ) recent WHERE turn <= 3
    UNION ALL
    SELECT 'a', memory_id, NULL::uuid, alias, id FROM (
        SELECT DISTINCT ON (a.memory_id) a.memory_id, a.alias, a.id
        FROM memory_memoryalias a
        WHERE a.memory_id IN (SELECT first FROM firsts) AND a.system = %(system)s
        ORDER BY a.memory_id, a.id
    ) first_alias
    ORDER BY 1, 5
"""


def _annotate(hits: Sequence[CollectionHit]) -> None:
    """Each hit's outcome history, first version and upstream roampal id, for
    all of them in one statement (an answer's sections share it)."""
    memory_ids = list(dict.fromkeys(h.memory.id for h in hits))
    if not memory_ids:
        return
    histories: dict[uuid.UUID, list[str]] = {}
    firsts: dict[uuid.UUID, uuid.UUID] = {}
    upstream: dict[uuid.UUID, str] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            _ANNOTATIONS_SQL,
            {
                "ids": memory_ids,
                "superseded": Validity.SUPERSEDED,
                "max_depth": CHAIN_MAX_DEPTH,
                "outcomes": [f"marked_{s}" for s in OUTCOME_SIGNALS],
                "system": UPSTREAM_SYSTEM,
            },
        )
        # Outcomes arrive oldest first: the 'o' rows are ordered by event id.
        for what, memory_id, first, text, _order in cursor.fetchall():
            if what == "f":
                firsts[memory_id] = first
            elif what == "o":
                histories.setdefault(memory_id, []).append(text.removeprefix("marked_"))
            else:
                match = _UPSTREAM_ID.match(text)
                if match:
                    upstream[memory_id] = match.group(2).lower()
    for hit in hits:
        first = firsts.get(hit.memory.id, hit.memory.id)
        hit.outcomes = list(histories.get(hit.memory.id, []))
        hit.first_version = first
        hit.upstream_hex = upstream.get(first)


def rank_score(memory: Memory | RankRow, similarity: float) -> float:
    collection = collection_of(memory)
    quality = None
    if collection == Collection.MEMORY_BANK:
        quality = scoring.memory_bank_quality(
            memory.importance / 10, memory.confidence, memory.success_count, memory.applied_count
        )
    return scoring.collection_rank(
        collection=collection,
        similarity=similarity,
        score=memory.outcome_score,
        uses=memory.applied_count,
        quality=quality,
    )


# roampal's date fields that a memory has (upstream's DATE_FIELDS, which it
# keeps out of ChromaDB's `where` and compares itself), and the column each
# filters: created_at (timestamp where history and patterns were stored
# directly) is when the memory happened, which an import keeps; last_used is
# when an outcome was last applied (unset until one is: no date filter on it
# finds a memory never used).
DATE_FIELDS = {"created_at": "occurred_at", "timestamp": "occurred_at", "last_used": "last_applied_at"}
_RANGE_LOOKUPS = {"$gte": "gte", "$gt": "gt", "$lte": "lte", "$lt": "lt"}
# ASCII digits only: a date's \d would take other scripts' digits too.
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DATE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ].+", re.DOTALL)


def _date_filter(key: str, value: object) -> tuple[Q, datetime | None]:
    """One date field's filter as roampal v0.3.5 reads it: a day (YYYY-MM-DD)
    is every instant of that day, another date-time that instant, and
    $gte/$gt/$lte/$lt bound it. Any other value would compare the stored text
    with something no date equals, so it is refused. Also the earliest instant
    the filter admits (None: unbounded below)."""
    column = DATE_FIELDS[key]
    refused = InvalidArgument(
        f"metadata.{key} takes a day (YYYY-MM-DD), an ISO date-time, or $gte/$gt/$lte/$lt with ISO dates or date-times."
    )
    if isinstance(value, str) and _DAY.fullmatch(value):
        start = _iso(f"{value}T00:00:00")
        if start is None:  # no such day: 2025-02-30
            raise refused
        condition = Q(**{f"{column}__gte": start})
        if value != date.max.isoformat():
            end = _iso(f"{date.fromisoformat(value) + timedelta(days=1)}T00:00:00")
            condition &= Q(**{f"{column}__lt": end})
        return condition, start
    if isinstance(value, str) and _DATE_TIME.fullmatch(value):
        when = _iso(value)
        if when is None:
            raise refused
        return Q(**{column: when}), when
    if not isinstance(value, Mapping):
        raise refused
    condition, after = Q(), None
    for op, raw in value.items():
        lookup = _RANGE_LOOKUPS.get(op)
        when = _iso(raw)
        if lookup is None or when is None:
            raise refused
        condition &= Q(**{f"{column}__{lookup}": when})
        if lookup in ("gte", "gt"):
            after = when if after is None else max(after, when)
    return condition, after


def _metadata_filter(metadata: Mapping[str, Any] | None) -> tuple[Q, datetime | None]:
    """roampal's ``metadata`` filter: the date fields' days, instants and
    ranges (``_date_filter``), tags, and equality on other metadata keys. Also
    the earliest instant the memory happened that it admits, which the search
    applies before it ranks."""
    if not metadata:
        return Q(), None
    validation.json_value(metadata, field="metadata")
    condition, after = Q(), None
    for key, value in metadata.items():
        if key.startswith("$"):
            # ChromaDB's logical operators ($and, $or): not taken, rather than read as a field name
            # that no memory has, which found nothing and said nothing.
            raise InvalidArgument(
                f"metadata filter keys name metadata fields to equal; {key[:50]!r} is an operator, "
                "which this filter does not take (several keys must all match)."
            )
        if key in DATE_FIELDS:
            date_condition, date_after = _date_filter(key, value)
            condition &= date_condition
            if date_after is not None and DATE_FIELDS[key] == "occurred_at":
                after = date_after if after is None else max(after, date_after)
        elif key == "tags":
            tags = [value] if isinstance(value, str) else value
            condition &= Q(tags__contains=validation.tags(tags))
        elif isinstance(value, (str, int, float, bool)):
            condition &= Q(metadata__contains={key: value})
        else:
            raise InvalidArgument(
                f"metadata.{key} takes a string, number or boolean to equal; only {', '.join(DATE_FIELDS)} take ranges."
            )
    return condition, after


def _iso(raw: object) -> datetime | None:
    """An ISO date-time as an instant in UTC. Python reads offsets up to
    +-23:59, PostgreSQL holds +-15:59: the instant is the same in UTC. One
    beyond Python's years 1-9999 in UTC is at the end of that range. A leap
    second (``23:59:60`` UTC, in any offset, as validation.rfc3339 takes one) is
    the next second, as PostgreSQL reads it: ``2016-12-31T23:59:60Z`` is
    2017-01-01 00:00:00 UTC; a second 60 at any other time is refused."""
    if not isinstance(raw, str):
        return None
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        return _leap_second(raw)
    if not when.tzinfo:
        when = timezone.make_aware(when, timezone.get_current_timezone())
    try:
        return when.astimezone(UTC)
    except OverflowError:
        edge = datetime.min if when.year == datetime.min.year else datetime.max
        return edge.replace(tzinfo=UTC)


# The seconds of a date-time as fromisoformat writes them (hh:mm:ss, an
# optional fraction, then an offset or nothing), when they are 60.
_LEAP_SECOND = re.compile(r"(.+[T ][0-9]{2}:[0-9]{2}):60((?:[.,][0-9]+)?(?:[Zz]|[+-].*)?)", re.ASCII | re.DOTALL)


def _leap_second(raw: str) -> datetime | None:
    """``_iso`` of a time whose second is 60: read as :59, and then one second
    later, if it falls in the last minute of a UTC day (a time with no offset
    is in the current timezone, as ``_iso`` reads one). datetime cannot hold
    second 60, so fromisoformat refuses it."""
    match = _LEAP_SECOND.fullmatch(raw)
    if match is None:
        return None
    try:
        when = datetime.fromisoformat(f"{match[1]}:59{match[2]}")
    except ValueError:
        return None
    if not when.tzinfo:
        when = timezone.make_aware(when, timezone.get_current_timezone())
    offset = when.utcoffset() or timedelta(0)
    if not validation.last_minute_of_utc_day(when.hour, when.minute, offset):
        return None
    try:
        # One addition, so only an instant beyond years 1-9999 overflows.
        return (when.replace(tzinfo=None) + (timedelta(seconds=1) - offset)).replace(tzinfo=UTC)
    except OverflowError:
        edge = datetime.min if when.year == datetime.min.year else datetime.max
        return edge.replace(tzinfo=UTC)


def collection_search(
    *,
    caller: Caller,
    query: str | None = None,
    collections: Sequence[str] | None = None,
    days_back: int | None = None,
    sort_by: str | None = None,
    limit: int = 5,
    metadata: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> list[CollectionHit]:
    """roampal's search: semantic (hybrid) with a query, a timeline without one
    (newest first), both with the full scoring data."""
    require_read(caller)
    now = now or timezone.now()
    chosen = list(collections or COLLECTIONS)
    for name in chosen:
        validation.choice(name, field="collections", allowed=COLLECTIONS)
    if sort_by is not None:
        validation.choice(sort_by, field="sort_by", allowed=SORTS)
    limit = validation.limit(limit)
    created_after = now - timedelta(days=days_back) if days_back else None
    condition, meta_after = _metadata_filter(metadata)
    if meta_after is not None:
        created_after = meta_after if created_after is None else max(created_after, meta_after)
    if query and query.strip():
        ranked = _ranked_by_collection(
            caller=caller,
            query=query,
            chosen=chosen,
            created_after=created_after,
            condition=condition if metadata else None,
            limit=limit,
            order=sort_by or "relevance",
        )
        hits = ranked.hits(ranked.ranking.load(caller, ranked.ids, limit))
    else:
        decision = read_boundary(caller)
        qs = (
            Memory.objects.for_caller(caller)
            .visible_in(decision.visible)
            .retrievable(now)
            .in_collections(chosen)
            .filter(condition)
        )
        if created_after is not None:
            qs = qs.filter(occurred_at__gte=created_after)
        if sort_by == "score":
            qs = qs.order_by("-outcome_score", "-occurred_at", "id")
        else:
            qs = qs.order_by("-occurred_at", "id")
        rows = list(qs.without_vectors()[:limit])
        boundary_apply(decision, rows)
        hits = sort_hits(_bare_hits(rows), sort_by or "recency")
    _annotate(hits)
    return hits


@dataclass
class _CollectionRanking:
    """A search by meaning ranked by the collection rank, before its rows are
    loaded (``hits`` makes the hits of the loaded rows)."""

    ranking: SearchRanking
    ids: list[uuid.UUID]  # best first
    similarity: dict[uuid.UUID, float]
    limit: int
    order: str

    def hits(self, loaded: Mapping[uuid.UUID, Memory]) -> list[CollectionHit]:
        hits = _bare_hits([loaded[pk] for pk in self.ids if pk in loaded], self.similarity)
        return sort_hits(hits, self.order)[: self.limit]


def _ranked_by_collection(
    *,
    caller: Caller,
    query: str,
    chosen: Sequence[str],
    created_after: datetime | None,
    condition: Q | None,
    limit: int,
    order: str,
    vectors: QueryVectors | None = None,
) -> _CollectionRanking:
    ranking = memory_search_ranking(
        vectors=vectors,
        caller=caller,
        query=SearchQuery(
            query,
            types=sorted({KINDS_OF[c] for c in chosen}),
            mode="hybrid",
            limit=min(100, max(4 * limit, 40)),
            collections=chosen,
            created_after=created_after,
        ),
    )
    # The search's first `limit` candidates ranked again by the collection
    # rank on their ranking columns; only the rows returned are loaded.
    found = ranking.items[: ranking.limit]
    if condition is not None:
        ids = [row.id for row, _, _ in found]
        kept = set(Memory.objects.filter(pk__in=ids).filter(condition).values_list("pk", flat=True))
        found = [item for item in found if item[0].id in kept]
    similarity = {row.id: max(0.0, hit.vector_similarity or relevance) for row, relevance, hit in found}
    ranked = [
        row.id
        for row, _, _ in sorted(found, key=lambda f: _order_key(f[0], rank_score(f[0], similarity[f[0].id]), order))
    ]
    return _CollectionRanking(ranking=ranking, ids=ranked, similarity=similarity, limit=limit, order=order)


def _load_together(caller: Caller, rankings: Sequence[_CollectionRanking]) -> list[list[CollectionHit]]:
    """The hits of several rankings of one read (one boundary decision), the
    rows each returns loaded by one statement; a ranking whose first rows are
    no longer all there loads its next ones as ``SearchRanking.load`` would."""
    decision = rankings[0].ranking.decision
    first = [pk for r in rankings for pk in r.ids[: r.limit]]
    rows = memory_rows_by_id(caller, decision, first)
    boundary_apply(decision, list(rows.values()))
    out = []
    for r in rankings:
        loaded = {pk: rows[pk] for pk in r.ids[: r.limit] if pk in rows}
        if len(loaded) < r.limit and len(r.ids) > r.limit:
            loaded.update(r.ranking.load(caller, r.ids[r.limit :], r.limit - len(loaded)))
        out.append(r.hits(loaded))
    return out


def sort_hits(hits: list[CollectionHit], order: str) -> list[CollectionHit]:
    """relevance (final_rank_score), recency or score; ties: newer first, then id."""
    return sorted(hits, key=lambda h: _order_key(h.memory, h.final_rank_score, order))


def _order_key(memory: Memory | RankRow, final_rank_score: float | None, order: str) -> tuple:
    """The butlers memory module's order (``order_key``) on the score ``order`` names."""
    score = {"recency": 0.0, "score": memory.outcome_score}.get(order, final_rank_score or 0.0)
    # Newer by when it happened, as days_back selects and a memory's created_at shows.
    return order_key(score, memory.occurred_at, memory.id)


@dataclass
class KnownContext:
    user_facts: list[CollectionHit]
    relevant: list[CollectionHit]

    @property
    def memory_ids(self) -> list[uuid.UUID]:
        return [h.memory.id for h in (*self.user_facts, *self.relevant)]


def known_context(*, caller: Caller, query: str, facts: int = 3, memories: int = 3) -> KnownContext:
    """What a KNOWN CONTEXT block shows for a prompt: memory_bank facts marked
    always_inject, the memory_bank facts closest to the prompt, and the best
    ranked working/history/patterns/books memories."""
    require_read(caller)
    now = timezone.now()
    decision = read_boundary(caller)
    pinned = memory_bank_always_injected(caller, decision, now, MEMORY_BANK_ALWAYS_INJECT_MAX)
    boundary_apply(decision, pinned)
    found: list[CollectionHit] = []
    relevant: list[CollectionHit] = []
    if query.strip():
        # Two independent searches of one question (embedded once): side by
        # side, each on its own connection; the rows both return are then loaded together.
        vectors = QueryVectors()

        def ranked(chosen: list[str], limit: int) -> _CollectionRanking:
            return _ranked_by_collection(
                vectors=vectors,
                caller=caller,
                query=query,
                chosen=chosen,
                created_after=None,
                condition=None,
                limit=validation.limit(limit),
                order="relevance",
            )

        found, relevant = _load_together(
            caller,
            side_by_side(
                lambda: ranked(["memory_bank"], facts),
                lambda: ranked(["working", "history", "patterns", "books"], memories),
            ),
        )
    user_facts = _bare_hits(pinned) + [h for h in found if h.memory.id not in {m.id for m in pinned}]
    # The sections' outcomes, first versions and roampal ids: one statement for all.
    _annotate([*user_facts, *relevant])
    return KnownContext(user_facts=user_facts, relevant=relevant)
