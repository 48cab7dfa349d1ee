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
