"""Retrieval levers measured offline on the candidates of bench/fusion_fit.py
(``fusion_fit.py --levers``): each variant re-ranks the same channel hits of
every development set as ``memory_search`` orders them (score, then
created_at DESC, id), so a difference is the lever's doing alone.

Levers: the ``conf`` fusion's gain (how far a keyword hit that covers the
query's rare words leads), neighbouring turns of the same session as a second
pass (a top hit's previous and next turn get ``decay`` x its score when that is
more than their own), and what the vector channel embeds for a question
(``without_common_words``; candidates read with ``fusion_fit.py --vector-query``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

# One variant: (hits of one query, the query, created_at per memory) -> score per memory.
Variant = Callable[[Mapping[Any, Any], Any, Mapping[Any, datetime]], dict[Any, float]]


def with_neighbours(
    scores: Mapping[Any, float],
    q: Any,
    id_of: Mapping[Any, Any],
    top: int,
    decay: float,
    max_chars: int = 0,
    lengths: Mapping[Any, int] | None = None,
) -> dict[Any, float]:
    """Item scores (item ids) with the previous and next turn of the top
    ``top`` items' sessions raised to ``decay`` x that item's score; with
    ``max_chars``, only between turns of at most that many characters; -1:
    only turns that are hits of their own are raised."""
    out = {id_of[pk]: s for pk, s in scores.items()}
    if not q.session_of or decay <= 0:
        return out
    best = sorted(out.items(), key=lambda kv: -kv[1])[:top]
    short = (lambda i: (lengths or {}).get(i, 0) <= max_chars) if max_chars > 0 else (lambda i: True)
    for item, score in best:
        if not short(item):
            continue
        for other in (item - 1, item + 1):
            if max_chars < 0 and other not in out:
                continue  # max_chars -1: only raise turns that are hits themselves
            if other in q.session_of and q.session_of[other] == q.session_of.get(item) and short(other):
                out[other] = max(out.get(other, 0.0), decay * score)
    return out


# The time-aware ranking's bound between a question and a context (memory/temporal.py).
MAX_QUESTION_CHARS = 400
_WORD = re.compile(r"[\w']+")


def without_common_words(caller: Any, text: str, share: float, names_only: bool = False) -> str:
    """The text without the words whose term is in more than ``share`` of the
    tenant's memories (a speaker's name in a log of "<name> said, ..." turns is
    in half of them): what the vector channel would embed instead. With
    ``names_only``, only capitalised words count. A text longer than
    ``MAX_QUESTION_CHARS`` is left as it is."""
    from django.db import connection

    if len(text) > MAX_QUESTION_CHARS:
        return text  # a context (a dialogue), not a question: as it is
    words = sorted({w.lower() for w in _WORD.findall(text) if not names_only or w[:1].isupper()})
    if not words:
        return text
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT DISTINCT w.word
            FROM unnest(%s::text[]) AS w(word)
            CROSS JOIN LATERAL unnest(memproj_query_terms(w.word)) AS t(term)
            JOIN memory_termstat s ON s.tenant_id = %s AND s.term = t.term
            JOIN memory_tenantstat ts ON ts.tenant_id = s.tenant_id
            WHERE s.df > %s * ts.docs
            """,
            [words, caller.tenant_id, share],
        )
        common = {row[0] for row in cursor.fetchall()}
    if not common:
        return text
    kept = _WORD.sub(lambda m: "" if m.group(0).lower() in common else m.group(0), text)
    return re.sub(r"\s+", " ", kept).strip() or text


def ranked(
    wide: Sequence[tuple[list, Any]],
    fuse: Variant,
    *,
    depth: int,
    neighbours: tuple[int, float, int] | None = None,
    lengths: Sequence[Mapping[Any, int]] | None = None,
) -> list[list[Any]]:
    """Item ids per query, best first, as memory_search orders them."""
    runs = []
    for n, (cands, q) in enumerate(wide):
        hits = {pk: h for pk, h, _ in cands}
        created = {pk: c for pk, _, c in cands}
        scores = fuse(hits, q, created)
        by_item = {q.id_map[pk]: pk for pk in hits}
        when = {q.id_map[pk]: created[pk] for pk in hits}
        if neighbours is not None:
            item_scores = with_neighbours(scores, q, q.id_map, *neighbours, lengths=lengths[n] if lengths else None)
        else:
            item_scores = {q.id_map[pk]: s for pk, s in scores.items()}
        order = sorted(
            item_scores,
            key=lambda i: (
                -round(item_scores[i], 12),
                -(when[i].timestamp() if i in when else 0.0),
                str(by_item.get(i, i)),
            ),
        )
        runs.append(order[:depth])
    return runs


def service_fusion(params: Any) -> Variant:
    from memory import scoring

    return lambda hits, q, created: scoring.fuse_all(hits, params)
