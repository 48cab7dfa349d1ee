"""A scope's TTL is at least one second. '0.0000001s' passed the "more than 0"
check and became timedelta(0): every memory of the scope expired as it was
stored."""

from __future__ import annotations

import pytest

from policy.document import parse_yaml
from policy.errors import PolicyInvalid


@pytest.mark.parametrize("ttl", ["0.0000001s", "0.5s", "0s", "0.00000001d"])
def test_a_ttl_under_a_second_is_refused(ttl):
    with pytest.raises(PolicyInvalid) as info:
        parse_yaml(f"scopes: {{session: {{ttl: '{ttl}'}}}}")
    error = info.value
    assert error.problems[0][0] == "scopes.session.ttl"
    assert "at least 1 second" in error.problems[0][1]


def test_a_ttl_of_a_second_or_more_is_kept():
    document = parse_yaml("scopes: {session: {ttl: '1s'}, project: {ttl: '1.5m'}}")
    assert document.scopes["session"].ttl is not None and document.scopes["session"].ttl.total_seconds() == 1
    assert document.scopes["project"].ttl is not None and document.scopes["project"].ttl.total_seconds() == 90
