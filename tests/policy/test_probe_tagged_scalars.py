"""A scalar with an explicit YAML tag whose text is not of that kind is refused
with INVALID_POLICY at its line: PyYAML's constructors raised KeyError
(``!!bool maybe``, answered as Python's repr ``'maybe'``), AttributeError
(``!!timestamp x``) or IndexError (``!!int ''``), which escaped the policy
parser as an internal error."""

from __future__ import annotations

import pytest

from policy.document import parse_yaml
from policy.errors import PolicyInvalid


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("!!bool maybe", "true or false"),
        ("!!bool ''", "true or false"),
        ("!!timestamp x", "a date"),
        ("!!timestamp '2001-01-01 noon'", "a date"),
        ("!!int ''", "an integer"),
        ("!!int '-'", "an integer"),
        ("!!float ''", "a number"),
        ("2001-02-30", "a date"),
    ],
)
def test_a_tagged_value_of_another_kind_is_refused_at_its_line(value, words):
    with pytest.raises(PolicyInvalid) as info:
        parse_yaml(f"version: '1.0.0'\nrate_limit:\n  limit: {value}\n")
    message = str(info.value)
    assert info.value.code == "INVALID_POLICY"
    assert f"at line 3, column 10: this value cannot be read as {words}" in message, message


def test_a_tagged_value_of_its_kind_is_read():
    document = parse_yaml(
        "version: '1.0.0'\nrate_limit: {limit: !!int '42'}\nretrieval: {rerank: {use_quality: !!bool yes}}"
    )
    assert document.rate_limit.limit == 42 and document.retrieval.use_quality is True
