"""Policy documents: both input shapes normalise to one form; bad input names its key."""

from __future__ import annotations

from datetime import timedelta

import pytest

from policy.document import (
    DEFAULT_POLICY,
    SEED_EXAMPLE_YAML,
    PolicyDocument,
    SemVer,
    diff,
    from_dict,
    parse_version,
    parse_yaml,
)
from policy.errors import PolicyInvalid

UPSTREAM_YAML = """\
version: "0.3.0"
boundary:
  scopes:
    session: { ttl: "7d" }
    project: { ttl: "120d" }
    principle: { ttl: "inf" }
  boundary_classes:
    public: { allow: ["*"] }
    internal: { allow: ["answer:task", "tool:*"] }
    pii: { allow: ["tool:contact-lookup"], redact: ["email", "phone"], escalation: "human_review" }
    secret: { allow: [], escalation: "deny" }
retrieval:
  hybrid: { alpha: 0.65, threshold: 0.15, k_txt: 48, k_vec: 96, k_final: 12, recency_half_life_days: 30 }
"""


def test_the_seed_example_parses_as_written():
    doc = parse_yaml(SEED_EXAMPLE_YAML)
    assert doc.version == "0.1.0"  # YAML reads `version: 0.1` as a number
    assert doc.source_shape == "seed"
    assert doc.scopes["session"].ttl == timedelta(days=7) and doc.scopes["session"].max_tokens == 20000
    assert doc.scopes["project"].ttl == timedelta(days=120) and doc.scopes["project"].max_tokens == 50000
    assert doc.scopes["principle"].ttl is None and doc.scopes["principle"].max_tokens == 100000
    assert doc.boundary_classes["public"].allow == ("*",)
    assert doc.boundary_classes["internal"].allow == ("answer:task", "tool:*")
    pii = doc.boundary_classes["pii"]
    assert pii.allow == ("tool:contact-lookup",) and pii.redact == ("email", "phone")
    assert pii.escalation == "human_review"
    assert doc.boundary_classes["secret"].allow == () and doc.boundary_classes["secret"].escalation == "deny"
    r = doc.retrieval
    assert (r.alpha, r.k_txt, r.k_vec, r.k_final) == (0.65, 48, 96, 12)
    assert r.use_quality is False and r.recency_half_life_days == 30
    assert dict(r.half_life_days_by_kind) == {"fact": 120, "task": 14, "preference": 90, "policy_hint": 365}
    assert r.half_life_days("task") == 14 and r.half_life_days("episode") == 30


def test_the_upstream_shape_normalises_to_the_same_form():
    seed, upstream = parse_yaml(SEED_EXAMPLE_YAML), parse_yaml(UPSTREAM_YAML)
    assert upstream.source_shape == "upstream" and upstream.version == "0.3.0"
    # Everything but the version is the same policy.
    assert diff(seed.to_dict(), upstream.to_dict()) == []
    assert upstream.retrieval.threshold == 0.15


def test_the_default_policy_has_the_seed_example_values_and_upstream_defaults():
    assert DEFAULT_POLICY.version == "0.0.0"
    assert diff(DEFAULT_POLICY.to_dict(), parse_yaml(SEED_EXAMPLE_YAML).to_dict()) == []
    assert (DEFAULT_POLICY.rate_limit.limit, DEFAULT_POLICY.rate_limit.window_seconds) == (1000, 10)


def test_canonical_form_round_trips():
    doc = parse_yaml(UPSTREAM_YAML + "rate_limit: { limit: 50, window_seconds: 60, algorithm: sliding }\n")
    again = from_dict(doc.to_dict())
    assert isinstance(again, PolicyDocument) and again.to_dict() == doc.to_dict()
    assert again.rate_limit.algorithm == "sliding"


def test_a_partial_policy_takes_the_default_for_what_it_leaves_out():
    doc = parse_yaml("version: '1.0.0'\nretrieval: { hybrid: { alpha: 0.4 } }\n")
    assert doc.retrieval.alpha == 0.4 and doc.retrieval.k_vec == 96
    assert doc.boundary_classes["secret"].escalation == "deny"
    assert doc.scopes["project"].ttl == timedelta(days=120)


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        ("version: 1\nfoo: 1\n", "foo", "unknown key"),
        ("version: 1\nretrieval: { hybrid: { alpha: 1.5 } }\n", "retrieval.hybrid.alpha", "at most 1"),
        ("version: 1\nretrieval: { hybrid: { alpha: -0.1 } }\n", "retrieval.hybrid.alpha", "at least 0"),
        ("version: 1\nretrieval: { hybrid: { k_vec: 5000 } }\n", "retrieval.hybrid.k_vec", "at most 1000"),
        ("version: 1\nretrieval: { hybrid: { k_final: 2.5 } }\n", "retrieval.hybrid.k_final", "integer"),
        ("version: 1\nretrieval: { hybrid: { gamma: 1 } }\n", "retrieval.hybrid.gamma", "unknown key"),
        ("version: 1\nretrieval: { rerank: { use_quality: 'yes' } }\n", "retrieval.rerank.use_quality", "true or"),
        (
            "version: 1\nretrieval: { rerank: { recency: { half_life_days_by_kind: { rumour: 3 } } } }\n",
            "retrieval.rerank.recency.half_life_days_by_kind.rumour",
            "unknown key",
        ),
        (
            "version: 1\nretrieval: { rerank: { recency: { half_life_days_by_kind: { fact: 0 } } } }\n",
            "retrieval.rerank.recency.half_life_days_by_kind.fact",
            "above 0",
        ),
        ("version: 1\nscopes: { session: { ttl: 'soon' } }\n", "scopes.session.ttl", "duration"),
        ("version: 1\nscopes: { session: { max_tokens: 0 } }\n", "scopes.session.max_tokens", "at least 1"),
        ("version: 1\nscopes: { forever: { ttl: 'inf' } }\n", "scopes.forever", "unknown key"),
        ("version: 1\nboundary_classes: { topsecret: { allow: [] } }\n", "boundary_classes.topsecret", "unknown"),
        ("version: 1\nboundary_classes: { pii: { redact: ['ssn'] } }\n", "boundary_classes.pii.redact", "ssn"),
        ("version: 1\nboundary_classes: { pii: { allow: 'x' } }\n", "boundary_classes.pii.allow", "list"),
        ("version: 1\nboundary_classes: { pii: { allow: ['BAD TAG'] } }\n", "boundary_classes.pii.allow", "tag"),
        # A regular expression's $ also matches before a final newline.
        ('version: 1\nboundary_classes: { pii: { allow: ["answer:task\\n"] } }\n', "boundary_classes.pii.allow", "tag"),
        (
            "version: 1\nboundary_classes: { pii: { allow: [], escalation: 'shout' } }\n",
            "boundary_classes.pii.escalation",
            "deny",
        ),
        ("version: 1\nboundary: { scopes: { session: { ttl: 1 } } }\n", "boundary.scopes.session.ttl", "duration"),
        ("version: 1\nboundary: { extra: 1 }\n", "boundary.extra", "unknown key"),
        ("version: 1\nrate_limit: { limit: 0 }\n", "rate_limit.limit", "at least 1"),
        ("version: 1\nrate_limit: { algorithm: 'leaky' }\n", "rate_limit.algorithm", "fixed, sliding"),
        ("version: 'one'\n", "version", "semver"),
        ("version: [1]\n", "version", "semver"),
        (
            "version: 1\nretrieval: { hybrid: { recency_half_life_days: 3 }, rerank: { recency_half_life_days: 4 } }\n",
            "retrieval.rerank.recency_half_life_days",
            "keep one",
        ),
        ("version: 1\nretrieval: { hybrid: { k_txt: 0, k_vec: 0 } }\n", "retrieval.hybrid", "both be 0"),
    ],
)
def test_bad_values_are_refused_naming_the_key(text, path, fragment):
    with pytest.raises(PolicyInvalid) as caught:
        parse_yaml(text)
    paths = [p for p, _ in caught.value.problems]
    assert path in paths, caught.value.problems
    message = dict(caught.value.problems)[path]
    assert fragment in message, message
    assert path in str(caught.value)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "version: [1, 2\n", "- a\n- b\n", "version: 1\nversion: 2\n", "just a string"],
)
def test_bad_yaml_is_refused_with_a_clear_message(text):
    with pytest.raises(PolicyInvalid) as caught:
        parse_yaml(text)
    assert str(caught.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(PolicyInvalid) as caught:
        parse_yaml("version: 1\nretrieval: { hybrid: { alpha: 9, k_txt: -1 } }\nextra: true\n")
    assert {p for p, _ in caught.value.problems} == {"retrieval.hybrid.alpha", "retrieval.hybrid.k_txt", "extra"}


def test_oversized_policies_are_refused():
    with pytest.raises(PolicyInvalid, match="larger than 128 KB"):
        parse_yaml("version: 1\n" + "#" * (130 * 1024))


def test_versions_follow_semver_precedence():
    assert parse_version(0.1) == parse_version("0.1.0") == SemVer(0, 1, 0)
    assert parse_version("1.0.0-rc.1") < parse_version("1.0.0") < parse_version("1.0.1") < parse_version("1.10.0")
    assert str(parse_version("2")) == "2.0.0" and str(parse_version("1.2.3-beta")) == "1.2.3-beta"
