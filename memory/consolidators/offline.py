"""The default consolidator: no LLM, only the episodes' embeddings.

Episodes are clustered greedily by cosine similarity to each cluster's
centroid. A cluster that recurs (at least CLUSTER_MIN_SIZE episodes) becomes one
candidate: a rule when its most central episode reads like an instruction,
otherwise a fact keyed by the butler and the cluster's most common words (so a
later cluster on the same topic supersedes it). Near-identical episodes inside
a recurring cluster are merged. Episodes that joined no recurring cluster are
offered again on later runs until they are CONSOLIDATE_SETTLE_HOURS old."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta

import numpy as np
from django.conf import settings

from memory.consolidators.base import EpisodeView, Plan, Proposal
from memory.statements import same_statement

_WORD = re.compile(r"[a-z][a-z0-9']{2,}")
_STOPWORD_TEXT = (
    "the and for that this with from have has had was were are is be been being not but you your our they them "
    "their there then than when what which who whom will would should could can may might must does did doing "
    "into onto about over under again also just only very more most some such any all each other same own too "
    "user users agent asked says said told today yesterday"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
# Instructions ("always ...", "never ...", "use X instead of Y") become rules.
_RULE_HINT = re.compile(
    r"\b(always|never|must|should|shouldn't|don't|do not|avoid|prefer|make sure|remember to|instead of)\b", re.I
)


class OfflineConsolidator:
    name = "offline"
    needs_embeddings = True

    def __init__(self, *, cluster_similarity: float, min_size: int, settle: timedelta) -> None:
        self.cluster_similarity = cluster_similarity
        self.min_size = min_size
        self.settle = settle

    @classmethod
    def from_settings(cls) -> OfflineConsolidator:
        conf = settings.MEMPROJ_PIPELINE
        return cls(
            cluster_similarity=conf["CLUSTER_SIMILARITY"],
            min_size=conf["CLUSTER_MIN_SIZE"],
            settle=timedelta(hours=conf["CONSOLIDATE_SETTLE_HOURS"]),
        )

    def _clusters(self, episodes: list[EpisodeView]) -> list[list[int]]:
        vectors = np.array([e.embedding for e in episodes], dtype=np.float64)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        centroids: list[np.ndarray] = []
        members: list[list[int]] = []
        for i, vector in enumerate(vectors):
            best, best_sim = -1, -1.0
            for c, centroid in enumerate(centroids):
                sim = float(vector @ (centroid / max(np.linalg.norm(centroid), 1e-12)))
                if sim > best_sim:
                    best, best_sim = c, sim
            if best >= 0 and best_sim >= self.cluster_similarity:
                centroids[best] = centroids[best] + vector
                members[best].append(i)
            else:
                centroids.append(vector.copy())
                members.append([i])
        self._vectors = vectors
        return members

    def _duplicate_groups(self, episodes: list[EpisodeView], idx: list[int]) -> list[list[int]]:
        groups: list[list[int]] = []
        for i in idx:  # idx is oldest first, so each group's head is its oldest episode
            for group in groups:
                head = group[0]
                if same_statement(episodes[head].content, episodes[i].content):
                    group.append(i)
                    break
            else:
                groups.append([i])
        return [g for g in groups if len(g) > 1]

    def _proposal(self, episodes: list[EpisodeView], idx: list[int]) -> Proposal:
        sub = self._vectors[idx]
        centre = idx[int(np.argmax((sub @ sub.T).sum(axis=1)))]
        representative = episodes[centre]
        counts: Counter[str] = Counter()
        for i in idx:
            counts.update({w for w in _WORD.findall(episodes[i].content.lower()) if w not in _STOPWORDS})
        keywords = sorted(w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
        sources = tuple(episodes[i].id for i in idx)
        importance = max(episodes[i].importance for i in idx)
        if _RULE_HINT.search(representative.content):
            return Proposal(kind="rule", content=representative.content, source_ids=sources, importance=importance)
        return Proposal(
            kind="fact",
            content=representative.content,
            source_ids=sources,
            subject=representative.butler or representative.scope or "episodes",
            predicate="recurring: " + (", ".join(keywords) or representative.content_hash[7:19]),
            importance=importance,
        )

    def plan(self, episodes: list[EpisodeView], *, now: datetime) -> Plan:
        usable = sorted((e for e in episodes if e.embedding is not None), key=lambda e: (e.created_at, str(e.id)))
        result = Plan()
        if not usable:
            return result
        settled_before = now - self.settle
        for idx in self._clusters(usable):
            if len(idx) >= self.min_size:
                result.proposals.append(self._proposal(usable, idx))
                result.duplicates += [tuple(usable[i].id for i in g) for g in self._duplicate_groups(usable, idx)]
                result.consumed.update(usable[i].id for i in idx)
            else:
                result.consumed.update(usable[i].id for i in idx if usable[i].created_at <= settled_before)
        return result
