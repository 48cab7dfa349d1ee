"""A refused policy says what is wrong in the policy's own words: the offending
value as YAML read it (text as written, true/false/null, a list by its size),
never Python's repr of it (``'foo'``, ``None``, ``b'hello'``, ``(got list)``,
``1e+07``), and a use tag of a read is quoted as a short excerpt. A duration
that rounds to nothing is refused instead of becoming a zero TTL."""

from __future__ import annotations

import json

import pytest

from policy.boundary import boundary_for, use_tags_validate
from policy.document import DEFAULT_POLICY, parse_yaml
from policy.errors import InvalidUseTag, PolicyInvalid


def refused(text: str) -> PolicyInvalid:
    with pytest.raises(PolicyInvalid) as info:
        parse_yaml(text)
    assert info.value.code == "INVALID_POLICY"
    return info.value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("retrieval: {hybrid: {alpha: 'foo'}}", "retrieval.hybrid.alpha: must be a number (got foo)"),
        ("rate_limit: {algorithm: 'x'}", "rate_limit.algorithm: must be one of fixed, sliding (got x)"),
        ("rate_limit: {limit: 0}", "rate_limit.limit: must be at least 1 and at most 10,000,000 (got 0)"),
        ("rate_limit: {limit: !!binary aGVsbG8=}", "rate_limit.limit: must be an integer (got binary data of 5 bytes)"),
        ("rate_limit: !!set {a, b}", "rate_limit: must be a mapping (got a set of 2 items)"),
        ("scopes: [1, 2]", "scopes: must be a mapping (got a list of 2 items)"),
        ("version: [1]", "version: must be a semver string such as '0.1.3' (got a list of 1 item)"),
        ("version: 2001-01-01", "version: must be a semver string such as '0.1.3' (got the date 2001-01-01)"),
        ("retrieval: {hybrid: {alpha: .nan}}", "retrieval.hybrid.alpha: must be at least 0 and at most 1 (got .nan)"),
        ("retrieval: {rerank: {use_quality: ~}}", "retrieval.rerank.use_quality: must be true or false (got null)"),
        ("boundary_classes: {public: {allow: ['BAD TAG', 7]}}", "(got a list of 2 items)"),
        ("boundary_classes: {public: {allow: ['BAD TAG']}}", "(got BAD TAG)"),
        ("boundary_classes: {public: {allow: ['*'], redact: ['nope']}}", "unknown redaction rules nope; known:"),
        ("version: '1.0.0'\ntrue: 1", "true: unknown key"),
        ("version: '1.0.0'\n~: 1", "null: unknown key"),
        ("version: '1.0.0'\n\u202efoo: 1", "U+202Efoo: unknown key"),
        ("version: '1.0.0'\nversion: '1.0.1'", "the key version appears twice in one mapping"),
        ("version:\t'1.0.0'\n\tfoo: 1", "found character U+0009 that cannot start any token"),
        ("version: !foo '1.0.0'", "could not determine a constructor for the tag !foo"),
    ],
)
def test_an_error_names_the_value_in_the_policys_words(text, expected):
    message = str(refused(text))
    assert expected in message, message
    for python in ("'foo'", "'x'", "None", "True", "b'", "(got list)", "(got set)", "(got date)", "e+07", "\\t", "'!"):
        assert python not in message, (python, message)


def test_each_problem_is_structured_with_its_key_path():
    error = refused("retrieval: {hybrid: {alpha: 2}}\nrate_limit: {limit: 0}")
    assert error.details == {
        "problems": [
            {"path": "retrieval.hybrid.alpha", "message": "must be at least 0 and at most 1 (got 2)"},
            {"path": "rate_limit.limit", "message": "must be at least 1 and at most 10,000,000 (got 0)"},
        ]
    }


@pytest.mark.parametrize(
    ("tags", "shown"),
    [
        (["tool:" + "A" * 100_000], "tool:AAAA"),
        (["tool:\u202eevil"], "tool:U+202Eevil"),
        (["answer:task", ["nested"]], "a list of 1 item"),
        (["answer:task", None], "null"),
    ],
)
def test_a_bad_use_tag_is_quoted_as_a_short_plain_excerpt(tags, shown):
    for check in (use_tags_validate, lambda t: boundary_for(DEFAULT_POLICY, t)):
        with pytest.raises(InvalidUseTag) as info:
            check(tags)
        message = str(info.value)
        assert info.value.code == "INVALID_ARGUMENT"
        assert shown in message and len(message) < 200, message[:300]
        assert "'" not in message, message


@pytest.mark.django_db(transaction=True)
async def test_the_pce_error_says_the_same_and_lists_the_problems(owner, mcp_client_for):
    async with mcp_client_for(owner, "pce") as client:
        result = await client.call_tool(
            "pce.memory.policy.apply", {"yaml": "rate_limit: {limit: 'many'}", "validate_only": True}
        )
    assert result.is_error
    error = json.loads(result.content[0].text)["error"]
    assert error["code"] == "INVALID_POLICY"
    assert error["message"] == "rate_limit.limit: must be an integer (got many)"
    assert error["details"] == {"problems": [{"path": "rate_limit.limit", "message": "must be an integer (got many)"}]}
