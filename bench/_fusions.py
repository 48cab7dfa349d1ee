"""Fusions kept for experiments only (the service offers ``adaptive``, ``conf``
and ``rrf``, memory/scoring.py): the raw alpha blend, the blend over channels
divided by their best (``norm``), over min-max spread channels with a fixed
alpha (``minmax``) and over distribution-spread channels (``dbsf``). The
quality benchmark's sweeps compare them with the service's on the same
candidates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EXPERIMENT_FUSIONS = ("alpha", "norm", "minmax", "dbsf")


def fuse(hits: Mapping[Any, Any], params: Any, fusion: str | None = None) -> dict[Any, float]:
    """Hybrid relevance of every candidate with ``fusion`` (default: the
    params' own), then the time preference as the service applies it."""
    from memory import scoring

    fusion = fusion or params.fusion
    if fusion not in EXPERIMENT_FUSIONS:
        return scoring.fuse_all(hits, params.with_(fusion=fusion))
    a = params.alpha
    if fusion == "alpha":
        fused = {
            key: a * max(0.0, hit.vector_similarity or 0.0) + (1.0 - a) * scoring.squash_text(hit.text_rank_value)
            for key, hit in hits.items()
        }
    elif fusion == "norm":
        fused = {key: a * v + (1.0 - a) * t for key, (v, t) in scoring.normalised_channels(hits).items()}
    else:
        spread = scoring.spread_channels(hits, fusion, (params.k_vec, params.k_txt))
        fused = {key: a * v + (1.0 - a) * t for key, (v, t) in spread.items()}
    return scoring.time_boosted(fused, hits, params.time_boost)
