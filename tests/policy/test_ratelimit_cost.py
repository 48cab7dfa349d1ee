"""A rate-limit check of several calls at once (``cost``, a batch's further
operations), against the real Redis: all or nothing, in both algorithms; a
refused charge counts nothing and says what is left."""

from __future__ import annotations

import uuid

import pytest

from policy.document import RateLimitPolicy
from policy.ratelimit import RateLimiter
from tests.policy.test_ratelimit import _inside_one_fixed_window


@pytest.mark.parametrize("algorithm", ["fixed", "sliding"])
def test_a_charge_of_several_calls_is_counted_all_or_nothing(algorithm):
    limiter = RateLimiter()
    rule = RateLimitPolicy(limit=10, window_seconds=600, algorithm=algorithm)
    bucket = f"test-{uuid.uuid4()}"
    _inside_one_fixed_window(600, margin_seconds=30)
    try:
        one = limiter.hit(bucket, rule)
        five = limiter.charge(bucket, rule, 5)
        too_many = limiter.charge(bucket, rule, 5)
        rest = limiter.charge(bucket, rule, 4)
        over = limiter.hit(bucket, rule)
    finally:
        limiter.close()
    assert [d.allowed for d in (one, five, too_many, rest, over)] == [True, True, False, True, False]
    # The refused charge counted nothing: 4 were left before it and after it.
    assert [one.remaining, five.remaining, too_many.remaining, rest.remaining, over.remaining] == [9, 4, 4, 0, 0]
    assert too_many.headers()[-1][0] == b"retry-after" and 0 < too_many.reset_seconds <= 600


def test_a_sliding_refusal_waits_for_enough_calls_to_leave_the_window():
    """Retry-After of a refused charge is when enough logged calls have left
    the window for it, not when the oldest one does."""
    import time

    limiter = RateLimiter()
    rule = RateLimitPolicy(limit=4, window_seconds=4, algorithm="sliding")
    bucket = f"test-{uuid.uuid4()}"
    try:
        assert limiter.charge(bucket, rule, 2).allowed
        time.sleep(2.2)
        assert limiter.charge(bucket, rule, 2).allowed
        # Full: one call fits once the first two leave (within ~2 s); so do two.
        one = limiter.hit(bucket, rule)
        two = limiter.charge(bucket, rule, 2)
        # Three need the later two to leave as well (~4 s).
        three = limiter.charge(bucket, rule, 3)
        # Never: more than the limit.
        five = limiter.charge(bucket, rule, 5)
    finally:
        limiter.close()
    assert not (one.allowed or two.allowed or three.allowed or five.allowed)
    assert one.reset_seconds == two.reset_seconds and 1 <= one.reset_seconds <= 2
    assert 3 <= three.reset_seconds <= 4
    assert five.reset_seconds == 4


@pytest.mark.parametrize("cost", [0, -1, True, 1.5])
def test_a_charge_counts_at_least_one_call(cost):
    limiter = RateLimiter()
    try:
        with pytest.raises(ValueError):
            limiter.charge(f"test-{uuid.uuid4()}", RateLimitPolicy(limit=3, window_seconds=60, algorithm="fixed"), cost)
    finally:
        limiter.close()
