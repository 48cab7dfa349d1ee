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


def without_common_words(caller: Any, text: str, share: float, names_only: bool = False) -> str:
    """What the vector channel would embed with ``vector_query_common_share``
    at ``share`` (0: the question as asked), through the service's own
    ``retrieval.common_words``; with ``names_only``, only capitalised words may
    be left out (an experiment the service does not offer)."""
    from memory import retrieval, temporal

    if share <= 0 or len(text) > temporal.MAX_QUERY_CHARS:
        return text
    words = {w.lower() for w in retrieval.QUERY_WORD.findall(text) if not names_only or w[:1].isupper()}
    return retrieval.without_words(text, retrieval.common_words(caller, words, share))


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
