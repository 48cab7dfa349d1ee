"""Hostile numbers in a policy: an integer YAML resolves but Python cannot turn into
a float (a hex literal of thousands of digits) or print (past the 4,300-digit
conversion limit) is refused with INVALID_POLICY naming its key path, never an
INTERNAL error; a key that is a list or mapping is refused as such."""

from __future__ import annotations

import pytest

from policy.document import parse_yaml
from policy.errors import PolicyInvalid

HUGE = "0x" + "f" * 5000  # about 6,000 decimal digits


def refused(text: str) -> PolicyInvalid:
    with pytest.raises(PolicyInvalid) as info:
        parse_yaml(text)
    assert info.value.code == "INVALID_POLICY"
    assert len(str(info.value)) < 600
    return info.value


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (f"rate_limit: {{limit: {HUGE}}}", "rate_limit.limit"),
        (f"rate_limit: {{window_seconds: -{HUGE}}}", "rate_limit.window_seconds"),
        (f"scopes: {{session: {{max_tokens: {HUGE}}}}}", "scopes.session.max_tokens"),
        (f"scopes: {{session: {{ttl: {HUGE}}}}}", "scopes.session.ttl"),
        (f"retrieval: {{hybrid: {{alpha: {HUGE}}}}}", "retrieval.hybrid.alpha"),
        (f"retrieval: {{rerank: {{recency_half_life_days: {HUGE}}}}}", "retrieval.rerank.recency_half_life_days"),
        (f"quotas: {{max_memories: {HUGE}}}", "quotas.max_memories"),
        (f"boundary_classes: {{public: {{allow: [{HUGE}]}}}}", "boundary_classes.public.allow"),
        (f"boundary_classes: {{public: {{escalation: {HUGE}}}}}", "boundary_classes.public.escalation"),
        (f"boundary: {{scopes: {{session: {{ttl: {HUGE}}}}}}}", "boundary.scopes.session.ttl"),
    ],
)
def test_a_huge_integer_is_refused_with_its_key_path(text, path):
    error = refused(text)
    assert error.problems[0][0] == path
    assert "f" * 50 not in str(error)


def test_a_huge_integer_key_is_refused_with_a_short_path():
    error = refused(f"? {HUGE}\n: 1\n")
    assert "unknown key" in str(error)
    assert len(error.problems[0][0]) < 200


@pytest.mark.parametrize("text", ["? [a, b]\n: 1\n", "? {a: 1}\n: 1\n", "scopes:\n  ? [session]\n  : {ttl: 7d}\n"])
def test_a_list_or_mapping_as_a_key_is_refused_as_such(text):
    error = refused(text)
    assert "number too long" not in str(error)
    assert "key" in str(error)
