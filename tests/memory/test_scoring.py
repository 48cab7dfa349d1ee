from datetime import UTC, datetime, timedelta

import pytest

from memory import scoring

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_fact_state_schedule_predicts_each_crossing():
    # volatile: 1.0 * exp(-0.03 * d) crosses 0.5 at d = ln(2)/0.03 = 23.1 days, 0.1 at ln(10)/0.03 = 76.8
    state, at = scoring.fact_state_schedule(confidence=1.0, decay_rate=0.03, confirmed_at=T0, now=T0)
    assert state == "active" and at is not None
    assert (at - T0).total_seconds() / 86400 == pytest.approx(23.105, abs=1e-3)
    just_after = at + timedelta(seconds=1)
    assert scoring.fact_state(scoring.effective_confidence(1.0, 0.03, T0, just_after)) == "fading"
    state, at2 = scoring.fact_state_schedule(confidence=1.0, decay_rate=0.03, confirmed_at=T0, now=just_after)
    assert at2 is not None
    assert state == "fading" and (at2 - T0).total_seconds() / 86400 == pytest.approx(76.753, abs=1e-3)
    state, at3 = scoring.fact_state_schedule(
        confidence=1.0, decay_rate=0.03, confirmed_at=T0, now=at2 + timedelta(seconds=1)
    )
    assert (state, at3) == ("expired", None)


def test_fact_state_schedule_never_changes_without_decay_and_is_never_in_the_past():
    assert scoring.fact_state_schedule(confidence=0.9, decay_rate=0.0, confirmed_at=T0, now=T0) == ("active", None)
    late = T0 + timedelta(days=400)
    # A fact found long after its crossing (a sweep that did not run) is due just after now, not in the past.
    state, at = scoring.fact_state_schedule(confidence=1.0, decay_rate=0.0001, confirmed_at=T0, now=late)
    assert state == "active" and at is not None and at > late


def test_rule_effectiveness_and_maturity_steps():
    assert scoring.rule_effectiveness(5, 0) == pytest.approx(5 / 5.01)
    assert scoring.rule_effectiveness(0, 0) == 0.0
    assert scoring.rule_maturity(maturity="candidate", success=5, harmful=0, age_days=1) == "established"
    assert scoring.rule_maturity(maturity="established", success=15, harmful=0, age_days=10) == "established"
    assert scoring.rule_maturity(maturity="established", success=15, harmful=0, age_days=30) == "proven"
    assert scoring.rule_maturity(maturity="proven", success=15, harmful=2, age_days=40) == "established"
    assert scoring.rule_maturity(maturity="candidate", success=1, harmful=3, age_days=1) == "anti_pattern"


def test_a_hit_needs_a_keyword_match_or_a_similarity_at_the_floor():
    ChannelHit, has_evidence, with_evidence = scoring.ChannelHit, scoring.has_evidence, scoring.with_evidence
    keyword_only = ChannelHit(text_rank_value=0.4, text_rank=1)
    weak_vector_and_keyword = ChannelHit(vector_similarity=0.05, vector_rank=9, text_rank_value=0.2, text_rank=2)
    strong_vector = ChannelHit(vector_similarity=0.45, vector_rank=1)
    weak_vector = ChannelHit(vector_similarity=0.12, vector_rank=2)
    opposite = ChannelHit(vector_similarity=-0.2, vector_rank=3)
    assert has_evidence(keyword_only, 0.2) and has_evidence(weak_vector_and_keyword, 0.2)
    assert has_evidence(strong_vector, 0.2) and not has_evidence(weak_vector, 0.2)
    assert has_evidence(weak_vector, 0.12)  # at the floor counts
    assert not has_evidence(opposite, -1.0)  # no shared direction is never evidence
    assert not has_evidence(ChannelHit(), 0.0)
    hits = {"k": keyword_only, "s": strong_vector, "w": weak_vector}
    assert set(with_evidence(hits, 0.2)) == {"k", "s"}
