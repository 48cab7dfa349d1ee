"""A read's use tags: concrete tags only, each matched whole."""

from __future__ import annotations

import pytest

from policy.boundary import use_tags_validate
from policy.errors import InvalidUseTag


@pytest.mark.parametrize("tag", ["answer:task\n", "answer:task\r\n", "*", "tool:*", "BAD TAG", ""])
def test_a_use_tag_that_is_not_one_concrete_tag_is_refused(tag):
    # A regular expression's $ also matches before a final newline:
    # 'answer:task\n' passed and was then matched as 'answer:task' by prefix.
    with pytest.raises(InvalidUseTag, match="is not valid"):
        use_tags_validate([tag])


def test_concrete_tags_pass_as_given():
    assert use_tags_validate(["answer:task", "tool:contact-lookup"]) == ("answer:task", "tool:contact-lookup")
