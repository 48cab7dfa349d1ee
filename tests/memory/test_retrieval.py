"""The retrieval engine: CJK text in the keyword channel, the tenant's term
statistics and BM25, the candidate bound, fusion and per-call parameters."""

from __future__ import annotations

import hashlib
import importlib
import math
import re
import threading
import uuid
from collections.abc import Sequence
from dataclasses import replace
from types import SimpleNamespace

import pytest
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory import retrieval, scoring
from memory.embeddings import set_embedder
from memory.models import (
    GRAPH_GROUPS,
    EmbeddingStatus,
    Kind,
    Memory,
    graph_group_name,
    graph_group_of,
    kind_graph_name,
    kind_search_gin_name,
    vector_graph_names,
)
from memory.retrieval import RetrievalFilter, channel_hits
from memory.scoring import ChannelHit, RetrievalParams
from memory.selectors.memories import SearchQuery, memory_search, memory_similar
from memory.services.conflicts import memory_conflict_check
from memory.services.memories import episode_store, fact_store, rule_store
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db

SEED_JA = ["解約APIの命名規約", "Stripe webhookは10分ドリフトを許容"]


class WordHashEmbedder:
    """Deterministic bag-of-words vectors: texts sharing words are close."""

    model_name = "test-word-hash"
    dimensions = 384

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            v = [0.0] * self.dimensions
            for word in text.lower().split():
                v[int(hashlib.sha1(word.encode()).hexdigest(), 16) % self.dimensions] += 1.0
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append([x / norm for x in v])
        return out


@pytest.fixture(autouse=True)
def fake_embedder():
    set_embedder(WordHashEmbedder())
    yield
    set_embedder(None)


@pytest.fixture(autouse=True)
def complete_vector_scans():
    """An iterative HNSW scan stops at ``hnsw.max_scan_tuples`` graph entries.
    A test database keeps in its graphs the entries of every row the tests
    before this one rolled back (until a vacuum), so a test's few rows can lie
    past that many dead entries and a graph walk, when the planner takes one,
    returns them only now and then. These tests are about what the channels'
    hits lead to, not about the walk: the cap is lifted for them."""
    with connection.cursor() as cursor:
        cursor.execute("SET hnsw.max_scan_tuples = 2147483647")
    yield
    with connection.cursor() as cursor:
        cursor.execute("RESET hnsw.max_scan_tuples")


@pytest.fixture
def caller():
    return make_identity("tenant-a", "member").caller


def store(caller, *texts: str) -> list[Memory]:
    return [episode_store(caller=caller, content=t, butler="general") for t in texts]


def keyword(caller, query: str, **kw) -> list[str]:
    return [h.memory.content for h in memory_search(caller=caller, query=SearchQuery(query, mode="keyword", **kw))]


def test_japanese_seed_examples_are_found_by_keyword(caller):
    store(caller, *SEED_JA, "請求書の送付ルール", "The billing API naming rules", "Stripeの返金フロー")
    assert keyword(caller, "命名規約")[0] == SEED_JA[0]
    assert keyword(caller, "解約API")[0] == SEED_JA[0]
    assert keyword(caller, "解約APIの命名規約")[0] == SEED_JA[0]
    assert keyword(caller, "ドリフトを許容")[0] == SEED_JA[1]
    assert keyword(caller, "webhook 10分")[0] == SEED_JA[1]
    # Hybrid (every dialect's default) finds them too.
    hybrid = memory_search(caller=caller, query=SearchQuery("命名規約", mode="hybrid"))
    assert hybrid[0].memory.content == SEED_JA[0]


def test_chinese_and_korean_runs_are_split_too(caller):
    store(caller, "数据库迁移计划已经批准", "회의는 금요일 오후에 열립니다", "Database migration approved")
    assert keyword(caller, "迁移计划")[0] == "数据库迁移计划已经批准"
    assert keyword(caller, "금요일")[0] == "회의는 금요일 오후에 열립니다"


def test_english_analysis_is_unchanged(caller):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT memproj_search_vector(%s)::text = to_tsvector('english', %s)::text",
            ["The cats were running to the meetings", "The cats were running to the meetings"],
        )
        assert cursor.fetchone()[0] is True


@pytest.mark.parametrize("query", ["it's a \\ back'slash", "a & b | !c:* <-> (d", "'''", "の"])
def test_any_query_text_is_safe(caller, query):
    store(caller, "it's a back slash story", "a b c d")
    keyword(caller, query)  # no syntax error, whatever the text


def term_stats(tenant_id) -> tuple[dict[str, int], tuple[int, int]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT term, df FROM memory_termstat WHERE tenant_id = %s", [tenant_id])
        dfs = dict(cursor.fetchall())
        cursor.execute("SELECT docs, lexemes FROM memory_tenantstat WHERE tenant_id = %s", [tenant_id])
        totals = cursor.fetchone()
    return dfs, totals


def test_term_statistics_follow_inserts_updates_and_deletes(caller):
    outsider = make_identity("tenant-b", "outsider").caller
    a, b, _ = store(caller, "kangaroo meeting", "meeting notes", "meeting again")
    store(outsider, "kangaroo kangaroo")
    dfs, (docs, lexemes) = term_stats(caller.tenant_id)
    assert dfs["meet"] == 3 and dfs["kangaroo"] == 1 and docs == 3 and lexemes == 2 + 2 + 1  # "again" is a stop word
    assert term_stats(outsider.tenant_id)[0] == {"kangaroo": 1}

    Memory.objects.filter(pk=b.pk).update(content="wallaby notes")
    dfs, (docs, lexemes) = term_stats(caller.tenant_id)
    assert dfs["meet"] == 2 and dfs["wallabi"] == 1 and dfs["note"] == 1 and docs == 3

    Memory.objects.filter(pk=a.pk).delete()
    dfs, (docs, _) = term_stats(caller.tenant_id)
    assert "kangaroo" not in dfs and dfs["meet"] == 1 and docs == 2
    # A status change (retire, counters) does not touch the statistics.
    Memory.objects.filter(tenant_id=caller.tenant_id).update(validity="retracted")
    assert term_stats(caller.tenant_id)[1][0] == 2


def test_bm25_weighs_rare_terms_above_common_ones(caller):
    store(caller, *[f"weekly meeting number {i} about the meeting agenda" for i in range(12)])
    rare = store(caller, "kangaroo sighted")[0]
    params = RetrievalParams.resolve({"keyword_scorer": "bm25"})
    hits = memory_search(caller=caller, query=SearchQuery("meeting meeting kangaroo", mode="keyword", params=params))
    assert hits[0].memory.id == rare.id
    assert all(0.0 <= h.score <= 1.0 for h in hits)


def test_keyword_candidates_are_bounded_rarest_terms_first(caller):
    store(caller, *[f"status update {i}" for i in range(30)])
    target = store(caller, "status update about the zeppelin")[0]
    params = RetrievalParams.resolve({"txt_candidates": 5, "keyword_scorer": "bm25"})
    hits = memory_search(caller=caller, query=SearchQuery("status zeppelin", mode="keyword", params=params))
    # Only the rarest term's matches fit the budget: the zeppelin memory, ranked first.
    assert [h.memory.id for h in hits] == [target.id]
    # A single frequent term still returns something, at most the budget.
    assert 1 <= len(memory_search(caller=caller, query=SearchQuery("status", mode="keyword", params=params))) <= 5


def test_every_memory_with_the_rarest_term_is_a_candidate_when_they_fit_the_budget(caller):
    # Nine memories hold both words, one only the rare one, and "hangar" alone is
    # too frequent to count: the ten with "zeppelin" fill the budget exactly.
    both = store(caller, *[f"zeppelin hangar visit {i}" for i in range(9)])
    rare_only = store(caller, "zeppelin over the lake")
    store(caller, *[f"hangar door {i}" for i in range(30)])
    params = RetrievalParams.resolve({"txt_candidates": 10, "k_txt": 20, "keyword_scorer": "bm25"})
    for kinds in (["episode"], ["episode", "fact", "rule"]):
        flt = RetrievalFilter(kinds=kinds, now=timezone.now())
        hits = channel_hits(caller=caller, flt=flt, query_text="zeppelin hangar", query_vector=None, params=params)
        assert set(hits) == {m.id for m in both + rare_only}, kinds


@pytest.mark.parametrize("budget", [2, 5, 12, 1000])
def test_keyword_candidates_hold_the_all_words_matches_within_the_budget(caller, budget):
    """Whatever the budget: at most the budget is ranked, every memory that
    holds all of the query's words is among the candidates while they fit, and
    every candidate holds one of them."""
    import random

    rng = random.Random(budget)
    words = "zeppelin hangar roof lake bread crew garden budget".split()  # noqa: SIM905
    texts = [" ".join(rng.sample(words, rng.randint(1, 4))) for _ in range(40)]
    memories = store(caller, *texts)
    params = RetrievalParams.resolve({"txt_candidates": budget, "k_txt": 1000, "keyword_scorer": "bm25"})
    for query in [" ".join(rng.sample(words, rng.randint(1, 3))) for _ in range(15)]:
        asked = set(query.split())
        found = {
            h.memory.id for h in memory_search(caller=caller, query=SearchQuery(query, mode="keyword", params=params))
        }
        every_word = {m.id for m, text in zip(memories, texts, strict=True) if asked <= set(text.split())}
        some_word = {m.id for m, text in zip(memories, texts, strict=True) if asked & set(text.split())}
        assert 0 < len(found) <= budget, query
        assert found <= some_word, query
        if len(every_word) <= budget:
            assert every_word <= found, query


def test_params_resolve_from_settings_and_refuse_unknown_names(settings):
    settings.MEMPROJ = {**settings.MEMPROJ, "FUSION": "rrf", "FUSION_ALPHA": 0.4}
    params = RetrievalParams.resolve()
    assert (params.fusion, params.alpha) == ("rrf", 0.4)
    assert RetrievalParams.resolve({"k_vec": 10}).k_vec == 10
    assert RetrievalParams.resolve(params) is params
    with pytest.raises(ValueError, match="unknown retrieval parameter"):
        RetrievalParams.resolve({"k_vector": 10})
    with pytest.raises(ValueError):
        RetrievalParams(fusion="max")
    with pytest.raises(ValueError):
        RetrievalParams(alpha=1.5)
    with pytest.raises(ValueError):
        RetrievalParams(k_txt=0)
    with pytest.raises(AttributeError):
        params.alpha = 0.9  # type: ignore[misc]
    p = RetrievalParams(recency_half_life_days={"fact": 120})
    assert p.half_life("fact") == 120 and p.half_life("episode") == scoring.RECENCY_HALF_LIFE_DAYS


def test_fusions_stay_in_unit_range_and_rank_agreement_first():
    hits = {
        "both": ChannelHit(vector_similarity=0.62, vector_rank=1, text_rank_value=7.5, text_rank=1),
        "vec": ChannelHit(vector_similarity=0.55, vector_rank=2),
        "txt": ChannelHit(text_rank_value=3.0, text_rank=2),
    }
    for fusion in scoring.FUSIONS:
        fused = scoring.fuse_all(hits, RetrievalParams(fusion=fusion))
        assert all(0.0 <= v <= 1.0 for v in fused.values())
        assert max(fused, key=lambda pk: fused[pk]) == "both"
    # The experiment-only fusions live in the benchmark (bench/_fusions.py), not in a deployment's settings.
    for fusion in ("alpha", "norm", "minmax", "dbsf"):
        with pytest.raises(ValueError, match="fusion must be one of"):
            RetrievalParams(fusion=fusion)
    norm = scoring.normalised_channels(hits)  # pce's activation channels
    assert norm["both"] == (1.0, 1.0) and norm["txt"] == (0.0, pytest.approx(3.0 / 7.5))


def test_recall_recency_uses_the_per_kind_half_life(caller):
    from datetime import timedelta

    from django.utils import timezone

    from memory.selectors.memories import composite_rank

    old = store(caller, "quarterly report draft")[0]
    Memory.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=30))
    old.refresh_from_db()
    hit = ChannelHit(vector_similarity=0.5, vector_rank=1)
    now = timezone.now()
    short = composite_rank([(old, hit)], now, RetrievalParams(recency_half_life_days={"episode": 1}))[0]
    long = composite_rank([(old, hit)], now, RetrievalParams(recency_half_life_days={"episode": 3650}))[0]
    assert long.score > short.score


def test_minmax_does_not_bury_the_best_keyword_hit_under_every_vector_candidate():
    # MiniLM cosines cluster: dividing by the best (norm) leaves the weakest vector
    # candidate 0.75 of the top, above a keyword-only hit that is the keyword channel's best.
    hits = {
        "vec1": ChannelHit(vector_similarity=0.60, vector_rank=1),
        "vec2": ChannelHit(vector_similarity=0.45, vector_rank=2),
        "txt1": ChannelHit(text_rank_value=9.0, text_rank=1),
        "txt2": ChannelHit(text_rank_value=2.0, text_rank=2),
    }

    def blend(channels):
        return {key: 0.5 * v + 0.5 * t for key, (v, t) in channels.items()}

    norm = blend(scoring.normalised_channels(hits))
    # Both channels cut at their depth (2): each channel's last candidate is its "not relevant" level.
    minmax = blend(scoring.spread_channels(hits, "minmax", (2, 2)))
    assert norm["vec2"] > norm["txt2"]
    assert minmax["txt1"] == minmax["vec1"] == pytest.approx(0.5)
    assert minmax["vec2"] == minmax["txt2"] == 0.0
    # Channels that returned every match (fewer than their depth) are spread from 0:
    # two close scores in a small tenant stay close.
    whole = blend(scoring.spread_channels(hits, "minmax", (48, 48)))
    assert whole["vec2"] == pytest.approx(0.5 * 0.45 / 0.60)


def test_conf_fusion_weighs_the_keyword_channel_by_its_coverage_of_the_query():
    def hits(coverage):
        return {
            "vec": ChannelHit(vector_similarity=0.6, vector_rank=1),
            "vec_low": ChannelHit(vector_similarity=0.3, vector_rank=2),
            "txt": ChannelHit(text_rank_value=5.0, text_rank=1, text_coverage=coverage),
            "txt_low": ChannelHit(text_rank_value=1.0, text_rank=2, text_coverage=coverage / 5),
        }

    params = RetrievalParams(fusion="conf", alpha=0.65, conf_gain=2.8)
    confident = scoring.fuse_all(hits(1.0), params)
    unsure = scoring.fuse_all(hits(0.1), params)
    assert confident["txt"] > confident["vec"]  # the query's rare words all found: keyword leads
    assert unsure["vec"] > unsure["txt"]  # a long query's best match shares few words: vector leads
    assert confident["vec"] + confident["txt"] == pytest.approx(1.0)  # the per-query weights sum to 1
    # At coverage 1 / gain the policy's alpha holds as given.
    assert scoring.confidence_alpha(hits(1 / 2.8), 0.65, 2.8) == pytest.approx(0.65)
    vector_only = {k: h for k, h in hits(1.0).items() if h.vector_rank is not None}
    assert scoring.fuse_all(vector_only, params)["vec"] == pytest.approx(1.0)
    # The keyword channel's first hit is what its coverage vouches for: a
    # memory further down holding more of the query's words moves nothing.
    below = {**hits(0.1), "txt_long": ChannelHit(text_rank_value=0.5, text_rank=3, text_coverage=1.0)}
    assert scoring.confidence_alpha(below, 0.65, 2.8) == scoring.confidence_alpha(hits(0.1), 0.65, 2.8)


def test_with_the_policys_alpha_a_hit_holding_every_query_word_outranks_every_vector_only_hit():
    """Coverage 1 (the first keyword hit holds every word of the query) leaves
    the vector channel less than half the weight under the default policy's
    alpha, whatever the vector channel's scores."""
    hits = {
        "own_text": ChannelHit(text_rank_value=8.2, text_rank=1, text_coverage=1.0),
        "near_duplicate": ChannelHit(text_rank_value=2.9, text_rank=2, text_coverage=0.31),
        **{f"vector_only_{n}": ChannelHit(vector_similarity=0.82 - n / 1000, vector_rank=n + 1) for n in range(96)},
    }
    fused = scoring.fuse_all(hits, RetrievalParams(fusion="conf", alpha=0.65, conf_gain=2.0))
    assert max(fused, key=fused.__getitem__) == "own_text"


def test_adaptive_fusion_sets_the_vector_weight_per_query_from_its_features():
    def hits(coverage, agree):
        return {
            "vec": ChannelHit(vector_similarity=0.6, vector_rank=1, text_rank=None if not agree else 3),
            "vec_low": ChannelHit(vector_similarity=0.3, vector_rank=2),
            "txt": ChannelHit(
                text_rank_value=5.0, text_rank=1, text_coverage=coverage, vector_rank=None if not agree else 2
            ),
            "txt_low": ChannelHit(text_rank_value=1.0, text_rank=2, text_coverage=coverage / 5),
        }

    features = scoring.fusion_features(hits(0.8, False))
    assert dict(zip(scoring.FUSION_FEATURES, features, strict=True)) == pytest.approx(
        {"bias": 1.0, "coverage": 0.8, "vec_gap": 0.3, "txt_gap": 0.8, "agree": 0.0, "vec_top": 0.6}
    )
    assert scoring.fusion_features(hits(0.8, True))[scoring.FUSION_FEATURES.index("agree")] == 1.0
    # A weight on coverage below 0 moves the weight to the keyword channel as coverage grows.
    weights = (1.0, -3.0, 0.0, 0.0, 0.0, 0.0)
    assert scoring.adaptive_alpha(hits(1.0, False), weights) < 0.5 < scoring.adaptive_alpha(hits(0.1, False), weights)
    assert scoring.adaptive_alpha(hits(1.0, False), weights) == pytest.approx(scoring.sigmoid(-2.0))
    # One channel alone decides.
    vector_only = {k: h for k, h in hits(1.0, False).items() if h.text_rank is None}
    keyword_only = {k: h for k, h in hits(1.0, False).items() if h.vector_rank is None}
    assert scoring.adaptive_alpha(vector_only, weights) == 1.0 and scoring.adaptive_alpha(keyword_only, weights) == 0.0
    fused = scoring.fuse_all(hits(1.0, False), RetrievalParams(fusion="adaptive"))
    a = scoring.adaptive_alpha(hits(1.0, False), scoring.ADAPTIVE_WEIGHTS)
    assert fused["vec"] == pytest.approx(a) and fused["txt"] == pytest.approx(1.0 - a)


def test_keyword_hits_carry_their_coverage_of_the_query(caller):
    """Coverage is the share of the query's IDF a hit's terms hold, whatever
    the hit's length: BM25 over the IDF sum gave a long memory holding every
    word less than 1, and conf fusion then handed the query to the vector
    channel."""
    store(caller, "The zeppelin landed in Friedrichshafen")
    store(caller, "We talked about the weather")
    store(caller, "A long note: the zeppelin hangar roof, the mooring mast, the hydrogen cells and the crew quarters")
    flt = RetrievalFilter(kinds=["episode"], now=timezone.now())
    hits = channel_hits(caller=caller, flt=flt, query_text="zeppelin", query_vector=None, params=RetrievalParams())
    assert [h.text_coverage for h in hits.values()] == [pytest.approx(1.0)] * 2
    assert len({h.text_rank_value for h in hits.values()}) == 2  # BM25 still weighs their lengths
    both = channel_hits(
        caller=caller, flt=flt, query_text="zeppelin weather", query_vector=None, params=RetrievalParams()
    )
    # zeppelin is in two memories, weather in one: the rarer word holds more of the query.
    coverage = sorted(h.text_coverage or 0.0 for h in both.values())
    assert coverage[0] == pytest.approx(coverage[1]) and coverage[0] < 0.5 < coverage[2] < 1.0
    assert coverage[0] + coverage[2] == pytest.approx(1.0)


@pytest.mark.parametrize("iterative", [True, False], ids=["estimable-prefix", "slice-prefix"])
def test_vector_channel_honours_every_filter(caller, monkeypatch, iterative):
    """Issue 13 rewrote the namespace prefix predicate so the planner keeps the HNSW
    scan; both forms (pgvector >= 0.8 and older) must select exactly the same rows.
    Every memory is a near neighbour of the query, so only the filters exclude."""
    monkeypatch.setattr("memory.retrieval._iterative_scan_supported", iterative)
    layout = {
        # name: (kind, namespace, boundary class, collection)
        "at_prefix": ("fact", ["user", "ann"], "internal", ""),
        "below_prefix": ("fact", ["user", "ann", "work"], "public", ""),
        "sibling": ("fact", ["user", "bob"], "internal", ""),
        "parent": ("fact", ["user"], "internal", ""),
        "elsewhere": ("fact", ["team", "user", "ann"], "internal", ""),
        "no_namespace": ("fact", [], "internal", ""),
        "episode_at_prefix": ("episode", ["user", "ann"], "internal", ""),
        "secret_at_prefix": ("fact", ["user", "ann"], "secret", ""),
        "episode_in_bank": ("episode", [], "internal", "memory_bank"),
        "fact_in_books": ("fact", ["user", "ann"], "internal", "books"),
    }
    ids = {}
    for name, (kind, namespace, boundary_class, collection) in layout.items():
        [memory] = store(caller, f"zeppelin landed safely {name}")
        Memory.objects.filter(pk=memory.pk).update(
            kind=kind, namespace=namespace, boundary_class=boundary_class, collection=collection
        )
        ids[memory.pk] = name
    [query_vector] = WordHashEmbedder().embed(["zeppelin landed safely"])

    def vector_hits(**filters) -> set[str]:
        flt = RetrievalFilter(now=timezone.now(), **filters)
        hits = channel_hits(
            caller=caller, flt=flt, query_text=None, query_vector=query_vector, params=RetrievalParams()
        )
        assert all(h.vector_rank is not None for h in hits.values())
        return {ids[pk] for pk in hits}

    assert vector_hits(kinds=["fact"], namespace_prefix=("user", "ann")) == {
        "at_prefix",
        "below_prefix",
        "fact_in_books",
    }
    assert vector_hits(kinds=["fact"], namespace_prefix=("user",)) == {
        "at_prefix",
        "below_prefix",
        "sibling",
        "parent",
        "fact_in_books",
    }
    assert vector_hits(kinds=["fact", "episode"], namespace_prefix=("user", "ann", "work")) == {"below_prefix"}
    assert vector_hits(kinds=["fact", "episode"], namespace_prefix=("user", "ann"), collections=["memory_bank"]) == {
        "at_prefix",
        "below_prefix",
    }
    assert vector_hits(kinds=["fact", "episode"], collections=["memory_bank"]) == {
        "at_prefix",
        "below_prefix",
        "sibling",
        "parent",
        "elsewhere",
        "no_namespace",
        "episode_in_bank",
    }
    # The secret one is a neighbour too, but never visible under the default use tags.
    assert "secret_at_prefix" not in vector_hits(kinds=["fact", "episode"])
    assert vector_hits(kinds=["episode"], namespace_prefix=("user", "ann")) == {"episode_at_prefix"}


CHANNEL_TEXTS = [
    "zeppelin landed safely in Friedrichshafen",
    "the zeppelin hangar needs a new roof",
    "weather over the lake was calm",
    "calm weather, zeppelin flights resume",
    "Maria baked bread for the zeppelin crew",
    "budget review for the hangar roof",
    "the crew slept late",
]


def channels_in_one_statement(caller):  # type: ignore[no-untyped-def]
    """CHANNEL_TEXTS stored, a query, and the hits of the one statement running
    both channels: what channel_search must return however it runs them."""
    store(caller, *CHANNEL_TEXTS)
    flt = RetrievalFilter(kinds=["episode"], now=timezone.now())
    params = RetrievalParams(k_vec=4, k_txt=2)  # more vector hits than keyword ones: some are vector-only
    query = "zeppelin hangar roof"
    [vector] = WordHashEmbedder().embed([query])
    together = retrieval.channel_statement(caller=caller, flt=flt, query_text=query, query_vector=vector, params=params)
    assert together is not None
    with connection.cursor() as cursor:
        # With the settings the channels run with: without the iterative scan, an HNSW walk of a
        # test database (dead index entries of rolled-back tests) may stop short of k_vec rows.
        rows = retrieval._rows_of_last_statement(cursor, retrieval.with_settings(together[0], together[2]), together[1])
        expected, _ = retrieval._hits_from_rows(rows)
    return flt, params, query, vector, expected


def test_channels_run_apart_as_they_would_together(caller):
    """Issue 13 runs the keyword channel while the query is embedded, then the
    vector channel: the hits, their ranks and scores, and the ranking columns
    returned with them must be exactly those of the one statement running both."""
    flt, params, query, vector, expected = channels_in_one_statement(caller)
    waited = []

    def later() -> list[float]:
        waited.append(True)
        return vector

    columns = ("kind", "importance", "created_at")
    hits, rows = retrieval.channel_search(
        caller=caller, flt=flt, query_text=query, query_vector=later, params=params, columns=columns
    )
    assert waited == [True]
    assert hits == expected
    assert any(h.vector_rank is not None and h.text_rank is None for h in hits.values())  # both channels ran
    assert any(h.text_rank is not None for h in hits.values())
    stored = {pk: values for pk, *values in Memory.objects.filter(pk__in=list(hits)).values_list("pk", *columns)}
    assert {pk: list(values) for pk, values in rows.items()} == stored
    # An embedder that cannot answer (the wait gives None): the keyword channel alone.
    keyword_only = retrieval.channel_search(
        caller=caller, flt=flt, query_text=query, query_vector=lambda: None, params=params
    )[0]
    assert keyword_only and all(h.vector_rank is None for h in keyword_only.values())


def test_a_failing_keyword_channel_still_awaits_the_query_vector(caller, monkeypatch):
    """The wait settles the embedder's circuit breaker (a half-open probe that is
    never awaited would pause the embedder for good), so it runs whatever the
    keyword channel does."""
    store(caller, *CHANNEL_TEXTS)
    monkeypatch.setattr(retrieval, "_BM25_SQL", "txt AS (SELECT NULL::uuid AS id, 1 / 0 AS score, 1.0 AS coverage)")
    waited = []
    with pytest.raises(DatabaseError):
        retrieval.channel_search(
            caller=caller,
            flt=RetrievalFilter(kinds=["episode"], now=timezone.now()),
            query_text="zeppelin",
            query_vector=lambda: waited.append(True),
            params=RetrievalParams(),
        )
    assert waited == [True]


@pytest.mark.parametrize(
    ("kinds", "graphs"),
    [
        (["fact"], ["fact"]),
        (["rule"], ["rule"]),
        (["fact", "rule"], ["fact", "rule"]),
        (["document"], ["document"]),
        (["episode"], ["group"]),
        (["episode", "fact", "rule", "document"], ["group"]),
    ],
)
def test_reads_of_minority_kinds_walk_their_own_graphs(caller, monkeypatch, kinds, graphs):
    """Issue 13: a read of facts, rules or documents walks only those kinds'
    HNSW graphs (a partial index per kind of active memories), never the graph
    of every memory where episodes crowd them out; a read with episodes walks
    that one graph (its tenant's group's) once. The group graphs here are the
    larger (a small tenant's smaller group graph:
    test_graph_group_statistics.py)."""
    sizes = {name: 10_000.0 if name.startswith("memory_embedding_hnsw") else 1000.0 for name in _ALL_GRAPHS}
    monkeypatch.setattr(retrieval, "graph_sizes", lambda: sizes)
    [vector] = WordHashEmbedder().embed(["any query"])
    flt = RetrievalFilter(kinds=kinds, now=timezone.now(), namespace_prefix=["user", "u1"])
    plan = _vector_read_plan(caller, flt, vector, k_vec=10)
    expected = [
        graph_group_name(_graph_group(caller.tenant_id)) if g == "group" else kind_graph_name(g) for g in graphs
    ]
    assert _graphs_walked(plan) == expected, plan


_ALL_GRAPHS = vector_graph_names()


def _vector_read_plan(caller, flt: RetrievalFilter, vector: list[float], *, k_vec: int) -> str:  # type: ignore[no-untyped-def]
    """EXPLAIN of the vector channel's statement with the other orderings turned
    off: the plan shows which graphs the statement can walk (the planner may only
    take a partial index when the probe's own filter implies its predicate)."""
    statement = retrieval.channel_statement(
        caller=caller, flt=flt, query_text=None, query_vector=vector, params=RetrievalParams(k_vec=k_vec)
    )
    assert statement is not None
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + statement[0], statement[1])
        return "\n".join(row[0] for row in cursor.fetchall())


def _graph_group(tenant_id) -> int:  # type: ignore[no-untyped-def]
    with connection.cursor() as cursor:
        cursor.execute("SELECT memproj_graph_group(%s)", [tenant_id])
        return cursor.fetchone()[0]


def _graphs_walked(plan: str) -> list[str]:
    return sorted(re.findall(r"Index Scan using (memory_\w+_hnsw\w*) ", plan))


@pytest.mark.parametrize(
    ("kinds", "indexes"),
    [
        (["fact"], ["memory_fact_search_gin"]),
        (["rule"], ["memory_rule_search_gin"]),
        (["document"], ["memory_document_search_gin"]),
        (["fact", "rule"], ["memory_fact_search_gin", "memory_rule_search_gin"]),
        (
            ["document", "fact", "rule"],
            ["memory_document_search_gin", "memory_fact_search_gin", "memory_rule_search_gin"],
        ),
        (["episode"], ["memory_episode_search_gin"]),
        (["episode", "fact"], ["memory_episode_search_gin", "memory_fact_search_gin"]),
        (
            ["document", "episode", "rule"],
            ["memory_document_search_gin", "memory_episode_search_gin", "memory_rule_search_gin"],
        ),
        (
            ["document", "episode", "fact", "rule"],
            [
                "memory_document_search_gin",
                "memory_episode_search_gin",
                "memory_fact_search_gin",
                "memory_rule_search_gin",
            ],
        ),
    ],
)
def test_a_keyword_read_scans_only_the_indexes_of_its_kinds(kinds, indexes):
    """The keyword channel's twin of the test above: a read of facts can scan the
    facts' GIN index alone, never entries of rules it would filter out row by
    row at the heap (a facts read of a large tenant visited thousands of rules
    for a query whose words were common among its rules), and a read of
    episodes, rules and documents (roampal's KNOWN CONTEXT) never the facts'
    (migration 0046: ~10,000 facts filtered out for such a read at 1M
    memories); a read of several kinds can scan the union of their indexes.
    Planned on an empty copy of the table holding only the kinds' indexes as
    the database defines them: what is left to plan is whether the read's
    condition proves each index's predicate (on the real table the cheapest
    proved path wins, by the table's statistics, the index of every memory
    among them)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memory_memory' AND indexdef LIKE %s",
            ["%USING gin (search_vector) WHERE%"],
        )
        definitions = cursor.fetchall()
        assert sorted(name for name, _ in definitions) == sorted(kind_search_gin_name(kind) for kind in Kind.values), (
            definitions
        )
        cursor.execute("CREATE TEMP TABLE keyword_plan (LIKE memory_memory)")
        for name, definition in definitions:
            cursor.execute(definition.replace(f"{name} ON public.memory_memory", f"{name} ON keyword_plan"))
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN SELECT m.id FROM keyword_plan m WHERE "
            + retrieval.keyword_kinds_sql(kinds)
            + " AND m.validity = 'active' AND m.search_vector @@ memproj_any_query(ARRAY['book', 'travel'])",
            {"kinds": kinds},
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    scanned = set(re.findall(r"Bitmap Index Scan on (memory_\w+_gin)", plan))
    assert sorted(scanned) == indexes, plan


@pytest.mark.parametrize("scorer", ["bm25", "cover_density"])
@pytest.mark.parametrize("kinds", [["episode"], ["document", "episode", "fact", "rule"]])
def test_the_keyword_statement_builds_the_querys_tsquery_once(caller, kinds, scorer):
    """The tsquery of the query's terms is built once per statement (an
    InitPlan), not once per row a GIN bitmap rechecks or a filter tests: the
    build (unnest, string_agg, a tsquery parse) per row cost ~30% of the
    keyword statement at 1M memories, and a read of several kinds' indexes
    rechecks it in each arm."""
    store(caller, *CHANNEL_TEXTS)
    flt = RetrievalFilter(kinds=kinds, now=timezone.now())
    params = RetrievalParams(keyword_scorer=scorer)
    statement = retrieval.channel_statement(
        caller=caller, flt=flt, query_text="zeppelin hangar roof", query_vector=None, params=params
    )
    assert statement is not None
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN (VERBOSE) " + statement[0], statement[1])
        plan = [row[0] for row in cursor.fetchall()]
    built = [line.strip() for line in plan if re.search(r"memproj_(any|all)_query\(", line)]
    # Each build is an InitPlan's whole output, computed once.
    once = r"Output: memproj_(any|all)_query\(\(InitPlan \d+\)\.col1\)"
    assert built and all(re.fullmatch(once, b) for b in built), plan
    matches = re.findall(r"search_vector @@ ([^)]*\))", "\n".join(plan))
    assert matches and all(re.fullmatch(r"\(InitPlan \d+\)", m) for m in matches), plan


def test_the_keyword_condition_writes_only_the_models_kinds():
    """The kinds are written into the statement's text: a name that is not a
    kind of memory never reaches it (and matches nothing, as no memory has it)."""
    assert retrieval.keyword_kinds_sql(["rule", "fact", "rule"]) == "(m.kind = 'fact' OR m.kind = 'rule')"
    assert retrieval.keyword_kinds_sql(["fact' OR true --"]) == "false"
    assert retrieval.keyword_kinds_sql([]) == "false"


def test_a_graph_group_is_the_last_byte_of_the_tenant_id_modulo_the_group_count():
    """The group graphs' predicates (migration 0041) and GRAPH_GROUPS agree: every
    group is reachable and no tenant falls outside them."""
    ids = [uuid.UUID(bytes=bytes(15) + bytes([last])) for last in range(256)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT memproj_graph_group(t) FROM unnest(%s::uuid[]) AS t", [ids])
        groups = [row[0] for row in cursor.fetchall()]
    assert groups == [last % GRAPH_GROUPS for last in range(256)] == [graph_group_of(t) for t in ids]
    graphs = {index.name for index in Memory._meta.indexes if index.name.startswith("memory_embedding_hnsw")}
    assert graphs == {graph_group_name(group) for group in range(GRAPH_GROUPS)}


def test_a_read_walks_its_own_tenants_group_graph_only(caller):
    """Two tenants in different groups: each one's vector read walks its own
    group's graph and finds its own memories; the other's, nearer, are in a
    graph it never walks."""
    other = make_identity("graph-other", "member").caller
    while _graph_group(other.tenant_id) == _graph_group(caller.tenant_id):
        other = make_identity(f"graph-other-{uuid.uuid4().hex[:6]}", "member").caller
    store(caller, "zeppelin hangar door")
    store(other, "zeppelin hangar roof")
    [vector] = WordHashEmbedder().embed(["zeppelin hangar roof"])
    for who, found in ((caller, "zeppelin hangar door"), (other, "zeppelin hangar roof")):
        flt = RetrievalFilter(kinds=["episode"], now=timezone.now())
        hits = channel_hits(caller=who, flt=flt, query_text=None, query_vector=vector, params=RetrievalParams(k_vec=5))
        assert [m.content for m in Memory.objects.filter(pk__in=hits)] == [found]
        plan = _vector_read_plan(who, flt, vector, k_vec=5)
        assert _graphs_walked(plan) == [graph_group_name(_graph_group(who.tenant_id))], plan


def test_a_read_of_several_kinds_returns_the_nearest_of_all(caller):
    """One probe per kind, then the k nearest of all: the same rows as one exact
    ranking of every kind (a kind with no row near the query adds nothing)."""
    for index, text in enumerate(["zeppelin hangar roof", "zeppelin hangar door", "garden hose", "a garden shed"]):
        fact_store(caller=caller, subject="user", predicate=f"p{index}", content=text)
    rule_store(caller=caller, content="zeppelin hangar tours need a booking")
    store(caller, "zeppelin hangar", "zeppelin hangar roof")  # episodes: not of the read's kinds
    [vector] = WordHashEmbedder().embed(["zeppelin hangar"])
    flt = RetrievalFilter(kinds=["fact", "rule", "document"], now=timezone.now())
    hits = retrieval.channel_hits(
        caller=caller, flt=flt, query_text=None, query_vector=vector, params=RetrievalParams(k_vec=3)
    )
    exact = [
        pk
        for pk, _ in sorted(
            (
                (m.pk, -sum(a * b for a, b in zip(vector, m.embedding, strict=True)))
                for m in Memory.objects.filter(tenant_id=caller.tenant_id, kind__in=["fact", "rule"])
            ),
            key=lambda item: (item[1], item[0]),
        )[:3]
    ]
    assert sorted(hits, key=lambda pk: (hits[pk].vector_rank, pk)) == exact


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_channels_run_side_by_side_with_the_same_hits(caller, monkeypatch):
    """The keyword channel runs in this thread while a side-read thread, on its
    own connection, waits for the query's vector and runs the vector channel
    (memproj.dbthreads.side_by_side); the hits are those of one statement."""
    flt, params, query, vector, expected = channels_in_one_statement(caller)
    threads: dict[bool, str] = {}
    vector_rows, keyword_rows = retrieval._channel_rows, retrieval._keyword_rows

    def record_vector(sql: str, params_sql: dict, *, run_vec: bool) -> list[tuple]:
        threads[True] = threading.current_thread().name
        return vector_rows(sql, params_sql, run_vec=run_vec)

    def record_keyword(sql: str, params_sql: dict) -> list[tuple]:
        threads[False] = threading.current_thread().name
        return keyword_rows(sql, params_sql)

    monkeypatch.setattr(retrieval, "_channel_rows", record_vector)
    monkeypatch.setattr(retrieval, "_keyword_rows", record_keyword)
    hits, _ = retrieval.channel_search(
        caller=caller, flt=flt, query_text=query, query_vector=lambda: vector, params=params
    )
    assert hits == expected
    assert threads[False] == threading.current_thread().name  # the keyword channel: this thread
    assert threads[True].startswith("side-read")  # the vector channel: a side-read thread


_SETTINGS_PROBE = "SELECT current_setting('hnsw.ef_search', true), current_setting('work_mem')"


def _session_settings() -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(_SETTINGS_PROBE)
        return cursor.fetchone()


@pytest.mark.django_db(transaction=True)
def test_a_channel_sends_its_settings_and_statement_as_one_query_and_they_end_with_it(caller):
    """Outside a transaction the vector channel's settings and statement go as
    one query string, one implicit transaction: the statement runs with them,
    and the connection's next statement no longer does. The keyword channel's
    statement goes alone (it is sent prepared)."""
    before = _session_settings()
    retrieval.iterative_scan_supported()  # asked once per process
    with CaptureQueriesContext(connection) as queries:
        [(ef_search, _)] = retrieval._channel_rows(_SETTINGS_PROBE, {}, run_vec=True)
    assert len(queries) == 1
    assert ef_search == "100"
    after = _session_settings()
    assert before[0] != "100" and after[0] != "100"
    assert retrieval.with_settings(_SETTINGS_PROBE, run_vec=False) == _SETTINGS_PROBE


@pytest.mark.django_db(transaction=True)
def test_every_connection_keeps_the_keyword_channels_work_mem():
    """The test server keeps PostgreSQL's default 4MB; a connection of the
    service's raises it to 16MB for its session when it opens."""
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('work_mem'), reset_val FROM pg_settings WHERE name = 'work_mem'")
        assert cursor.fetchone() == ("16MB", "4096")


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db(transaction=True)
def test_the_keyword_statement_is_prepared_once_per_connection_and_tenant_with_the_same_hits(caller, settings):
    """Prepared, with the tenant and the kinds written into its text (a generic
    plan knows only its text): the same hits as the statement sent unprepared,
    one prepared statement however often it runs, another for another kind set."""
    flt, params, query, _vector, _expected = channels_in_one_statement(caller)

    def keyword_hits(kinds: Sequence[str]) -> dict:
        return retrieval.channel_hits(
            caller=caller, flt=replace(flt, kinds=kinds), query_text=query, query_vector=None, params=params
        )

    settings.MEMPROJ = {**settings.MEMPROJ, "DB_PREPARED": False}
    unprepared = keyword_hits(["episode", "fact"])
    assert unprepared and _prepared_statements() == []
    settings.MEMPROJ = {**settings.MEMPROJ, "DB_PREPARED": True}
    for _ in range(3):
        assert keyword_hits(["episode", "fact"]) == unprepared
    [statement] = _prepared_statements()
    assert f"'{caller.tenant_id.hex}'::uuid" in statement and "(m.kind = 'episode' OR m.kind = 'fact')" in statement
    assert "%(tenant)s" not in statement and "%(kinds)s" not in statement
    assert keyword_hits(["episode"]) == unprepared
    assert len(_prepared_statements()) == 2


def test_inside_a_transaction_a_prepared_keyword_statement_that_fails_leaves_it_usable(caller):
    with pytest.raises(DatabaseError):
        retrieval._keyword_rows("SELECT 1 / %(zero)s", {"zero": 0})
    assert retrieval._keyword_rows("SELECT %(one)s::int", {"one": 1}) == [(1,)]


def test_inside_a_transaction_a_channel_keeps_a_savepoint_so_a_failed_read_leaves_it_usable(caller):
    with pytest.raises(DatabaseError):
        retrieval._channel_rows("SELECT 1 / 0", {}, run_vec=False)
    [(ef_search, _)] = retrieval._channel_rows(_SETTINGS_PROBE, {}, run_vec=True)
    assert ef_search == "100"


@pytest.mark.parametrize("kinds", [["fact"], ["fact", "rule"]])
def test_a_probe_of_one_kinds_graph_names_its_kind_once(caller, monkeypatch, kinds):
    """The planner multiplies the selectivities of two predicates on the kind as
    if independent: with the read's ``kind = ANY(kinds)`` and the probe's own
    ``kind = 'fact'`` together it underestimated a 100k tenant's facts 25x and
    sorted all of them by distance instead of walking the facts' graph. The
    group graphs here are the larger, so the read probes the kinds' graphs
    (with the test database's own sizes, whichever tests ran before decided)."""
    sizes = {name: 10_000.0 if name.startswith("memory_embedding_hnsw") else 1000.0 for name in _ALL_GRAPHS}
    monkeypatch.setattr(retrieval, "graph_sizes", lambda: sizes)
    flt = RetrievalFilter(kinds=kinds, now=timezone.now())
    statement = retrieval.channel_statement(
        caller=caller, flt=flt, query_text=None, query_vector=[0.1] * 384, params=RetrievalParams()
    )
    assert statement is not None
    probes = re.findall(r"\(SELECT m\.id, m\.embedding::halfvec\(384\) <=>.*?LIMIT", statement[0], flags=re.S)
    assert len(probes) == len(kinds)
    for probe in probes:
        where = probe.split("WHERE", 1)[1]  # (the select list reads the kind of a row, no predicate)
        assert where.count("m.kind") == 1 and "m.kind = %(vec_kind_" in where


def _plan_of_the_nearest_read(run) -> str:  # type: ignore[no-untyped-def]
    """EXPLAIN of the one statement ``run`` orders by vector distance, with the
    other orderings turned off: the plan shows whether it can walk a graph."""
    with CaptureQueriesContext(connection) as queries:
        run()
    [sql] = [query["sql"] for query in queries if "<=>" in query["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_nearest_neighbour_reads_walk_the_kinds_graph(caller):
    """Issue 13: the graphs index the embedding at half precision, so a read
    walks one only when it orders by that same expression; otherwise it is still
    correct but sorts every candidate. The ORM reads by distance (similar
    memories, the conflict check's neighbours) walk a graph like the vector
    channel does."""
    for index, text in enumerate(["zeppelin hangar roof", "zeppelin hangar door", "garden hose"]):
        fact_store(caller=caller, subject="user", predicate=f"p{index}", content=text)
    memory = Memory.objects.filter(tenant_id=caller.tenant_id, kind="fact", content__endswith="roof").get()
    assert memory.embedding is not None
    for run in (
        lambda: memory_similar(caller=caller, memory=memory, threshold=0.0),
        lambda: memory_conflict_check(memory_id=memory.pk),
    ):
        plan = _plan_of_the_nearest_read(run)
        # Either graph holds every fact of the tenant: the facts' own, or the
        # graph of the tenant's group, which the read names too.
        assert _graphs_walked(plan) in (["memory_fact_hnsw"], [graph_group_name(_graph_group(caller.tenant_id))]), plan


def test_tenants_sharing_a_graph_group_each_find_only_their_own_memories(caller):
    """Two tenants hashed to the same group share its graph: the walk passes
    the other tenant's nearer memories and still returns the caller's own,
    never the other's."""
    other = make_identity("graph-same", "member").caller
    while _graph_group(other.tenant_id) != _graph_group(caller.tenant_id):
        other = make_identity(f"graph-same-{uuid.uuid4().hex[:6]}", "member").caller
    store(caller, "zeppelin hangar door")
    store(other, "zeppelin hangar roof", "zeppelin hangar roof tiles", "zeppelin roof")
    [vector] = WordHashEmbedder().embed(["zeppelin hangar roof"])
    flt = RetrievalFilter(kinds=["episode"], now=timezone.now())
    hits = channel_hits(caller=caller, flt=flt, query_text=None, query_vector=vector, params=RetrievalParams(k_vec=5))
    assert [m.content for m in Memory.objects.filter(pk__in=hits)] == ["zeppelin hangar door"]
    assert _graphs_walked(_vector_read_plan(caller, flt, vector, k_vec=5)) == [
        graph_group_name(_graph_group(caller.tenant_id))
    ]


def test_nearest_neighbour_reads_of_episodes_walk_the_tenants_group_graph(caller):
    """The ORM read by distance of an episode (similar memories) names its
    tenant's graph group, so it walks that group's graph instead of sorting
    every episode of the tenant."""
    store(caller, "zeppelin hangar roof", "zeppelin hangar door")
    memory = Memory.objects.filter(tenant_id=caller.tenant_id, content__endswith="roof").get()
    assert memory.embedding is not None
    plan = _plan_of_the_nearest_read(lambda: memory_similar(caller=caller, memory=memory, threshold=0.0))
    assert _graphs_walked(plan) == [graph_group_name(_graph_group(caller.tenant_id))], plan


class _VersionCursor:
    def __init__(self, version: str | None) -> None:
        self.version = version

    def __enter__(self):  # type: ignore[no-untyped-def]
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, sql: str) -> None:
        assert "pg_extension" in sql

    def fetchone(self):  # type: ignore[no-untyped-def]
        return None if self.version is None else (self.version,)


@pytest.mark.parametrize(
    ("version", "refused"), [("0.8.6", False), ("0.7.0", False), ("0.6.2", True), ("0.5.1", True), (None, True)]
)
def test_the_half_precision_migration_names_the_pgvector_it_needs(version, refused):
    """Migration 0034 refuses, saying why, on a server whose pgvector predates
    halfvec, instead of failing on the index DDL with 'type "halfvec" does not exist'."""
    migration = importlib.import_module("memory.migrations.0034_hnsw_half_precision")
    editor = SimpleNamespace(connection=SimpleNamespace(cursor=lambda: _VersionCursor(version)))
    if refused:
        with pytest.raises(RuntimeError, match=r"pgvector >= 0\.7.*ALTER EXTENSION vector UPDATE"):
            migration.require_halfvec(None, editor)
    else:
        migration.require_halfvec(None, editor)


EDITOR_MEMORIES = [
    "Alice prefers the Helix editor over Vim for Rust work",
    "The editor crashed when Bob opened a 2 GB log file",
    "Carol works as an editor at the city newspaper",
    "The deployment pipeline runs every Friday at noon",
    "Our cat Miso sleeps on the radiator all winter",
    "Quarterly taxes are due on the fifteenth of April",
    "Dana is allergic to peanuts and shellfish",
    "The team lunch moved to the Thai place on Main Street",
    "Eve's flight to Lisbon leaves at 7:40 on Tuesday",
    "The staging database uses PostgreSQL 16 with pgvector",
    "Frank runs a half marathon every October",
    "The office plants need watering twice a week",
]


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_a_search_returns_only_memories_that_match_the_query(caller, mode):
    """The vector channel returns its k nearest memories however unrelated; a
    hit needs a keyword match or a similarity at or above the model's floor."""
    store(caller, *EDITOR_MEMORIES)
    found = memory_search(caller=caller, query=SearchQuery("editor", mode=mode, limit=20))
    assert sorted(h.memory.content for h in found) == sorted(EDITOR_MEMORIES[:3])
    assert all(h.score > 0 for h in found)
    assert memory_search(caller=caller, query=SearchQuery("submarine", mode=mode)) == []


def test_the_evidence_floor_is_the_configured_models(settings, caller):
    """resolve() takes the floor of the configured model (its variants share
    it); a model without a measured floor only drops similarities at or below 0."""
    assert RetrievalParams.resolve().vector_floor == scoring.VECTOR_FLOORS["all-MiniLM-L6-v2"]
    assert scoring.vector_floor_for("all-MiniLM-L6-v2+int8+ctx1") == scoring.VECTOR_FLOORS["all-MiniLM-L6-v2"]
    settings.MEMPROJ = {**settings.MEMPROJ, "EMBEDDING_MODEL": "someone-elses-model"}
    assert RetrievalParams.resolve().vector_floor == 0.0
    with pytest.raises(ValueError):
        RetrievalParams(vector_floor=1.5)
    # The floor is what channel_hits keeps: everything with a lower similarity goes.
    store(caller, *EDITOR_MEMORIES)
    [vector] = WordHashEmbedder().embed(["editor"])
    flt = RetrievalFilter(kinds=["episode"], now=timezone.now())
    open_floor = channel_hits(
        caller=caller, flt=flt, query_text=None, query_vector=vector, params=RetrievalParams(vector_floor=-1.0)
    )
    floored = channel_hits(
        caller=caller, flt=flt, query_text=None, query_vector=vector, params=RetrievalParams(vector_floor=0.3)
    )
    assert set(floored) == {pk for pk, hit in open_floor.items() if (hit.vector_similarity or 0) >= 0.3}
    assert 0 < len(floored) < len(EDITOR_MEMORIES)


HIKING_SESSION = [
    "Frank said, please recommend a hiking spot near the city.",
    "AI companion said, try the Xiangshan trail, a fine hiking day out",
    "Frank said, thanks, and what should I cook tonight?",
    "AI companion said, hiking boots need breaking in before a long walk",
]


def test_hybrid_search_raises_the_hits_next_to_its_top_hit_in_the_same_session(caller):
    """The reply holds the answer, the request matches the question: a hit
    that is the previous or next turn of the top hit's session scores at
    least decay x the top hit's score. Hits further away, in another session,
    and turns next to it that match nothing are not raised; keyword and
    semantic searches rank by their channel alone."""
    request, reply, after, later = (
        episode_store(caller=caller, content=text, butler="general", session_id="day-1") for text in HIKING_SESSION
    )
    other = episode_store(
        caller=caller, content="AI companion said, hiking in the rain", butler="g", session_id="day-2"
    )
    query = "recommend a hiking spot"
    decay = RetrievalParams().context_decay
    found = {h.memory.id: h for h in memory_search(caller=caller, query=SearchQuery(query))}
    assert max(found, key=lambda pk: found[pk].score) == request.id
    assert found[reply.id].hit.context_of == (request.id,)
    assert found[reply.id].score == pytest.approx(decay * found[request.id].score)
    assert after.id not in found  # next to the reply, matches nothing: no evidence, no result
    assert not found[later.id].hit.context_of and not found[other.id].hit.context_of
    assert found[later.id].score < found[reply.id].score
    off = {
        h.memory.id: h
        for h in memory_search(
            caller=caller, query=SearchQuery(query, params=RetrievalParams.resolve({"context_top": 0}))
        )
    }
    assert off[reply.id].score < found[reply.id].score and not off[reply.id].hit.context_of
    for mode in ("keyword", "semantic"):
        alone = memory_search(caller=caller, query=SearchQuery(query, mode=mode))
        assert not any(h.hit.context_of for h in alone)


CUISINE_SESSION = [
    "Lucy said, I have been learning to cook lately",
    "AI companion said, cooking is fun. What kind of cuisine do you like?",
    "Lucy said, Sichuan and Cantonese food, the spicier the better",
    "AI companion said, then try a classic Sichuan menu",
]


def test_the_answer_to_a_question_that_is_the_top_hit_takes_its_place(caller):
    """A turn that asks what the query asks ("What kind of cuisine do you
    like?") matches it best, but the next turn of its session holds the answer:
    when that turn is a hit, it takes the question's score and the question
    keeps ``question_yield`` of it. A top hit that asks nothing raises its
    neighbours as before; off (``question_yield`` 0), the question stays first."""
    before, question, answer, after = (
        episode_store(caller=caller, content=text, butler="general", session_id="day-1") for text in CUISINE_SESSION
    )
    query = "What kind of cuisine does Lucy like?"

    def scores(**overrides: object) -> dict:
        params = RetrievalParams.resolve(overrides)
        return {h.memory.id: h for h in memory_search(caller=caller, query=SearchQuery(query, params=params))}

    off = scores(question_yield=0.0)
    assert max(off, key=lambda pk: off[pk].score) == question.id
    assert answer.id in off and off[answer.id].score < off[question.id].score
    assert off[answer.id].hit.answers == (question.id,)
    assert before.id not in off or not off[before.id].hit.answers  # the turn before answers nothing

    yield_ = RetrievalParams().question_yield
    assert 0 < yield_ < 1
    found = scores()
    ranked = sorted(found, key=lambda pk: -found[pk].score)
    assert ranked[:2] == [answer.id, question.id]
    assert found[answer.id].score == pytest.approx(off[question.id].score)
    assert found[question.id].score == pytest.approx(yield_ * off[question.id].score)
    for mode in ("keyword", "semantic"):
        alone = memory_search(caller=caller, query=SearchQuery(query, mode=mode))
        assert not any(h.hit.answers for h in alone)


def test_a_long_turn_that_ends_by_asking_keeps_its_place(caller):
    """A long turn that ends by asking also tells ("I am planning ... what
    would you recommend?"): past a short turn's length it is no question
    answered by the next turn, and ranks by its own score."""
    plans = "Lucy said, I am planning a dinner for my parents next week. " * 6
    assert len(plans) > retrieval.SHORT_TURN_CHARS
    question = episode_store(
        caller=caller, content=plans + "What kind of cuisine do you like?", butler="general", session_id="day-1"
    )
    reply = episode_store(caller=caller, content=CUISINE_SESSION[2], butler="general", session_id="day-1")
    found = {
        h.memory.id: h for h in memory_search(caller=caller, query=SearchQuery("What kind of cuisine does Lucy like?"))
    }
    assert max(found, key=lambda pk: found[pk].score) == question.id
    assert found[reply.id].hit.context_of == (question.id,) and not found[reply.id].hit.answers


def test_a_question_whose_next_turn_matches_nothing_keeps_its_place(caller, settings):
    """The answer must be a hit of its own (evidence in a channel): a question
    followed by a turn that matches nothing stays the first result."""
    # Turns embedded as they are: with the question in its text, the next
    # turn would match the query through it.
    settings.MEMPROJ = {**settings.MEMPROJ, "EMBED_TEXT": "plain"}
    question = episode_store(
        caller=caller, content="Frank said, which hiking spot do you recommend?", butler="g", session_id="d"
    )
    episode_store(caller=caller, content="AI companion said, zeppelin hangar roof", butler="g", session_id="d")
    episode_store(caller=caller, content="Frank said, I recommend the lake trail", butler="g", session_id="other")
    found = memory_search(caller=caller, query=SearchQuery("recommend a hiking spot"))
    assert found[0].memory.id == question.id
    assert not any(h.hit.answers for h in found)


def test_a_turn_the_reader_may_not_see_does_not_change_which_hits_are_neighbours(caller):
    """Neighbours are found under the read's own filter: a secret turn between
    the request and its reply (a class this caller may not read) leaves the
    reply the request's next turn, so the ranking a reader sees does not
    depend on, and cannot reveal, a memory hidden from them."""
    request = episode_store(caller=caller, content=HIKING_SESSION[0], butler="general", session_id="day-1")
    hidden = episode_store(caller=caller, content="Frank said, my PIN is 4711", butler="general", session_id="day-1")
    Memory.objects.filter(pk=hidden.pk).update(boundary_class="secret")
    reply = episode_store(caller=caller, content=HIKING_SESSION[1], butler="general", session_id="day-1")
    found = {h.memory.id: h for h in memory_search(caller=caller, query=SearchQuery("recommend a hiking spot"))}
    assert hidden.id not in found
    assert max(found, key=lambda pk: found[pk].score) == request.id
    assert found[reply.id].hit.context_of == (request.id,)


def neighbour_statements(queries) -> int:  # type: ignore[no-untyped-def]
    return sum("FROM memory_memory p" in q["sql"] for q in queries)


def test_the_neighbour_statement_is_sent_only_when_a_top_hit_shares_its_session_with_another_hit(caller, settings):
    """A neighbour is raised only when it is a hit in the top hit's session:
    with no such hit the pass has nothing to raise and sends no statement; with
    one (even a hit of the keyword channel alone) it sends it."""
    # Turns embedded as they are: with the previous turn in its text, the
    # unrelated turn below would match the query through it.
    settings.MEMPROJ = {**settings.MEMPROJ, "EMBED_TEXT": "plain"}
    request = episode_store(caller=caller, content=HIKING_SESSION[0], butler="general")  # no session
    episode_store(caller=caller, content=HIKING_SESSION[1], butler="general")
    query = SearchQuery("recommend a hiking spot")
    with CaptureQueriesContext(connection) as queries:
        found = memory_search(caller=caller, query=query)
    assert found[0].memory.id == request.id and neighbour_statements(queries) == 0
    Memory.objects.filter(pk=request.pk).update(session_id="day-1")  # a session of its own
    with CaptureQueriesContext(connection) as queries:
        memory_search(caller=caller, query=query)
    assert neighbour_statements(queries) == 0
    weather = episode_store(
        caller=caller, content="Frank said, the weather is fine", butler="general", session_id="day-1"
    )
    with CaptureQueriesContext(connection) as queries:
        memory_search(caller=caller, query=query)
    assert neighbour_statements(queries) == 0  # in the session, but no hit: matches neither channel
    weather.delete()
    reply = episode_store(caller=caller, content="AI companion said, spot on", butler="general", session_id="day-1")
    with CaptureQueriesContext(connection) as queries:
        found = memory_search(caller=caller, query=query)
    assert neighbour_statements(queries) == 1
    assert {h.memory.id: h for h in found}[reply.id].hit.context_of == (request.id,)


def test_skipping_the_neighbour_statement_changes_no_ranking(caller, monkeypatch):
    """Conversations with turns in shared sessions, in sessions of their own
    and in none, and facts: every search ranks, scores and raises exactly as
    when every top hit's neighbours are looked up."""
    import random

    rng = random.Random(7)
    vocabulary = "hiking trail boots rain lake bread crew roof hangar zeppelin garden budget coffee train"
    words = vocabulary.split()
    sessions = ["", "", "s1", "s2", "s3", "solo-a", "solo-b"]
    for index in range(60):
        session = rng.choice(sessions)
        if session.startswith("solo"):
            session = f"{session}-{index}"
        text = " ".join(rng.sample(words, 4))
        if index % 7 == 0:
            fact_store(caller=caller, subject="user", predicate=f"p{index}", content=text)
        else:
            episode_store(caller=caller, content=text, butler="general", session_id=session)
    queries = [" ".join(rng.sample(words, rng.randint(1, 3))) for _ in range(40)]

    # A hit next to two top hits is raised by both, and their order in
    # context_of is the order of the neighbour statement's rows, which has no
    # ORDER BY: a plan change between the two searches (an ANALYZE, or another
    # number of parents) may swap them. Only which hits raised it counts
    # (scoring.with_context takes the best of them), so they compare as a set.
    def ranked(query: str) -> list[tuple]:
        return [
            (h.memory.id, round(h.score, 12), frozenset(h.hit.context_of))
            for h in memory_search(
                caller=caller, query=SearchQuery(query, params=RetrievalParams.resolve({"context_top": 3}))
            )
        ]

    # Each query is asked both ways back to back: between two passes over all
    # queries an autovacuum ANALYZE may switch the vector statement's plan.
    skipped, looked_up = [], []
    for query in queries:
        skipped.append(ranked(query))
        with monkeypatch.context() as every_top_hit:
            every_top_hit.setattr(
                retrieval, "neighbour_parents", lambda hits, sessions, params: retrieval.top_hits(hits, params)
            )
            looked_up.append(ranked(query))
    assert looked_up == skipped
    raised = sum(bool(context) for ranking in skipped for _, _, context in ranking)
    assert raised > 0  # the sets exercise the pass


def test_neighbour_parents_fuse_only_when_two_hits_share_a_session(monkeypatch):
    # Ids in the order of their text (fact < next < top), as ties are broken by it.
    fact, next_, top = (uuid.UUID(int=n) for n in (1, 2, 3))
    hits = {
        top: ChannelHit(vector_similarity=0.9, vector_rank=1, text_rank_value=3.0, text_rank=1),
        next_: ChannelHit(text_rank_value=0.1, text_rank=3),
        fact: ChannelHit(vector_similarity=0.5, vector_rank=2),
    }
    params = RetrievalParams()
    assert retrieval.neighbour_parents(hits, {top: "s1", next_: "s1"}, params) == [top]
    assert retrieval.neighbour_parents(hits, {top: "s1", next_: "s2"}, params) == []
    assert retrieval.neighbour_parents(hits, {next_: "s1", fact: "s1"}, params) == []  # the top hit has none
    monkeypatch.setattr(retrieval, "fuse_all", lambda *_: pytest.fail("fused with no two hits in one session"))
    assert retrieval.neighbour_parents(hits, {top: "s1", next_: "s2"}, params) == []
    assert retrieval.neighbour_parents(hits, {}, params) == []


def test_a_neighbouring_turn_keeps_its_own_score_when_that_is_higher():
    hits = {
        "top": ChannelHit(vector_similarity=0.9, vector_rank=1, text_rank_value=3.0, text_rank=1),
        "next": ChannelHit(text_rank_value=0.1, text_rank=3, context_of=("top",)),
        "own": ChannelHit(vector_similarity=0.88, vector_rank=2, text_rank_value=2.9, text_rank=2, context_of=("top",)),
    }
    fused = scoring._fuse(hits, RetrievalParams())
    out = scoring.with_context(fused, hits, 0.8)
    assert out["next"] == pytest.approx(0.8 * fused["top"]) and fused["next"] < out["next"]
    assert out["own"] == fused["own"] > 0.8 * fused["top"]
    assert scoring.with_context(fused, hits, 0.0) == fused
    asked = {**hits, "next": replace(hits["next"], answers=("top",))}
    answered = scoring.with_context(fused, asked, 0.8, 0.5)
    assert answered["next"] == fused["top"] and answered["top"] == pytest.approx(0.5 * fused["top"])
    assert answered["own"] == out["own"]
    assert scoring.with_context(fused, asked, 0.8, 0.0) == out
    with pytest.raises(ValueError):
        RetrievalParams(question_yield=1.5)
    with pytest.raises(ValueError):
        RetrievalParams(context_top=-1)
    with pytest.raises(ValueError):
        RetrievalParams(context_decay=1.5)


DEPLOY_KEYS = [f"Deploy key k{key} was rotated on 2026-11-{day:02d}" for key in range(6) for day in (2, 9, 16, 23)]


def test_a_keyword_hit_the_vector_walk_missed_gets_its_similarity_and_is_found(caller, monkeypatch):
    """An HNSW walk among near-identical memories can miss one, even the query's
    own text (seen under 32 concurrent writers). The missed walk is simulated by
    dropping that row from the vector channel's rows: the keyword channel still
    ranks it first, and its exact similarity, looked up by id, puts it first in
    hybrid too, as an exact vector search would have. The question is embedded
    as asked (every word of it is in most of these memories but the key's)."""
    store(caller, *DEPLOY_KEYS)
    as_asked = RetrievalParams.resolve({"vector_query_common_share": 0.0})
    query = DEPLOY_KEYS[9]  # "Deploy key k2 was rotated on 2026-11-09"
    [target] = Memory.objects.filter(tenant_id=caller.tenant_id, content=query).values_list("pk", flat=True)
    channel_rows = retrieval._channel_rows

    def walk_missing_target(sql: str, params_sql: dict, *, run_vec: bool) -> list[tuple]:
        return [row for row in channel_rows(sql, params_sql, run_vec=run_vec) if row[1] != target]

    monkeypatch.setattr(retrieval, "_channel_rows", walk_missing_target)
    found = memory_search(caller=caller, query=SearchQuery(query, limit=3, params=as_asked))
    assert found[0].memory.content == query
    assert found[0].hit.vector_similarity == pytest.approx(1.0, abs=1e-3) and found[0].hit.text_rank == 1
    # Without the look-up, a keyword match alone: its near-duplicates in both channels come first.
    monkeypatch.setattr(retrieval, "vector_rows_missed", lambda *args: [])
    without = memory_search(caller=caller, query=SearchQuery(query, limit=3, params=as_asked))
    assert query not in [h.memory.content for h in without]


def test_an_exact_walk_leaves_the_vector_look_up_nothing_to_add(caller, monkeypatch):
    """The look-up adds only keyword hits at least as similar as the walk's
    last one: when the walk missed nothing, none qualifies, and every hit is
    what it was. The walk is made exact (no index scan): a graph walk in a test
    database that holds the rolled-back rows of earlier tests may miss a live
    row, which is the case the look-up is for, not this one."""
    store(caller, *DEPLOY_KEYS, *CHANNEL_TEXTS)
    with connection.cursor() as cursor:
        cursor.execute("SET enable_indexscan = off")
    added = []
    missed = retrieval.vector_rows_missed

    def record(*args) -> list[tuple]:
        rows = missed(*args)
        added.extend(rows)
        return rows

    monkeypatch.setattr(retrieval, "vector_rows_missed", record)
    try:
        for query in (DEPLOY_KEYS[0], DEPLOY_KEYS[17], "zeppelin hangar roof", "rotated keys"):
            memory_search(caller=caller, query=SearchQuery(query, limit=10))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET enable_indexscan")
    assert added == []


def _without_vector(memories: Sequence[Memory]) -> None:
    """As a write during an embedder outage leaves a memory: no vector, pending."""
    Memory.objects.filter(pk__in=[m.pk for m in memories]).update(
        embedding=None, embedding_status=EmbeddingStatus.PENDING
    )


@pytest.mark.parametrize("fusion", scoring.FUSIONS)
def test_a_memory_whose_vector_is_pending_is_found_by_its_own_text_among_near_duplicates(caller, fusion):
    """The fault runs' writes: rules that share every word but a marker, some
    written while the embedder was away. A pending rule matches its own text
    only in the keyword channel, where it is first (its marker is rare); every
    other rule shares its remaining words and carries both channels. Weighed
    as the vector channel's miss, it fell below ten of them; weighed by its
    keyword match, it comes first."""
    params = RetrievalParams.resolve({"fusion": fusion})
    markers = [f"w{n}q{n * 7919 % 1000}" for n in range(40)]
    rules = [rule_store(caller=caller, content=f"Always mention {marker} before sending") for marker in markers]
    facts = [
        fact_store(caller=caller, subject=marker, predicate="status", content=f"{marker} is tracked").memory
        for marker in markers
    ]
    pending = rules[::7] + facts[3::7]
    _without_vector(pending)
    for memory in pending:
        found = memory_search(caller=caller, query=SearchQuery(memory.content, limit=10, params=params))
        assert found[0].memory.content == memory.content, (memory.content, [h.memory.content for h in found])
        assert found[0].hit.vector_pending and found[0].hit.vector_similarity is None
    # The rest are found as before, by both channels.
    embedded = rules[1]
    found = memory_search(caller=caller, query=SearchQuery(embedded.content, limit=10, params=params))
    assert found[0].memory.content == embedded.content and not found[0].hit.vector_pending


def test_a_pending_memorys_keyword_match_is_its_weight_in_the_vector_channel_too():
    """What every blend of the channels takes as a pending hit's inputs: its
    keyword channel's value in both, so a fusion scores it by its keyword match."""
    hits = {
        "both": ChannelHit(vector_similarity=0.9, vector_rank=1, text_rank_value=2.0, text_rank=2),
        "pending": ChannelHit(text_rank_value=4.0, text_rank=1, vector_pending=True),
        "missed": ChannelHit(text_rank_value=4.0, text_rank=1),
    }
    spread = scoring.spread_channels(hits, "minmax", (48, 48))
    assert spread["pending"] == (1.0, 1.0) and spread["missed"] == (0.0, 1.0)
    normalised = scoring.normalised_channels(hits)
    assert normalised["pending"] == (1.0, 1.0) and normalised["missed"] == (0.0, 1.0)
    assert scoring.fuse_rrf(hits["pending"]) == pytest.approx(1.0)
    assert scoring.fuse_rrf(hits["missed"]) == pytest.approx(0.5)


def test_memories_tied_on_score_and_time_come_in_the_order_of_their_ids_text():
    """The butlers memory module's order: score DESC, created_at DESC, id ASC as
    text. Ids drawn so that their text and their first bytes disagree in sign
    (a signed comparison of the number would put the 0x8... ids first)."""
    caller = make_identity("tie-order", "p").caller
    stored = [episode_store(caller=caller, content=f"zebracrossing note{n}", butler="general") for n in range(8)]
    ids = [uuid.UUID(int=(n << 124) | (0xABC + n)) for n in (9, 1, 15, 3, 8, 0, 12, 7)]
    at = timezone.now()
    for memory, new_id in zip(stored, ids, strict=True):
        Memory.objects.filter(pk=memory.pk).update(id=new_id, created_at=at)
    found = memory_search(caller=caller, query=SearchQuery(text="zebracrossing", mode="keyword", limit=8))
    assert len({round(item.score, 12) for item in found}) == 1  # one score: the tie-break decides
    assert [item.memory.id for item in found] == sorted(ids, key=str)
