"""A policy is untrusted YAML parsed in the web process: aliases (a few hundred
bytes that expand to gigabytes once walked), deep nesting and oversized input
are refused while the YAML is read, with a coded error that names the key path
and never echoes the input."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest

from policy.document import parse_yaml
from policy.errors import PolicyInvalid

REPO = Path(__file__).resolve().parents[2]


def laughs(levels: int, fan: int, *, at: str = "retrieval:\n  hybrid:\n    alpha") -> str:
    """The billion-laughs shape: each anchor a list of ``fan`` aliases of the one
    before, the last one used where the validator quotes a bad value."""
    lines = ["l0: &l0 'lol'"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fan)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + f"\n{at}: *l{levels}\n"


def refused(text: str) -> PolicyInvalid:
    with pytest.raises(PolicyInvalid) as info:
        parse_yaml(text)
    assert info.value.code == "INVALID_POLICY"
    return info.value


def test_an_alias_bomb_is_refused_at_once_in_little_memory():
    # A million references once expanded: the old validator quoted the whole
    # expanded value in its error (megabytes of text, tens of MB of memory).
    bomb = laughs(6, 10)
    assert len(bomb) < 500
    tracemalloc.start()
    started = time.perf_counter()
    try:
        error = refused(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 1.0
    assert peak < 1_000_000, f"parsing a {len(bomb)}-byte policy peaked at {peak} bytes"
    assert len(str(error)) < 300
    assert "'lol'" not in str(error) and "*l" not in str(error)
    # It names where: the first anchor, by key path and line.
    assert error.problems[0][0] == "l0"
    assert "anchors" in error.problems[0][1] and "line 1" in error.problems[0][1]


def test_a_half_kilobyte_bomb_cannot_take_the_process_down():
    """Nine levels of nine (536 bytes): expanded, 387 million strings. A child
    process with its address space capped at 1 GB must refuse it quickly instead
    of running out of memory."""
    bomb = laughs(9, 9)
    script = textwrap.dedent(
        f"""
        import resource, sys, time
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from policy.document import parse_yaml
        from policy.errors import PolicyInvalid
        started = time.perf_counter()
        try:
            parse_yaml({bomb!r})
        except PolicyInvalid as exc:
            print(exc.code, len(str(exc)), round(time.perf_counter() - started, 3))
            sys.exit(0)
        sys.exit(3)
        """
    )
    done = subprocess.run(  # noqa: S603 - our own interpreter and script
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    code, length, seconds = done.stdout.split()
    assert code == "INVALID_POLICY" and int(length) < 300 and float(seconds) < 1.0


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("boundary_classes:\n  public:\n    allow: ['*', *tag]\n", "boundary_classes.public.allow[1]"),
        ("retrieval:\n  hybrid: &h {alpha: 0.5}\n", "retrieval.hybrid"),
        ("defaults: &d {k_txt: 10}\nretrieval:\n  hybrid:\n    <<: *d\n", "defaults"),
    ],
)
def test_anchors_and_aliases_are_refused_naming_the_key_path(text, path):
    error = refused(text)
    assert error.problems[0][0] == path
    assert "are not accepted" in error.problems[0][1]


def test_deep_nesting_is_refused_before_it_is_built():
    # Composing recurses once per level: 60,000 levels overflowed the stack
    # (a RecursionError, not a coded error) before anything was validated.
    depth = 60_000
    error = refused("retrieval:\n  hybrid: " + "[" * depth + "]" * depth + "\n")
    assert error.problems[0][0].startswith("retrieval.hybrid[0]")
    assert "nested deeper than" in error.problems[0][1]
    error = refused("scopes: " + "{a: " * 40 + "1" + "}" * 40 + "\n")
    assert error.problems[0][0].startswith("scopes.a.a")
    assert len(str(error)) < 300


def test_an_error_quotes_no_more_than_an_excerpt_of_the_input():
    secret = "S3CR3T-" + "x" * 50_000
    for text in (
        f"retrieval:\n  hybrid:\n    alpha: '{secret}'\n",
        f"scopes:\n  session:\n    ttl: '{secret}'\n",
        f"boundary_classes:\n  public:\n    allow: ['{secret}']\n",
        f"rate_limit:\n  algorithm: '{secret}'\n",
        f"version: '{secret}'\n",
        f"'{secret[:1000]}': 1\n",
    ):
        error = refused(text)
        assert len(str(error)) < 400, str(error)[:400]
        assert secret[:200] not in str(error)


def test_many_problems_are_listed_up_to_a_bound():
    error = refused("".join(f"unknown_{i}: 1\n" for i in range(5000)))
    assert len(error.problems) == 21 and error.problems[-1][1] == "and 4980 more problems"
    assert len(str(error)) < 4000


def test_a_value_python_cannot_build_is_a_coded_error():
    # An integer past Python's digit limit raised ValueError from inside the loader.
    error = refused("retrieval:\n  hybrid:\n    k_txt: " + "9" * 6000 + "\n")
    assert "cannot be read" in str(error) and "9999" not in str(error)


@pytest.mark.parametrize(
    "version",
    [
        "'1.0." + "9" * 5000 + "'",
        "'" + "9" * 4301 + ".0.0'",
        "'1.0.0-" + "1" * 4400 + "'",
        "9" * 5000,  # a YAML integer
    ],
)
def test_a_version_with_thousands_of_digits_is_refused_with_the_policy_code(version):
    """Python converts at most 4300 digits between int and str: such a version
    was an INTERNAL error."""
    error = refused(f"version: {version}\n")
    assert "9" * 100 not in str(error) and "1" * 100 not in str(error)
