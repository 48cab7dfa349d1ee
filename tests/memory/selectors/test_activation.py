"""pce-memory v0.14.0 activation ranking: S = alpha * S_vec + (1 - alpha) * S_text with each
channel normalised to [0, 1] over the query's best hit, then g."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import Memory
from memory.scoring import ChannelHit
from memory.selectors import activation
from memory.selectors.activation import claims_rank
from memory.services.claims import claim_upsert
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db

AT = {"at": "2026-11-01T00:00:00Z"}
TEXTS = [
    "Cancel the API subscription before the renewal date",
    "The API gateway rejects requests without a bearer token",
    "Lunch on Fridays is pizza with the whole team",
]


@pytest.fixture
def caller():
    caller = make_identity("tenant-a", "member").caller
    for text in TEXTS:
        claim_upsert(caller=caller, text=text, provenance=AT)
    return caller


def test_each_channel_is_normalised_to_its_best_hit(caller):
    ranked = claims_rank(caller=caller, query="cancel the API subscription")
    scores = {r.memory.content: r.breakdown for r in ranked}
    best = scores[TEXTS[0]]
    # The claim holding every query word is the best of both channels: 1 in each, whatever
    # the raw cosine or BM25 value, so the combined score spans [0, 1] as the seed asks.
    assert best.vector == pytest.approx(1.0) and best.text == pytest.approx(1.0)
    assert best.combined == pytest.approx(1.0)
    assert ranked[0].memory.content == TEXTS[0]
    partial = scores[TEXTS[1]]  # shares only "API"
    assert 0.0 < partial.text < 1.0
    alpha = caller.policy.retrieval.alpha
    for breakdown in scores.values():
        assert breakdown.combined == pytest.approx(alpha * breakdown.vector + (1 - alpha) * breakdown.text)
        assert 0.0 <= breakdown.vector <= 1.0 and 0.0 <= breakdown.text <= 1.0
    # Without a keyword match a claim keeps only its normalised vector term (the policy's
    # threshold drops it when that is weak).
    lunch = scores.get(TEXTS[2])
    assert lunch is None or lunch.text == 0.0


def test_a_query_without_keyword_matches_ranks_by_the_vector_channel_alone(caller):
    ranked = claims_rank(caller=caller, query="zzqx")
    assert all(r.breakdown.text == 0.0 for r in ranked)
    if ranked:
        assert max(r.breakdown.vector for r in ranked) == pytest.approx(1.0)


def test_a_memory_the_read_may_not_see_does_not_set_the_scale(caller, monkeypatch):
    hidden = claim_upsert(
        caller=caller, text="Cancel the API subscription: secret steps", provenance=AT, boundary_class="secret"
    ).memory
    real = activation.channel_search

    def with_hidden_best(**kwargs):
        # As if a channel had returned it, with its columns: the read's boundary drops it.
        hits, columns = real(**kwargs)
        hits[hidden.id] = ChannelHit(vector_similarity=1.0, vector_rank=1, text_rank_value=99.0, text_rank=1)
        columns[hidden.id] = tuple(None if c == "claim_kind" else getattr(hidden, c) for c in kwargs["columns"])
        return hits, columns

    monkeypatch.setattr(activation, "channel_search", with_hidden_best)
    ranked = claims_rank(caller=caller, query="cancel the API subscription")
    assert hidden.id not in {r.memory.id for r in ranked}
    assert ranked[0].breakdown.vector == pytest.approx(1.0) and ranked[0].breakdown.text == pytest.approx(1.0)


@pytest.mark.parametrize("stored", ["banana", 7, {"kind": "task"}, ""])
def test_a_claim_kind_outside_the_four_ranks_as_its_core_kind(caller, stored):
    """Another dialect's metadata (a LangGraph item's attributes) may carry any
    claim_kind: only fact / preference / task / policy_hint set a claim's
    half-life, anything else ranks as its core kind (a fact: 120 days, not
    the 30 of an unknown kind)."""
    Memory.objects.filter(tenant_id=caller.tenant_id).update(created_at=timezone.now() - timedelta(days=60))
    before = {r.memory.content: r.breakdown.recency for r in claims_rank(caller=caller, query="API subscription")}
    claim = Memory.objects.get(tenant_id=caller.tenant_id, content=TEXTS[0])
    Memory.objects.filter(pk=claim.pk).update(metadata={**claim.metadata, "claim_kind": stored})
    after = {r.memory.content: r.breakdown.recency for r in claims_rank(caller=caller, query="API subscription")}
    assert after[TEXTS[0]] == pytest.approx(before[TEXTS[0]])
    assert before[TEXTS[0]] == pytest.approx(0.5 ** (60 / 120), rel=1e-3)
