"""namespaces_list (a LangGraph store's list_namespaces) pages in the database:
the matching, truncation, distinct, order and LIMIT/OFFSET are SQL, so the web
process reads one page of namespaces however many the tenant holds. The
answers are those of the algorithm it replaced (kept below as the reference,
which read every namespace into Python and sorted tuples of str there): same
namespaces, same order, for wildcards, case, non-ASCII text and namespaces
that begin others."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memory import api, validation
from memory.models import Kind, Memory, Validity
from memory.selectors.memories import MAX_NAMESPACES_LIMIT, _offset, read_boundary, require_read
from policy.caller import Caller
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db


def _path_matches(part: Sequence[str], pattern: Sequence[str]) -> bool:
    return len(part) == len(pattern) and all(p in ("*", e) for e, p in zip(part, pattern, strict=True))


def reference_namespaces_list(
    *,
    caller: Caller,
    prefix: Sequence[str] | None = None,
    suffix: Sequence[str] | None = None,
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[tuple[str, ...]]:
    """The algorithm namespaces_list replaced, as it was: every distinct
    namespace read into Python, filtered, truncated and sorted there."""
    require_read(caller)
    limit = validation.limit(limit, maximum=MAX_NAMESPACES_LIMIT)
    offset = _offset(offset)
    prefix = validation.namespace(prefix, field="prefix") if prefix is not None else None
    suffix = validation.namespace(suffix, field="suffix") if suffix is not None else None
    rows = (
        Memory.objects.for_caller(caller)
        .visible_in(read_boundary(caller).visible)
        .retrievable(timezone.now())
        .filter(kind=Kind.FACT)
        .exclude(namespace=[])
    )
    if prefix and "*" not in prefix:
        rows = rows.filter(**{f"namespace__0_{len(prefix)}": list(prefix)})
    found: set[tuple[str, ...]] = set()
    for namespace in rows.values_list("namespace", flat=True).distinct():
        item = tuple(namespace)
        if prefix and not _path_matches(item[: len(prefix)], prefix):
            continue
        if suffix and (len(suffix) > len(item) or not _path_matches(item[len(item) - len(suffix) :], suffix)):
            continue
        found.add(item[:max_depth] if max_depth else item)
    return sorted(found)[offset : offset + limit]


@pytest.fixture
def caller() -> Caller:
    return make_identity("tenant-a", "member").caller


@pytest.fixture
def outsider() -> Caller:
    return make_identity("tenant-b", "outsider").caller


# Keys never repeat: two active facts under one key and namespace are refused.
_keys = itertools.count()


def put(caller: Caller, namespaces: Sequence[Sequence[str]], **fields: Any) -> None:
    """Facts in these namespaces, written as rows (the store's own checks and
    side effects are not what is tested here; a few thousand go in at once)."""
    Memory.objects.bulk_create(
        [
            Memory(
                tenant_id=caller.tenant_id,
                kind=fields.get("kind", Kind.FACT),
                content="n",
                content_hash=f"sha256:{n}",
                namespace=list(namespace),
                subject=f"k{n}",
                **{k: v for k, v in fields.items() if k != "kind"},
            )
            for n, namespace in zip(_keys, namespaces, strict=False)
        ],
        batch_size=2000,
    )


# Segments whose orders disagree between code points and most collations:
# case, accents (precomposed and combining), scripts beyond Latin-1, a
# character outside the BMP, surrounding spaces, '*' as a stored label, and
# segments that begin others ("a" / "ab", "a" / "a ").
SEGMENTS = [
    "a",
    "A",
    "ab",
    "aB",
    "a ",
    " a",
    "b",
    "B",
    "z",
    "Z",
    "e",
    "é",
    "É",
    "e\u0301",
    "ß",
    "Ω",
    "日本",
    "日",
    "😀",
    "~",
    "_",
    "0",
    "10",
    "9",
    "*",
    "user-1",
    "user-10",
    "user-2",
]
segments = st.sampled_from(SEGMENTS)
namespaces = st.lists(segments, min_size=1, max_size=5)
patterns = st.one_of(st.none(), st.lists(st.one_of(segments, st.just("*")), min_size=0, max_size=4))
queries = st.fixed_dictionaries(
    {
        "prefix": patterns,
        "suffix": patterns,
        "max_depth": st.one_of(st.none(), st.integers(min_value=-3, max_value=6)),
        "limit": st.integers(min_value=1, max_value=12),
        "offset": st.integers(min_value=0, max_value=12),
    }
)

# Rows the answer must not count: another tenant's, other kinds, facts no
# longer retrievable, a class the default policy hides from a read.
NOISE: list[dict[str, Any]] = [
    {"kind": Kind.EPISODE},
    {"kind": Kind.RULE},
    {"validity": Validity.SUPERSEDED},
    {"validity": Validity.RETRACTED},
    {"expires_at": timezone.now() - timedelta(days=1)},
    {"boundary_class": "secret"},
]


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    stored=st.lists(namespaces, min_size=0, max_size=25),
    hidden=st.lists(namespaces, min_size=1, max_size=4),
    asked=st.lists(queries, min_size=1, max_size=6),
)
@example(
    stored=[["a"], ["a", "b"], ["a", "b", "c"], ["ab"], ["A"], ["a "], ["é"], ["e\u0301"], ["😀"], ["日本"], ["a"]],
    hidden=[["a", "hidden"]],
    asked=[
        {"prefix": None, "suffix": None, "max_depth": None, "limit": 12, "offset": 0},
        {"prefix": ["a"], "suffix": None, "max_depth": 2, "limit": 3, "offset": 1},
        {"prefix": ["*", "*"], "suffix": ["*"], "max_depth": 1, "limit": 12, "offset": 0},
        {"prefix": [], "suffix": ["b", "*"], "max_depth": -1, "limit": 12, "offset": 0},
    ],
)
def test_the_same_answers_as_the_python_algorithm(
    caller: Caller, outsider: Caller, stored: list[list[str]], hidden: list[list[str]], asked: list[dict[str, Any]]
) -> None:
    with _rolled_back():
        put(caller, stored)
        # The stored namespaces twice over: the answer names each once.
        put(caller, stored[: len(stored) // 2])
        put(outsider, hidden + stored)
        for fields in NOISE:
            put(caller, hidden, **fields)
        for query in asked:
            expected = reference_namespaces_list(caller=caller, **query)
            assert api.namespaces_list(caller=caller, **query) == expected, query


@contextmanager
def _rolled_back() -> Iterator[None]:
    class Rollback(Exception):
        pass

    try:
        with transaction.atomic():
            yield
            raise Rollback
    except Rollback:
        pass


def test_order_is_pythons_order_of_tuples_of_str(caller: Caller) -> None:
    """Code point order, segment by segment, a namespace before those it
    begins, whatever the database's collation: lower case after upper, an
    accented letter after every ASCII one, a character outside the BMP last."""
    stored = [("a", "b"), ("b",), ("B",), ("a",), ("ab",), ("é",), ("Z",), ("😀",), ("日本",), ("a", "B"), ("a ",)]
    put(caller, stored)
    expected = [("B",), ("Z",), ("a",), ("a", "B"), ("a", "b"), ("a ",), ("ab",), ("b",), ("é",), ("日本",), ("😀",)]
    assert expected == sorted(stored)
    assert api.namespaces_list(caller=caller) == expected
    assert api.namespaces_list(caller=caller, limit=3, offset=2) == expected[2:5]
    assert api.namespaces_list(caller=caller, max_depth=1) == sorted({n[:1] for n in stored})


@contextmanager
def rows_fetched() -> Iterator[list[int]]:
    """The rows each statement on memories handed to this process (the
    cursor's rowcount after execute: all of a result is fetched)."""
    counts: list[int] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        result = execute(sql, params, many, context)
        if "memory_memory" in sql:
            counts.append(max(context["cursor"].rowcount, 0))
        return result

    with connection.execute_wrapper(count):
        yield counts


DEEP = 3000


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"max_depth": 4},
        {"prefix": ["org", "*"], "suffix": ["notes"]},
        {"prefix": ["org"], "max_depth": 3, "offset": 50},
    ],
    ids=["all", "max_depth", "wildcards", "offset"],
)
def test_a_page_reads_a_page_of_rows(caller: Caller, query: dict[str, Any]) -> None:
    stored = [("org", f"team{i % 7}", f"user{i:05d}", "projects", f"p{i % 3}", "notes") for i in range(DEEP)]
    put(caller, stored)
    with rows_fetched() as counts:
        page = api.namespaces_list(caller=caller, limit=10, **query)
    assert len(page) == 10
    assert counts and sum(counts) <= 10, counts
    assert page == reference_namespaces_list(caller=caller, limit=10, **query)
