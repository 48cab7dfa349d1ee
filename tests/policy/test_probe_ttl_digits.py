"""A scope's ttl is a duration written in ASCII digits, as a policy's version
is: found over real HTTP (pce.memory.policy.apply), where ``ttl: '١d'``
(ARABIC-INDIC DIGIT ONE) and ``'７d'`` (a fullwidth 7) were taken, float()
reading them as 1 and 7, and kept as written, while ``version: '١.٢'`` was
refused. The same durations in ASCII still parse."""

from __future__ import annotations

from datetime import timedelta

import pytest

from policy.document import parse_yaml
from policy.errors import PolicyInvalid


@pytest.mark.parametrize("ttl", ["١d", "７d", "1.٥d", "7\u2003d", "7\nd"])
def test_a_ttl_in_other_digits_or_spaces_is_refused(ttl):
    with pytest.raises(PolicyInvalid) as caught:
        parse_yaml(f"version: 1\nscopes: {{ session: {{ ttl: {ttl!r} }} }}\n".replace("\\u2003", "\u2003"))
    message = dict(caught.value.problems)["scopes.session.ttl"]
    assert "must be a duration" in message


@pytest.mark.parametrize(
    ("ttl", "expected"), [("1d", timedelta(days=1)), ("7 d", timedelta(days=7)), ("1.5h", timedelta(minutes=90))]
)
def test_ascii_durations_still_parse(ttl, expected):
    doc = parse_yaml(f"version: 1\nscopes: {{ session: {{ ttl: '{ttl}' }} }}\n")
    assert doc.scopes["session"].ttl == expected
