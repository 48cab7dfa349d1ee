"""The decay sweep and a fact confirmed far in the future (an imported
``last_confirmed_at`` near year 9999, restored in the admin): its next state
change is capped instead of overflowing the calendar, and no single fact can
stop the sweep for the others (every tenant's due facts still change state)."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from memory import scoring
from memory.models import Memory, MemoryEvent
from memory.services import sweeps
from memory.services.memories import fact_store

pytestmark = pytest.mark.django_db

FAR_FUTURE = datetime(9999, 12, 30, tzinfo=UTC)


def fading_transitions(memory_id) -> list[tuple[str, str]]:
    return [
        (e.payload["from"], e.payload["to"])
        for e in MemoryEvent.objects.filter(memory_id=memory_id, event_type="fact_state_changed").order_by("id")
    ]


def due_fact(identity, *, subject: str, confirmed_at: datetime) -> Memory:
    fact = fact_store(
        caller=identity.caller,
        subject=subject,
        predicate="city",
        content=f"{subject} lives in Lisbon",
        permanence="volatile",
    ).memory
    Memory.objects.filter(pk=fact.pk).update(
        last_confirmed_at=confirmed_at, fact_state="active", fact_state_changes_at=timezone.now() - timedelta(minutes=1)
    )
    return fact


def test_a_fact_confirmed_in_year_9999_does_not_stop_the_sweep_for_other_tenants(member, outsider):
    poisoned = due_fact(member, subject="imported", confirmed_at=FAR_FUTURE)
    # volatile: 1.0 * exp(-0.03 * 40) = 0.30 -> fading
    other = due_fact(outsider, subject="tb", confirmed_at=timezone.now() - timedelta(days=40))

    result = sweeps.facts_decay()

    assert result.ids == [other.id]
    assert fading_transitions(other.id) == [("active", "fading")]
    other.refresh_from_db()
    assert other.fact_state == "fading"
    assert other.fact_state_changes_at is not None and other.fact_state_changes_at > timezone.now()
    poisoned.refresh_from_db()
    assert poisoned.fact_state == "active"
    assert poisoned.fact_state_changes_at is not None and poisoned.fact_state_changes_at > timezone.now()
    assert not sweeps.facts_decay().more  # nothing left due: the far-future fact is not picked up again and again


def test_a_fact_whose_schedule_cannot_be_computed_is_set_aside_and_the_rest_go_on(member, outsider, monkeypatch):
    bad = due_fact(member, subject="broken", confirmed_at=timezone.now() - timedelta(days=40))
    good = due_fact(outsider, subject="fine", confirmed_at=timezone.now() - timedelta(days=40))
    schedule = scoring.fact_state_schedule
    bad_confirmed_at = Memory.objects.get(pk=bad.pk).last_confirmed_at

    def failing_for_one(**kwargs):
        if kwargs["confirmed_at"] == bad_confirmed_at:
            raise ValueError("cannot schedule this one")
        return schedule(**kwargs)

    monkeypatch.setattr(scoring, "fact_state_schedule", failing_for_one)
    result = sweeps.facts_decay()

    assert result.ids == [good.id] and result.failed == 1
    assert fading_transitions(good.id) == [("active", "fading")]
    bad.refresh_from_db()
    assert bad.fact_state == "active" and fading_transitions(bad.id) == []
    # Tried again later, not on every run.
    assert bad.fact_state_changes_at is not None and bad.fact_state_changes_at > timezone.now()
    assert not result.more


@pytest.mark.parametrize(
    ("confirmed_at", "decay_rate"),
    [
        (FAR_FUTURE, 0.03),  # past the calendar's end once the days are added
        (datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), 0.1),
        (datetime(2026, 1, 1, tzinfo=UTC), 1e-300),  # more days than a timedelta holds
    ],
)
def test_schedule_caps_at_a_safe_maximum_instead_of_overflowing(confirmed_at, decay_rate):
    now = datetime(2026, 6, 1, tzinfo=UTC)
    state, at = scoring.fact_state_schedule(confidence=1.0, decay_rate=decay_rate, confirmed_at=confirmed_at, now=now)
    assert state == "active"
    assert at == scoring.LATEST_STATE_CHANGE
    # Safe to show in any time zone (the admin converts to local time).
    assert (at + timedelta(days=2)).year == 9999
