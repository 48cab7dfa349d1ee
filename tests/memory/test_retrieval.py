"""The retrieval engine: CJK text in the keyword channel, the tenant's term
statistics and BM25, the candidate bound, fusion and per-call parameters."""

from __future__ import annotations

import hashlib
import math

import pytest
from django.db import connection

from memory import scoring
from memory.embeddings import set_embedder
from memory.models import Memory
from memory.scoring import ChannelHit, RetrievalParams
from memory.selectors.memories import memory_search
from memory.services.memories import episode_store
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


@pytest.fixture
def caller():
    return make_identity("tenant-a", "member").caller


def store(caller, *texts: str) -> list[Memory]:
    return [episode_store(caller=caller, content=t, butler="general") for t in texts]


def keyword(caller, query: str, **kw) -> list[str]:
    return [h.memory.content for h in memory_search(caller=caller, query=query, mode="keyword", **kw)]


def test_japanese_seed_examples_are_found_by_keyword(caller):
    store(caller, *SEED_JA, "請求書の送付ルール", "The billing API naming rules", "Stripeの返金フロー")
    assert keyword(caller, "命名規約")[0] == SEED_JA[0]
    assert keyword(caller, "解約API")[0] == SEED_JA[0]
    assert keyword(caller, "解約APIの命名規約")[0] == SEED_JA[0]
    assert keyword(caller, "ドリフトを許容")[0] == SEED_JA[1]
    assert keyword(caller, "webhook 10分")[0] == SEED_JA[1]
    # Hybrid (every dialect's default) finds them too.
    hybrid = memory_search(caller=caller, query="命名規約", mode="hybrid")
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
    hits = memory_search(caller=caller, query="meeting meeting kangaroo", mode="keyword", params=params)
    assert hits[0].memory.id == rare.id
    assert all(0.0 <= h.score <= 1.0 for h in hits)


def test_keyword_candidates_are_bounded_rarest_terms_first(caller):
    store(caller, *[f"status update {i}" for i in range(30)])
    target = store(caller, "status update about the zeppelin")[0]
    params = RetrievalParams.resolve({"txt_candidates": 5, "keyword_scorer": "bm25"})
    hits = memory_search(caller=caller, query="status zeppelin", mode="keyword", params=params)
    # Only the rarest term's matches fit the budget: the zeppelin memory, ranked first.
    assert [h.memory.id for h in hits] == [target.id]
    # A single frequent term still returns something, at most the budget.
    assert 1 <= len(memory_search(caller=caller, query="status", mode="keyword", params=params)) <= 5


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
        assert max(fused, key=fused.get) == "both"
    norm = scoring.fuse_all(hits, RetrievalParams(fusion="norm", alpha=0.5))
    assert norm["both"] == pytest.approx(1.0)
    assert norm["txt"] == pytest.approx(0.5 * 3.0 / 7.5)


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
