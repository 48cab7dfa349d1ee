"""Activation (pce-memory v0.14.0's activate / search): claims ranked by the hybrid score of
the one retrieval path times the critic's g (memory.scoring.activation_score),
boundary-first by the read's use tags, with the tenant policy's parameters.
``claims_activate`` keeps the ranking as an active context that a cursor pages
through until it expires; the ``active-contexts-expire`` beat sweep deletes it
after that (``sweeps.active_contexts_expire``). Building one is a write, so it
needs the 'write' scope; ``claims_search`` gives a read-only token the same
ranking without one, its cursor a keyset (the last claim shown) into the
ranking computed again."""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection
from django.utils import timezone

from memory import scoring, validation
from memory.claims import claim_kind_from, claim_scopes
from memory.errors import Gone, InvalidArgument, PermissionDenied
from memory.models import ActiveContext, Kind, Memory
from memory.retrieval import RetrievalFilter, channel_search
from memory.scoring import ActivationScore
from memory.selectors.graph import claims_near
from memory.selectors.memories import (
    boundary_apply,
    memory_rows_by_id,
    query_vector_later,
    read_boundary,
    require_read,
    retrieval_params,
)
from policy.boundary import BoundaryDecision
from policy.caller import Caller

MAX_RANKED = 200  # an active context keeps at most this many ranked claims
MAX_TOP_K = 50


@dataclass(frozen=True)
class _Scored:
    breakdown: ActivationScore
    reason: str

    @property
    def score(self) -> float:
        return self.breakdown.score


@dataclass(frozen=True)
class RankedClaim(_Scored):
    memory: Memory


@dataclass(frozen=True)
class ActivationPage:
    items: list[RankedClaim]
    next_cursor: str | None
    has_more: bool
    context: ActiveContext | None = None


class ClaimRow(NamedTuple):
    """The columns a claim's ranking reads (``_rank``): an activation ranks
    every hit of both channels (up to k_vec + k_txt) and returns a page of
    them, so only the page's rows are loaded in full (``_with_rows``)."""

    id: uuid.UUID
    kind: str
    scope: str
    utility: float
    confidence: float
    created_at: datetime
    success_count: float
    applied_count: int
    claim_kind: object  # metadata's claim_kind as stored (memory.claims.claim_kind_of)
    boundary_class: str


# The ranking columns of the caller's memories of some ids in the read's
# visible classes: MemoryQuerySet.for_caller(...).visible_in(...) as one fixed
# statement (no queryset to build and compile on every read).
_CLAIM_ROWS_SQL = (
    "SELECT id, kind, scope, utility, confidence, created_at, success_count, applied_count, metadata -> 'claim_kind',"
    " boundary_class"
    " FROM memory_memory WHERE tenant_id = %s AND boundary_class = ANY(%s) AND id = ANY(%s)"
)


@dataclass(frozen=True)
class _Ranked(_Scored):
    """A ranked claim before its row is loaded."""

    id: uuid.UUID
    created_at: datetime


def _claim_rows(caller: Caller, decision: BoundaryDecision, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, ClaimRow]:
    """The ranking columns of these memories (graph neighbours, which no channel
    returned), filtered by tenant and by the read's boundary."""
    if not ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_ROWS_SQL, [caller.tenant_id, sorted(decision.visible), list(ids)])
        fetched = cursor.fetchall()
    return {row[0]: _claim_row(row) for row in fetched}


def _claim_row(values: Sequence[Any]) -> ClaimRow:
    row = ClaimRow._make(values)
    # jsonb arrives as its text (Django's loader), decoded as JSONField would.
    return row._replace(claim_kind=json.loads(str(row.claim_kind)) if row.claim_kind is not None else None)


class _Ranking(NamedTuple):
    """A ranking (``_claims_ranked``), the read's boundary decision, and what the
    scores were computed with: the instant the recency is taken at and each
    channel's best raw score (what normalisation divides by). A search cursor
    carries the last two, so the next page's claims score as they did on the
    first page."""

    ranked: list[_Ranked]
    decision: BoundaryDecision
    now: datetime
    scale: tuple[float, float]


def _rank(caller: Caller, row: ClaimRow, channels: tuple[float, float], reason: str, now: datetime) -> _Ranked:
    """``channels``: the claim's (S_vec, S_text), each channel's score over the
    query's best in that channel (scoring.normalised_channels): pce-memory's
    scores normalised to [0, 1]. Through pce's own write and activate this ranks
    better on MADial and LongMemEval (bench/quality.py's dialect table) than
    upstream's (cos + 1) / 2 with a squashed keyword score (a vector term
    confined to a fraction of its range, a keyword term near 1 for any match)."""
    policy = caller.policy.retrieval
    s_vec, s_text = channels
    claim_kind = claim_kind_from(row.claim_kind, row.kind)
    breakdown = scoring.activation_score(
        s_vec=s_vec,
        s_text=s_text,
        alpha=policy.alpha,
        utility=row.utility,
        confidence=row.confidence,
        age_days=scoring.days_between(row.created_at, now),
        half_life_days=policy.half_life_days(claim_kind),
        use_quality=policy.use_quality,
        wilson=scoring.wilson_lower_bound(row.success_count, row.applied_count),
    )
    return _Ranked(id=row.id, created_at=row.created_at, breakdown=breakdown, reason=reason)


def _with_rows(caller: Caller, decision: BoundaryDecision, ranked: Sequence[_Ranked]) -> list[RankedClaim]:
    """The ranked claims with their full rows (redacted), in ranking order; a
    claim deleted or reclassified since it was ranked is left out."""
    rows = memory_rows_by_id(caller, decision, [r.id for r in ranked])
    boundary_apply(decision, list(rows.values()))
    return [RankedClaim(memory=rows[r.id], breakdown=r.breakdown, reason=r.reason) for r in ranked if r.id in rows]


def claims_rank(
    *, caller: Caller, query: str, scopes: Sequence[str] | None = None, use_tags: Sequence[str] | None = None
) -> list[RankedClaim]:
    """Every claim (fact or rule of any dialect) the read may see, best first:
    score DESC, created_at DESC, id ASC; claims whose hybrid score is below the
    policy's threshold are dropped (as upstream)."""
    ranking = _claims_ranked(caller=caller, query=query, query_field="query", scopes=scopes, use_tags=use_tags)
    return _with_rows(caller, ranking.decision, ranking.ranked)


def _order(r: _Ranked) -> tuple[float, int, str]:
    """The ranking's order: score DESC, created_at DESC, id ASC (the score to 12
    places, so float noise ties as equal)."""
    return (-round(r.score, 12), -_micros(r.created_at), str(r.id))


def _claims_ranked(
    *,
    caller: Caller,
    query: str,
    query_field: str,
    scopes: Sequence[str] | None,
    use_tags: Sequence[str] | None,
    now: datetime | None = None,
    scale: tuple[float, float] | None = None,
) -> _Ranking:
    """``claims_rank`` on the ranking columns alone, and the read's boundary
    decision; ``query_field`` is what the caller calls the query, for its errors.
    ``now`` and ``scale``: the instant and channel scale of an earlier page's
    ranking (``_Ranking``), by default this read's."""
    require_read(caller)
    query = validation.query(query, field=query_field)
    read_at = timezone.now()
    now = now or read_at
    chosen = claim_scopes(scopes)
    decision = read_boundary(caller, use_tags)
    params = retrieval_params(caller)
    flt = RetrievalFilter(
        kinds=[Kind.FACT, Kind.RULE],
        # What is retrievable is decided at the read, whatever instant the scores are taken at.
        now=read_at,
        scopes=chosen.include,
        scopes_excluded=chosen.exclude,
        use_tags=decision.use_tags,
    )
    # The hits come with their ranking columns, from rows the channel statements
    # filtered by tenant and by this read's boundary; the boundary is checked
    # again here, so that no hit from any other source can leak or set the scale.
    hits, columns = channel_search(
        caller=caller,
        flt=flt,
        query_text=query,
        query_vector=query_vector_later(caller, query, "hybrid", params),
        params=params,
        columns=ClaimRow._fields[1:],
    )
    threshold = caller.policy.retrieval.threshold
    candidates = ((_claim_row((pk, *columns[pk])), hit) for pk, hit in hits.items())
    visible = [(row, hit) for row, hit in candidates if row.boundary_class in decision.visible]
    # Normalised over what this read may see, so no hidden memory sets the scale.
    visible_hits = {row.id: hit for row, hit in visible}
    # An earlier page's scale, raised by a better hit stored since.
    scale = scoring.channel_bests(visible_hits, at_least=scale)
    channels = scoring.normalised_channels(visible_hits, scale)
    ranked = [
        r
        for r in (_rank(caller, row, channels[row.id], "hybrid match", now) for row, _ in visible)
        if r.breakdown.combined >= threshold
    ]
    hops = settings.MEMPROJ.get("PCE_GRAPH_HOPS", 0)
    if hops and ranked:
        found = {r.id for r in ranked}
        near = [pk for pk in claims_near(caller=caller, claim_ids=list(found), hops=hops) if pk not in found]
        neighbours = _claim_rows(caller, decision, near)
        ranked += [
            _rank(caller, row, (0.0, 0.0), f"graph neighbour within {hops} hop(s)", now)
            for pk in near
            if (row := neighbours.get(pk)) is not None
            and row.kind in (Kind.FACT, Kind.RULE)
            and chosen.matches(row.scope)
        ]
    ranked.sort(key=_order)
    return _Ranking(ranked[:MAX_RANKED], decision, now, scale)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(when: datetime) -> int:
    return (when - _EPOCH) // timedelta(microseconds=1)


def _search_cursor(ranking: _Ranking, last: _Ranked) -> str:
    """A search cursor: the ranking's instant and scale, and the last claim shown
    (score, created_at, id), as text that float() and int() read back exactly."""
    fields = [_micros(ranking.now), repr(ranking.scale[0]), repr(ranking.scale[1])]
    fields += [repr(last.score), _micros(last.created_at), last.id.hex]
    return _cursor("s", "k", ",".join(map(str, fields)))


class _Keyset(NamedTuple):
    now: datetime
    scale: tuple[float, float]
    after: tuple[float, int, str]  # the last claim shown, as _order keys it


_ID_HEX = re.compile(r"[0-9a-f]{32}")


def _parse_search_cursor(cursor: str) -> _Keyset:
    """A search cursor exactly as _search_cursor writes it: each number must read
    back to the text it was written as (so no sign, space, underscore or
    non-ASCII digit int() or float() would also take), finite and in range."""
    garbage = InvalidArgument("cursor is not one this tool returned; start again without a cursor.")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, handle, position = raw.split(":", 2)
        now_us, vec, txt, score, created_us, id_hex = position.split(",", 5)
    except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise garbage from exc
    if (kind, handle) != ("s", "k") or not position.isascii() or _ID_HEX.fullmatch(id_hex) is None:
        raise garbage
    try:
        micros = [int(now_us), int(created_us)]
        floats = [float(vec), float(txt), float(score)]
        written = [*map(str, micros), *map(repr, floats)]
        if written != [now_us, created_us, vec, txt, score] or not all(math.isfinite(f) and f >= 0 for f in floats):
            raise ValueError(position)
        now, created_at = (_EPOCH + timedelta(microseconds=m) for m in micros)
    except (ValueError, OverflowError) as exc:
        raise garbage from exc
    # Sorted as _order sorts a claim of that score, created_at and id.
    after = (-round(floats[2], 12), -micros[1], str(uuid.UUID(hex=id_hex)))
    return _Keyset(now=now, scale=(floats[0], floats[1]), after=after)


def _cursor(kind: str, handle: str, position: int | str) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{handle}:{position}".encode()).decode().rstrip("=")


def _parse_cursor(cursor: str, kind: str) -> tuple[str, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        found_kind, handle, offset = raw.split(":", 2)
        # Only an offset as _cursor writes it: int() would also take "-4"
        # (a slice from the tail), " 1" or "1_0".
        if found_kind != kind or not (offset.isascii() and offset.isdigit()) or int(offset) > MAX_RANKED:
            raise ValueError(kind)
        return handle, int(offset)
    except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise InvalidArgument("cursor is not one this tool returned; start again without a cursor.") from exc


def _context_handle(context: ActiveContext) -> str:
    """A context cursor's handle: its id and when it expires, so a cursor of a
    context the sweep has deleted still answers Gone rather than unknown."""
    return f"{context.id.hex}.{int(context.expires_at.timestamp())}"


# A handle exactly as _context_handle writes it (the expiry optional: cursors
# issued before it was part of the handle carry none). uuid.UUID() and int()
# alone would also read an upper-case, hyphenated or braced id and an expiry
# with a sign, spaces, underscores or non-ASCII digits; [0-9] is ASCII only,
# and twelve digits reach the year 9999.
_CONTEXT_HANDLE = re.compile(r"([0-9a-f]{32})(?:\.(0|[1-9][0-9]{0,11}))?")


def _parse_context_handle(handle: str) -> tuple[uuid.UUID, datetime | None]:
    """(context id, expiry the cursor carries, if it carries one)."""
    try:
        match = _CONTEXT_HANDLE.fullmatch(handle)
        if match is None:
            raise ValueError(handle)
        context_id, expiry = match.groups()
        expires_at = datetime.fromtimestamp(int(expiry), tz=UTC) if expiry is not None else None
        return uuid.UUID(hex=context_id), expires_at
    except (ValueError, OverflowError, OSError) as exc:
        raise InvalidArgument("cursor is not one this tool returned; start again without a cursor.") from exc


def _live_context(caller: Caller, handle: str) -> ActiveContext:
    """The context a cursor names, if it has not expired: an expired one's
    claims are never served, whether or not the sweep has deleted it yet. An
    active context is the prompt context of the principal that activated it:
    another principal's, even of the same tenant, answers as an unknown one."""
    context_id, cursor_expiry = _parse_context_handle(handle)
    now = timezone.now()
    owned = ActiveContext.objects.filter(pk=context_id, tenant_id=caller.tenant_id, principal_id=caller.principal_id)
    context = owned.filter(expires_at__gt=now).first()
    if context is not None:
        return context
    expired = owned.values_list("expires_at", flat=True).first() or cursor_expiry
    if expired is not None and expired <= now:
        raise Gone(f"active context ac_{context_id.hex} expired at {expired.isoformat()}; activate again.")
    raise InvalidArgument("cursor is not one this tool returned; start again without a cursor.")


def _page(items: Sequence[Any], offset: int, top_k: int, kind: str, handle: str) -> tuple[list, str | None, bool]:
    page = list(items[offset : offset + top_k])
    more = offset + top_k < len(items)
    return page, (_cursor(kind, handle, offset + top_k) if more else None), more


def claims_search(
    *,
    caller: Caller,
    query: str,
    top_k: int | None = None,
    scopes: Sequence[str] | None = None,
    use_tags: Sequence[str] | None = None,
    cursor: str | None = None,
    query_field: str = "query",
) -> ActivationPage:
    """Ranked claims without an active context (pce's search stores nothing).
    The cursor is stateless: a keyset, the last claim shown, into the ranking
    computed again at the first page's instant and channel scale, so the claims
    still there score as they did. A page starts after that claim's place
    (score, created_at, id), whether or not it is still there: a claim shown
    and since forgotten moves no other claim to another page (an offset into
    the new ranking skipped one). A claim stored since that matches better than
    every claim of the first page sets a new scale, and the scores move.
    ``query_field``: the name the caller gave the query (pce's search: query,
    activate: q)."""
    top_k = validation.limit(top_k or caller.policy.retrieval.k_final, field="top_k", maximum=MAX_TOP_K)
    keyset = _parse_search_cursor(cursor) if cursor else None
    ranking = _claims_ranked(
        caller=caller,
        query=query,
        query_field=query_field,
        scopes=scopes,
        use_tags=use_tags,
        now=keyset.now if keyset else None,
        scale=keyset.scale if keyset else None,
    )
    rest = [r for r in ranking.ranked if keyset is None or _order(r) > keyset.after]
    page, more = rest[:top_k], len(rest) > top_k
    next_cursor = _search_cursor(ranking, page[-1]) if more else None
    return ActivationPage(items=_with_rows(caller, ranking.decision, page), next_cursor=next_cursor, has_more=more)


def claims_activate(
    *,
    caller: Caller,
    query: str,
    top_k: int | None = None,
    scopes: Sequence[str] | None = None,
    use_tags: Sequence[str] | None = None,
    cursor: str | None = None,
    query_field: str = "query",
) -> ActivationPage:
    """Build an active context (or page through one by cursor). A cursor of an
    expired context is Gone (HTTP 410), whether or not the sweep deleted it."""
    require_read(caller)
    top_k = validation.limit(top_k or caller.policy.retrieval.k_final, field="top_k", maximum=MAX_TOP_K)
    if cursor:
        handle, offset = _parse_cursor(cursor, "a")
        context = _live_context(caller, handle)
        # The snapshot keeps its order, but what a claim may show is decided now:
        # still retrievable, and visible to the read's use tags.
        decision = read_boundary(caller, context.params.get("use_tags"))
        rows = (
            Memory.objects.for_caller(caller)
            .retrievable(timezone.now())
            .visible_in(decision.visible)
            .without_vectors()
            .in_bulk([uuid.UUID(i[0]) for i in context.items])
        )
        visible = [(rows[uuid.UUID(i[0])], i) for i in context.items if uuid.UUID(i[0]) in rows]
        boundary_apply(decision, [m for m, _ in visible])
        items = [RankedClaim(memory=m, breakdown=ActivationScore(**i[1]), reason=i[2]) for m, i in visible]
        page, next_cursor, more = _page(items, offset, top_k, "a", _context_handle(context))
        return ActivationPage(items=page, next_cursor=next_cursor, has_more=more, context=context)
    # Checked before anything is ranked: a read-only token stores nothing, and
    # an active context is stored state.
    if not caller.has_scope("write"):
        raise PermissionDenied(
            "this token is read-only and an active context is stored state: search claims for the same ranking "
            "without one (pce.memory.search), or ask an admin for a token with the 'write' scope."
        )
    ranking = _claims_ranked(caller=caller, query=query, query_field=query_field, scopes=scopes, use_tags=use_tags)
    ranked, decision = ranking.ranked, ranking.decision
    ttl = timedelta(seconds=settings.MEMPROJ["ACTIVE_CONTEXT_TTL_SECONDS"])
    context = ActiveContext.objects.create(
        tenant_id=caller.tenant_id,
        principal_id=caller.principal_id,
        query=query,
        items=[[str(r.id), r.breakdown.__dict__, r.reason] for r in ranked],
        params={"use_tags": list(decision.use_tags), "scopes": list(scopes or [])},
        policy_version=caller.policy.version,
        expires_at=timezone.now() + ttl,
    )
    page, next_cursor, more = _page(ranked, 0, top_k, "a", _context_handle(context))
    return ActivationPage(
        items=_with_rows(caller, decision, page), next_cursor=next_cursor, has_more=more, context=context
    )
