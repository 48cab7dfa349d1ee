"""What is embedded for a memory: the one place that decides it (issue 14,
"context in the embedding").

A conversation turn alone ("Yeah, it was amazing!") says little; published
conversational retrievers embed it together with its neighbours. On
LongMemEval-S it ranks worse (bench/quality.py --embed-text ctx1; there a short
user turn's previous turn is a long assistant answer), so the default stays ``plain``; ``ctx1`` is there for
conversations of short turns between people, where the lead came from. With the
``EMBED_TEXT`` setting at ``ctx1`` an episode that belongs to a session is
embedded with the previous episode of the same session appended (cut to
``PREVIOUS_CHARS``) unless it is long enough to fill the model's window itself;
facts, rules and episodes without a session are embedded as stored. The
stored content never changes: only the text given to the embedder does. The
turn comes first because the model truncates at 256 tokens.

Every path that embeds a memory goes through :func:`texts_for_embedding` (the
sync store, the worker's embed / embed-batch tasks, the retry and re-embed
sweeps) or :func:`embedding_text` (the quality benchmark's bulk loader), and
records :func:`embedding_identity` as the memory's ``embedding_model``: the
model name, plus ``+ctx1`` when vectors were made from contextual text. The
re-embed sweep compares against it, so switching the setting re-embeds what
was made the other way, and the two kinds of vectors are never confused.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.conf import settings
from django.db import connection

TEXT_VERSIONS = ("plain", "ctx1")
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


def embedding_identity(model_name: str, version: str | None = None) -> str:
    """What a memory's ``embedding_model`` records: the model, and the text version unless plain."""
    version = text_version() if version is None else version
    return model_name if version == "plain" else f"{model_name}+{version}"


def embedding_text(content: str, *, kind: str, previous: str | None = None, version: str | None = None) -> str:
    """The text to embed for one memory. ``previous``: the content of the
    session's previous episode (None when there is none)."""
    version = text_version() if version is None else version
    if version == "plain" or kind != "episode" or not previous or len(content) > CONTEXT_MAX_CHARS:
        return content
    return f"{content}\n(previous turn: {previous[:PREVIOUS_CHARS]})"


# The previous episode of the same session, by (created_at, id), for a set of
# memories: one index probe each (memory_session_turn_idx, migration 0031).
_PREVIOUS_SQL = """
    SELECT m.id, prev.content
    FROM memory_memory m
    LEFT JOIN LATERAL (
        SELECT p.content FROM memory_memory p
        WHERE p.tenant_id = m.tenant_id AND p.kind = 'episode' AND p.session_id = m.session_id
          AND p.session_id <> '' AND p.validity = 'active'
          AND (p.created_at, p.id) < (m.created_at, m.id)
        ORDER BY p.created_at DESC, p.id DESC
        LIMIT 1
    ) prev ON m.kind = 'episode' AND m.session_id <> ''
    WHERE m.id = ANY(%s)
"""


def previous_turns(memory_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str | None]:
    """Content of each memory's previous episode in its session (None: none)."""
    if not memory_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_PREVIOUS_SQL, [list(memory_ids)])
        return {pk: content for pk, content in cursor.fetchall()}


def previous_turn_for_new(*, tenant_id: uuid.UUID, session_id: str) -> str | None:
    """Content of the latest episode of a session, for an episode about to be
    stored into it (the sync store path, before its row exists)."""
    if not session_id or text_version() == "plain":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT content FROM memory_memory
            WHERE tenant_id = %s AND kind = 'episode' AND session_id = %s AND validity = 'active'
            ORDER BY created_at DESC, id DESC LIMIT 1
            """,
            [tenant_id, session_id],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def texts_for_embedding(rows: Sequence[tuple[uuid.UUID, str, str]]) -> list[str]:
    """The texts to embed for stored memories given as (id, kind, content), in order."""
    version = text_version()
    previous = previous_turns([pk for pk, kind, _ in rows if kind == "episode"]) if version != "plain" else {}
    return [
        embedding_text(content, kind=kind, previous=previous.get(pk), version=version) for pk, kind, content in rows
    ]
