"""What is embedded for a memory: the one place that decides it.

A conversation turn alone ("Yeah, it was amazing!") says little; published
conversational retrievers embed it together with its neighbours. With the
``EMBED_TEXT`` setting at ``ctx1short`` (the default) an episode that belongs
to a session is embedded with the previous episode of the same session
appended when that turn is short enough to go in whole (``PREVIOUS_CHARS``):
an exchange of short turns. After a long answer (a short user question
following an assistant's page, as in LongMemEval) the turn is embedded alone:
``ctx1`` appends the answer's first characters too, and ranked worse there
(bench/quality.py --embed-text ctx1). The previous turn goes in only while it
is retrievable (within its TTL) and of the turn's own boundary class
(``_SHAREABLE``: a reader who may see the turn but not the previous one must
not find the turn by the previous one's words). A turn long enough to fill the
model's window itself is embedded alone; facts, rules and episodes without a session
are embedded as stored. The stored content never changes: only the text given
to the embedder does. The turn comes first because the model truncates at 256
tokens.

Every path that embeds a memory goes through :func:`texts_for_new_episodes`
(the sync and bulk stores, before the rows exist: the previous turn is the one
before it in the batch or the session's latest stored one),
:func:`texts_for_embedding` (the worker's embed / embed-batch tasks, the retry
and re-embed sweeps, from the stored rows) or :func:`embedding_text` (the
quality benchmark's bulk loader), and records :func:`embedding_identity` as
the memory's ``embedding_model``: the model name, plus ``+<version>`` for an
episode of a session whose vector was made under a contextual version. The
re-embed sweep compares against it (:func:`stale_vectors`), so switching the
setting re-embeds the episodes made the other way, and the two kinds of
vectors are never confused.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q

from policy.document import DEFAULT_BOUNDARY_CLASS

# ctx1short: ctx1 only when the previous turn is short enough to go in whole
# (at most PREVIOUS_CHARS): an exchange of short turns, not a short question
# after a long answer, whose words would outweigh the question's own.
TEXT_VERSIONS = ("plain", "ctx1", "ctx1short")
# How much of the previous turn goes into the text (characters): enough to name
# the topic; more would outweigh a short turn's own words in the mean pooling.
PREVIOUS_CHARS = 300
# A turn this long fills most of the model's 256-token window by itself: it
# names its own topic, and appended context would be cut off anyway.
CONTEXT_MAX_CHARS = 800


def text_version() -> str:
    version = str(settings.MEMPROJ.get("EMBED_TEXT", "plain"))
    if version not in TEXT_VERSIONS:
        raise ValueError(f"MEMPROJ_EMBED_TEXT must be one of {', '.join(TEXT_VERSIONS)} (got {version!r})")
    return version


def in_session(kind: str, session_id: str) -> bool:
    """Whether a memory's text depends on the text version: only an episode of
    a session can have a previous turn; the rest is embedded as stored."""
    return kind == "episode" and bool(session_id)


def embedding_identity(model_name: str, *, in_session: bool, version: str | None = None) -> str:
    """What a memory's ``embedding_model`` records: the model, and for an
    episode of a session (``in_session``) the text version unless plain. The
    rest is embedded as stored under every version, so switching it re-embeds
    only the episodes of sessions."""
    version = text_version() if version is None else version
    return f"{model_name}+{version}" if in_session and version != "plain" else model_name


def stale_vectors(model_name: str) -> Q:
    """The memories whose vector was made by another model or from another
    text than the current settings make: what the re-embed sweep redoes."""
    contextual = Q(kind="episode") & ~Q(session_id="")
    return (contextual & ~Q(embedding_model=embedding_identity(model_name, in_session=True))) | (
        ~contextual & ~Q(embedding_model=model_name)
    )


def embedding_text(content: str, *, kind: str, previous: str | None = None, version: str | None = None) -> str:
    """The text to embed for one memory. ``previous``: the content of the
    session's previous episode (None when there is none)."""
    version = text_version() if version is None else version
    if version == "plain" or kind != "episode" or not previous or len(content) > CONTEXT_MAX_CHARS:
        return content
    if version == "ctx1short" and len(previous) > PREVIOUS_CHARS:
        return content
    return f"{content}\n(previous turn: {previous[:PREVIOUS_CHARS]})"


# An episode's previous turn is the latest active episode of its session before
# it, by (created_at, id); its text goes in only while that turn is within its
# TTL (a turn past it has left retrieval: what left must not be found through
# the turn after it) and only when it is of the turn's own boundary class
# (``_SHAREABLE``). The turn after an episode is the inverse: the first active
# episode of its session after it (``following_turns``). One index probe each
# (memory_session_turn_idx, migration 0031, holds exactly the active episodes
# of sessions).
_LIVE = "({alias}.expires_at IS NULL OR {alias}.expires_at > {now})"
# The clock of these conditions: the statement's start, not ``now()``, which is
# the start of its transaction. A vector write waits for the turn's row lock
# inside its transaction; a TTL passing during that wait must count.
_NOW = "statement_timestamp()"

# A turn's vector is found by every reader who may see the turn, so a previous
# turn's text goes into it only when every such reader may see that turn too,
# with the same redaction: otherwise a reader who may not see a secret turn
# finds the reply after it by the secret's words. Which reader sees which class
# is the tenant policy's (policy/boundary.py), and a policy may open any class
# to any use tag, redact any class, deny any class (``public`` too), and change
# at any time without the vectors being made again. The one rule that holds
# for every policy, now and after any change, is the same class: two memories
# of one class are seen by exactly the same reads, redacted alike. (A "least
# restricted" class would depend on the policy of the moment.) The turns of an
# ordinary session share their class, so their texts are as without the rule.
_SHAREABLE = "{previous}.boundary_class = {turn_class}"

# The same conditions on a previous turn ``p`` of a row ``m`` of an UPDATE, for
# a vector whose text holds ``p``: written only if ``p`` may still go in.
PREVIOUS_SHAREABLE_SQL = (
    f"{_LIVE.format(alias='p', now=_NOW)} AND {_SHAREABLE.format(previous='p', turn_class='m.boundary_class')}"
)


# The turn before a row ``m``: the latest active episode of its session before
# it, by (created_at, id), with the columns the conditions above read.
_TURN_BEFORE_SQL = """
        SELECT p.id, p.content, p.expires_at, p.boundary_class FROM memory_memory p
        WHERE m.kind = 'episode' AND m.session_id <> ''
          AND p.tenant_id = m.tenant_id AND p.kind = 'episode' AND p.session_id = m.session_id
          AND p.session_id <> '' AND p.validity = 'active'
          AND (p.created_at, p.id) < (m.created_at, m.id)
        ORDER BY p.created_at DESC, p.id DESC
        LIMIT 1"""

_PREVIOUS_SQL = f"""
    SELECT m.id, prev.id,
        CASE WHEN {_LIVE.format(alias="prev", now=_NOW)}
            AND {_SHAREABLE.format(previous="prev", turn_class="m.boundary_class")} THEN prev.content END
    FROM memory_memory m
    LEFT JOIN LATERAL ({_TURN_BEFORE_SQL}
    ) prev ON true
    WHERE m.id = ANY(%s)
"""  # noqa: S608 - only constants are spliced in

# The same probe for one row ``m`` of an UPDATE: the id of its previous turn
# now (NULL: none). A vector made from a previous turn is written only while
# that turn is still the previous one (memory/services/vectors.py).
PREVIOUS_ID_SQL = f"(SELECT turn.id FROM ({_TURN_BEFORE_SQL}) turn)"  # noqa: S608 - a constant


def previous_turns(memory_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, tuple[uuid.UUID | None, str | None]]:
    """Each memory's previous episode in its session: (its id, its content
    when it may go into the text), (None, None) when there is none."""
    if not memory_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_PREVIOUS_SQL, [list(memory_ids)])
        return {pk: (previous, content) for pk, previous, content in cursor.fetchall()}


# The latest episode of each of a tenant's sessions, by (created_at, id): one
# index probe each (memory_session_turn_idx, whose predicate the planner
# proves only from the spelled-out session_id <> '').
_LATEST_SQL = f"""
    SELECT s.session_id, latest.content, latest.boundary_class
    FROM unnest(%s::text[]) AS s(session_id)
    JOIN LATERAL (
        SELECT content, expires_at, boundary_class FROM memory_memory
        WHERE tenant_id = %s AND kind = 'episode' AND session_id = s.session_id AND session_id <> ''
          AND validity = 'active'
        ORDER BY created_at DESC, id DESC
        LIMIT 1
    ) latest ON {_LIVE.format(alias="latest", now=_NOW)}
"""  # noqa: S608 - only constants are spliced in


def latest_turns(
    *, tenant_id: uuid.UUID, session_ids: Collection[str], boundary_class: str = DEFAULT_BOUNDARY_CLASS
) -> dict[str, str]:
    """Content of each session's latest stored episode, for episodes of
    ``boundary_class`` about to be stored into them. A session is left out
    when it has none, when its latest is past its TTL, or when its latest may
    not go into the text of a turn of that class (``_SHAREABLE``)."""
    wanted = sorted(sid for sid in session_ids if sid)
    if not wanted or text_version() == "plain":
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_LATEST_SQL, [wanted, tenant_id])
        # ``_SHAREABLE`` on a turn not stored yet.
        return {session: content for session, content, its_class in cursor.fetchall() if its_class == boundary_class}


def texts_for_new_episodes(
    *,
    tenant_id: uuid.UUID,
    episodes: Sequence[tuple[str, str]],
    latest: dict[str, str] | None = None,
    boundary_class: str = DEFAULT_BOUNDARY_CLASS,
) -> list[str]:
    """The texts to embed for episodes of ``boundary_class`` about to be
    stored in this order, given as (content, session_id): an episode's
    previous turn is the one before it in the list (of the same class), or for
    the first of its session the session's latest stored episode when it may
    go in (``latest_turns``). ``latest`` carries each session's last turn from
    one batch of a stream to the next (the batch before may not be committed
    yet), and is updated with this batch's.

    Made before the write's transaction: the write checks under its lock that
    they are still the texts it would make (``texts_still_current``)."""
    version = text_version()
    if version == "plain":
        return [content for content, _ in episodes]
    latest = {} if latest is None else latest
    latest.update(
        latest_turns(
            tenant_id=tenant_id,
            session_ids={sid for _, sid in episodes} - latest.keys(),
            boundary_class=boundary_class,
        )
    )
    texts = []
    for content, session_id in episodes:
        previous = latest.get(session_id) if session_id else None
        texts.append(embedding_text(content, kind="episode", previous=previous, version=version))
        if session_id:
            latest[session_id] = content
    return texts


def texts_still_current(
    *,
    tenant_id: uuid.UUID,
    episodes: Sequence[tuple[str, str]],
    texts: Sequence[str],
    boundary_class: str = DEFAULT_BOUNDARY_CLASS,
) -> list[bool]:
    """For texts ``texts_for_new_episodes`` made before the write's
    transaction: whether each is still the text it makes now. Called under the
    tenant's write lock, which every forget, supersession and store takes: a
    previous turn forgotten, replaced or past its TTL since then must not be
    written into the new turn's vector (the turn is stored pending instead,
    and the worker embeds it from what is visible). One index probe per
    session; nothing for the plain version."""
    if text_version() == "plain":
        return [True] * len(texts)
    now = texts_for_new_episodes(tenant_id=tenant_id, episodes=episodes, boundary_class=boundary_class)
    return [then == current for then, current in zip(texts, now, strict=True)]


def texts_for_embedding(rows: Sequence[tuple[uuid.UUID, str, str]]) -> list[str]:
    """The texts to embed for stored memories given as (id, kind, content), in order."""
    return [text for text, _, _ in texts_with_previous(rows)]


def texts_with_previous(rows: Sequence[tuple[uuid.UUID, str, str]]) -> list[tuple[str, uuid.UUID | None, bool]]:
    """Each text to embed, with the id of the memory's previous turn (None:
    none, or the plain version) and whether the text holds it."""
    version = text_version()
    previous = previous_turns([pk for pk, kind, _ in rows if kind == "episode"]) if version != "plain" else {}
    out: list[tuple[str, uuid.UUID | None, bool]] = []
    for pk, kind, content in rows:
        previous_id, previous_text = previous.get(pk, (None, None))
        text = embedding_text(content, kind=kind, previous=previous_text, version=version)
        out.append((text, previous_id, text != content))
    return out


# --- The turns after turns that leave retrieval --------------------------------------------

# For each turn that leaves (``{leaving}``: a statement of their ids), the turn
# after it (the first active episode of its session after it), when that one is
# retrievable, not itself among the turns that leave, and its text may hold the
# turn before it: it is short enough to take context (CONTEXT_MAX_CHARS), and
# either it waits for a vector (one being made now may read the turn before it)
# or its vector was made under a contextual version that takes a turn of this
# length. ``{condition}`` narrows which pairs count.
_FOLLOWING_SQL = """
    WITH leaving AS ({leaving})
    SELECT DISTINCT nxt.id, nxt.tenant_id
    FROM memory_memory t
    JOIN LATERAL (
        SELECT n.id, n.tenant_id, n.content, n.expires_at, n.embedding_status, n.embedding_model, n.updated_at
        FROM memory_memory n
        WHERE n.tenant_id = t.tenant_id AND n.kind = 'episode' AND n.session_id = t.session_id
          AND n.session_id <> '' AND n.validity = 'active'
          AND (n.created_at, n.id) > (t.created_at, t.id)
        ORDER BY n.created_at, n.id
        LIMIT 1
    ) nxt ON true
    WHERE t.id IN (SELECT id FROM leaving) AND t.kind = 'episode' AND t.session_id <> '' AND t.validity = 'active'
      AND nxt.id NOT IN (SELECT id FROM leaving)
      AND (nxt.expires_at IS NULL OR nxt.expires_at > %(now)s)
      AND char_length(nxt.content) <= %(context_max)s
      AND (
        nxt.embedding_status <> 'ready'
        OR nxt.embedding_model LIKE '%%+ctx1'
        OR (nxt.embedding_model LIKE '%%+ctx1short' AND char_length(t.content) <= %(previous_chars)s)
      )
      {condition}
"""

_GIVEN_TURNS_SQL = "SELECT unnest(%(turns)s::uuid[]) AS id"

# The active turns of sessions whose TTL passed after ``since`` (memory_expires_at_idx).
_EXPIRED_SQL = """
    SELECT id FROM memory_memory
    WHERE expires_at > %(since)s AND expires_at <= %(now)s
      AND kind = 'episode' AND session_id <> '' AND validity = 'active'
"""

# An expired turn whose text may still be in the next turn's vector: that vector
# was made before the turn's TTL passed (its ``updated_at``).
_MADE_BEFORE_EXPIRY = "AND t.expires_at <= %(now)s AND nxt.updated_at <= t.expires_at"


def following_turns(
    *, memory_ids: Sequence[uuid.UUID], now: datetime, tenant_id: uuid.UUID | None = None
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """The (id, tenant id) of the turns whose vector may hold one of these
    memories as its previous turn, for memories about to leave retrieval (a
    forget, a supersession, a roampal deletion, a purge): the active episodes
    of sessions among them (of ``tenant_id`` when given), each followed by a
    retrievable turn that stays. One statement.

    The turn after is found whatever the two turns' boundary classes: a vector
    made before ``_SHAREABLE`` held a previous turn of any class. A write that
    changes a turn's class must re-embed the turn after it (found here) and the
    turn itself (whose previous turn may go in or out)."""
    if tenant_id is None:
        return _following(memory_ids, now, condition="")
    return _following(memory_ids, now, condition="AND t.tenant_id = %(tenant)s", tenant=tenant_id)


def turns_after_expired(*, since: datetime, now: datetime, limit: int) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """The (id, tenant id) of up to ``limit`` retrievable turns whose previous
    turn's TTL passed (after ``since``) and whose vector was made before it did
    (its ``updated_at``: a vector made after leaves the expired turn out). Once
    embedded again a turn is not found here again."""
    statement = _FOLLOWING_SQL.format(leaving=_EXPIRED_SQL, condition=_MADE_BEFORE_EXPIRY) + " LIMIT %(limit)s"
    return _following_rows(statement, {**_following_params(now), "since": since, "limit": limit})


def expired_turns_following(*, memory_ids: Sequence[uuid.UUID], now: datetime) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """``turns_after_expired`` for the given expired turns (the expiry sweep's
    deletions): what an earlier run did not get to."""
    return _following(memory_ids, now, condition=_MADE_BEFORE_EXPIRY)


def _following_params(now: datetime) -> dict[str, Any]:
    return {"now": now, "context_max": CONTEXT_MAX_CHARS, "previous_chars": PREVIOUS_CHARS}


def _following(
    memory_ids: Sequence[uuid.UUID], now: datetime, *, condition: str, **params: Any
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    if not memory_ids:
        return []
    statement = _FOLLOWING_SQL.format(leaving=_GIVEN_TURNS_SQL, condition=condition)
    return _following_rows(statement, {**_following_params(now), **params, "turns": [str(pk) for pk in memory_ids]})


def _following_rows(statement: str, params: dict[str, Any]) -> list[tuple[uuid.UUID, uuid.UUID]]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return [(pk, tenant_id) for pk, tenant_id in cursor.fetchall()]
