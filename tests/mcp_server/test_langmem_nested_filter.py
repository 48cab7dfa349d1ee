"""The langmem ``filter`` (the LangGraph store endpoint and the search_memory
tool) as LangGraph's PostgresStore applies it, plus the nested objects its
InMemoryStore matches (memory.attribute_filter): plain values are jsonb
equality (a list only the same list, null only a stored null), ``$eq``,
``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte`` work at the top level and inside
nested objects, an unknown operator is upstream's ValueError, and the filter
runs in SQL before the limit and offset (full pages), with a query (the
channels' statement) and without one (newest first) alike. One test runs the
real LangGraph stores (InMemoryStore, PostgresStore) on the same items and
filters and compares."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from memory import api
from memory.attribute_filter import MAX_CONDITIONS, MAX_PATH
from tests.mcp_server.test_coded_errors import coded
from tests.mcp_server.test_langmem_store_batch import send
from tests.mcp_server.test_langmem_toolset import USER, langmem_client, search  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

NS = ["memories", "u-1"]

# Every value a LangGraph item's value; "content" a string, the rest attributes.
ITEMS: dict[str, dict[str, Any]] = {
    "a": {
        "content": "alpha note",
        "profile": {"tone": "warm", "level": 3, "tags": ["x", "y"]},
        "score": 5,
        "kind": "doc",
    },
    "b": {"content": "beta note", "profile": {"tone": "cold", "level": 10, "tags": ["x"]}, "score": 10, "kind": "doc"},
    "c": {"content": "gamma note", "profile": {"tone": "warm", "level": 7, "extra": None}, "score": 9, "kind": None},
    "d": {"content": "delta note", "profile": "warm", "score": "12", "kind": "doc"},
    "e": {"content": "epsilon note", "profile": {"tone": {"shade": "warm"}}, "kind": "memo"},
    "f": {"content": "zeta note", "profile": {"tone": "warm", "nested": {"deep": {"er": 1}}}, "score": 2.5},
}

# (filter, the keys it finds). Comments: where LangGraph's stores differ.
FOUND: list[tuple[dict[str, Any], list[str]]] = [
    ({"kind": "doc"}, ["a", "b", "d"]),
    # null only a stored null (InMemoryStore also takes a missing key for null).
    ({"kind": None}, ["c"]),
    ({"profile": {"tags": ["x"]}}, ["b"]),  # a list equals only the same list
    ({"score": 10}, ["b"]),
    ({"score": 10.0}, ["b"]),  # jsonb numbers: 10 = 10.0
    ({"score": "12"}, ["d"]),
    # Nested objects (PostgresStore refuses them: "Unsupported operator: tone").
    ({"profile": {"tone": "warm"}}, ["a", "c", "f"]),
    ({"profile": {"tone": "warm", "level": 3}}, ["a"]),
    ({"profile": {"tone": "hot"}}, []),
    ({"profile": {"tone": "warm", "level": 4}}, []),
    ({"profile": {"tags": ["x", "y"]}}, ["a"]),
    ({"profile": {"tags": ["y", "x"]}}, []),
    ({"profile": {"extra": None}}, ["c"]),
    ({"profile": {"tone": {"shade": "warm"}}}, ["e"]),
    ({"profile": {"nested": {"deep": {"er": 1}}}}, ["f"]),
    ({"profile": {"nested": {"deep": {"er": 2}}}}, []),
    # Operators inside nested objects.
    ({"profile": {"level": {"$gt": 5}}}, ["b", "c"]),
    ({"profile": {"level": {"$gte": 3, "$lt": 10}}}, ["a", "c"]),
    ({"profile": {"tone": {"$ne": "warm"}}}, ["b", "e"]),
    ({"profile": {"tone": "warm", "level": {"$lte": 3}}}, ["a"]),
    # Operators at the top level, as PostgresStore.
    ({"profile": {"$eq": {"tone": "warm", "level": 7, "extra": None}}}, ["c"]),
    ({"profile": {"$eq": {"tone": "warm"}}}, []),  # jsonb equality, not containment
    ({"kind": {"$ne": "doc"}}, ["c", "e"]),  # a missing key matches no $ne
    ({"score": {"$ne": 10}}, ["a", "c", "d", "f"]),
    ({"kind": {"$gte": "doc"}}, ["a", "b", "d", "e"]),  # the stored text; null has none
    ({"content": "beta note"}, ["b"]),
    ({"content": {"$gte": "delta", "$lt": "epsilon"}}, ["d"]),
    ({"content": {"$ne": "beta note"}}, ["a", "c", "d", "e", "f"]),
    ({"content": {"tone": "warm"}}, []),  # the text is not an object
    ({"profile": {}}, ["a", "b", "c", "d", "e", "f"]),  # no condition, as PostgresStore
    # A number compares numbers: only JSON numbers (PostgresStore compares the
    # text: "10" < "9", and it finds none of these).
    ({"score": {"$gt": 9}}, ["b"]),
    ({"score": {"$gte": 5, "$lte": 9.5}}, ["a", "c"]),
    ({"score": {"$lt": 3}}, ["f"]),
]

DEEP: dict[str, Any] = {"k1": 1}
for _level in range(2, MAX_PATH + 2):
    DEEP = {f"k{_level}": DEEP}

# (filter, the start of the refusal's message, after "ValueError: " in the tool).
REFUSED: list[tuple[Any, str]] = [
    # Refused by both LangGraph stores with this message.
    ({"profile": {"$in": ["warm"]}}, "Unsupported operator: $in"),
    ({"profile": {"$gt": 1, "tone": "warm"}}, "Unsupported operator: tone"),
    ({"profile": {"tone": {"$exists": True}}}, "Unsupported operator: $exists"),
    # Bounds and operands.
    (DEEP, f"filter 'k{MAX_PATH + 1}.k{MAX_PATH}.k{MAX_PATH - 1}.k{MAX_PATH - 2}.k{MAX_PATH - 3}' is nested"),
    ({f"k{n}": n for n in range(MAX_CONDITIONS + 1)}, f"filter must set at most {MAX_CONDITIONS} conditions"),
    # Each operator is a condition: 2 + 19.
    (
        {"p": {"q": {"$gte": 1, "$lte": 2}}, **{f"k{n}": n for n in range(MAX_CONDITIONS - 1)}},
        "filter must set at most",
    ),
    ({"score": {"$gt": [1]}}, "filter 'score': $gt compares with a number or a text"),
    ({"score": {"$lt": True}}, "filter 'score': $lt compares with a number or a text"),
    ({"profile": {"x" * 101: 1}}, "filter keys must be attribute names"),
    (["kind", "doc"], "filter must be an object"),
]


async def put_items(member: Any, items: dict[str, dict[str, Any]], namespace: list[str] = NS) -> None:
    ops = [{"op": "put", "namespace": namespace, "key": key, "value": value} for key, value in items.items()]
    answer = await send(member, ops)
    assert answer.status_code == 200, answer.text[:300]


async def keys_found(member: Any, flt: Any, *, query: str | None, limit: int = 100, offset: int = 0) -> list[str]:
    """The keys a store search finds, in its order."""
    op = {"op": "search", "namespace_prefix": NS, "query": query, "filter": flt, "limit": limit, "offset": offset}
    answer = await send(member, [op])
    assert answer.status_code == 200, (flt, answer.text[:300])
    return [item["key"] for item in answer.json()["results"][0]]


@pytest.mark.parametrize("query", [None, "note"], ids=["newest-first", "with-query"])
async def test_filters_match_as_the_langgraph_stores_do(member, query):
    await put_items(member, ITEMS)
    mismatches = {}
    for flt, expected in FOUND:
        got = sorted(await keys_found(member, flt, query=query))
        if got != expected:
            mismatches[json.dumps(flt)] = (got, expected)
    assert not mismatches


async def test_refused_filters_are_coded_value_errors(member, langmem_client):  # noqa: F811
    await put_items(member, ITEMS)
    for flt, message in REFUSED:
        for query in (None, "note"):
            op = {"op": "search", "namespace_prefix": NS, "query": query, "filter": flt}
            answer = await send(member, [op])
            assert answer.status_code == 400, (flt, answer.text[:300])
            assert coded(answer) == "INVALID_ARGUMENT"
            assert answer.json()["error"]["message"].startswith(message), (flt, answer.json())
    async with langmem_client(member, **USER) as client:
        result = await client.call_tool("search_memory", {"query": "note", "filter": {"profile": {"$in": ["warm"]}}})
    assert result.is_error
    assert result.content[0].text.startswith("ValueError: Unsupported operator: $in")


@pytest.mark.parametrize("query", [None, "note"], ids=["newest-first", "with-query"])
async def test_paging_with_a_nested_filter_returns_full_pages(member, query):
    """The filter is part of the statement: every page before the last is full,
    the pages are disjoint and together hold every match."""
    items: dict[str, dict[str, Any]] = {
        f"p{n:02d}": {"content": f"paging note {n}", "group": {"name": "g1" if n % 3 == 0 else "g2", "n": n}}
        for n in range(36)
    }
    await put_items(member, items)
    matches = {f"p{n:02d}" for n in range(0, 36, 3)}
    for flt in ({"group": {"name": "g1"}}, {"group": {"name": "g1", "n": {"$gte": 0}}}):
        pages = [await keys_found(member, flt, query=query, limit=5, offset=offset) for offset in range(0, 15, 5)]
        assert [len(page) for page in pages] == [5, 5, 2], pages
        seen = [key for page in pages for key in page]
        assert len(seen) == len(set(seen)) and set(seen) == matches
    assert await keys_found(member, {"group": {"name": "g1"}}, query=query, limit=5, offset=12) == []


async def test_search_memory_tool_takes_nested_filters(member, langmem_client):  # noqa: F811
    for content, metadata in (
        ("User prefers dark mode in the editor", {"settings": {"theme": "dark", "size": 14}}),
        ("User prefers dark mode in the terminal", {"settings": {"theme": "dark", "size": 11}}),
        ("User prefers light mode in the browser", {"settings": {"theme": "light", "size": 16}}),
    ):
        await sync_to_async(api.fact_store)(
            caller=member.caller,
            subject=str(uuid.uuid4()),
            predicate=None,
            namespace=["user", "u-123"],
            content=content,
            metadata=metadata,
        )
    async with langmem_client(member, **USER) as client:
        dark = await search(client, query="mode", filter={"settings": {"theme": "dark"}})
        large = await search(client, query="mode", filter={"settings": {"size": {"$gte": 14}}})
        both = await search(client, query="mode", filter={"settings": {"theme": "dark", "size": {"$gt": 12}}})
        paged = await search(client, query="mode", filter={"settings": {"theme": "dark"}}, limit=1, offset=1)
    assert sorted(found["value"]["settings"]["size"] for found in dark) == [11, 14]
    assert sorted(found["value"]["settings"]["size"] for found in large) == [14, 16]
    assert [found["value"]["content"] for found in both] == ["User prefers dark mode in the editor"]
    assert len(paged) == 1 and paged[0]["key"] in {found["key"] for found in dark}


def upstream_answers(filters: list[Any]) -> dict[str, list[Any]]:
    """LangGraph's InMemoryStore and PostgresStore on ITEMS (a subprocess with .venv-import's python)."""
    from tests.importers.conftest import IMPORT_PYTHON, owner_url, require_import_venv

    require_import_venv()
    spec = {
        "conninfo": owner_url(),
        "schema": f"langgraph_filter_{uuid.uuid4().hex[:12]}",
        "items": list(ITEMS.items()),
        "filters": filters,
    }
    script = __file__.rsplit("/", 1)[0] + "/langgraph_filter_upstream.py"
    done = subprocess.run(
        [str(IMPORT_PYTHON), script], input=json.dumps(spec), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# Filters where our answer is deliberately not PostgresStore's, and what it answers.
NUMERIC_RANGES = {json.dumps(flt) for flt, _ in FOUND[-3:]}
POSTGRES_TEXT_ORDER = {  # PostgresStore 3.2.0: value->>key compared with str(number)
    '{"score": {"$gt": 9}}': [],
    '{"score": {"$gte": 5, "$lte": 9.5}}': ["a", "c"],
    '{"score": {"$lt": 3}}': ["b", "d", "f"],
}


FOUND_BY_NAME = [(json.dumps(flt), keys) for flt, keys in FOUND]
# InMemoryStore takes a missing key for null; PostgresStore's rule (a stored null) holds inside objects too.
NESTED_NULL = {'{"profile": {"extra": null}}': ["a", "b", "c", "e", "f"]}


async def test_same_results_as_langgraph_stores(member):
    """What a user switching from PostgresStore sees: the same keys for every
    filter it answers (but a number's range, which it compares as text), its
    ValueError where both LangGraph stores refuse, and InMemoryStore's answer for
    the nested objects only InMemoryStore matches."""
    await put_items(member, ITEMS)
    filters = [flt for flt, _ in FOUND] + [flt for flt, message in REFUSED if message.startswith("Unsupported")]
    upstream = await sync_to_async(upstream_answers)(filters)
    checked = {"postgres": 0, "memory": 0, "refused": 0}
    for flt, postgres, memory in zip(filters, upstream["postgres"], upstream["memory"], strict=True):
        name = json.dumps(flt)
        op = {"op": "search", "namespace_prefix": NS, "query": None, "filter": flt, "limit": 100}
        answer = await send(member, [op])
        if isinstance(postgres, list):
            ours = sorted(item["key"] for item in answer.json()["results"][0])
            if name in NUMERIC_RANGES:
                assert postgres == POSTGRES_TEXT_ORDER[name], (name, postgres)
                continue
            assert ours == postgres, (name, ours, postgres)
            checked["postgres"] += 1
            continue
        # PostgresStore takes a nested object's keys for operators.
        assert postgres["error"].startswith("ValueError: Unsupported operator: "), postgres
        if answer.status_code != 200:
            # Both refuse (InMemoryStore with a TypeError where its float() of
            # a value comes first): PostgresStore's ValueError and message, coded.
            assert isinstance(memory, dict), (name, memory)
            assert coded(answer) == "INVALID_ARGUMENT"
            # The operator InMemoryStore names inside a nested object (PostgresStore names its key).
            refusal = memory["error"] if memory["error"].startswith("ValueError: ") else postgres["error"]
            upstream_message = refusal.removeprefix("ValueError: ")
            assert answer.json()["error"]["message"].startswith(upstream_message), (name, answer.json())
            checked["refused"] += 1
            continue
        ours = sorted(item["key"] for item in answer.json()["results"][0])
        assert ours == dict(FOUND_BY_NAME)[name]
        if isinstance(memory, dict):
            # InMemoryStore's float() of a missing value: TypeError.
            assert memory["error"].startswith("TypeError"), (name, memory)
        elif name in NESTED_NULL:
            assert memory == NESTED_NULL[name], (name, memory)
        else:
            # A nested object only InMemoryStore matches: its answer.
            assert ours == memory, (name, ours, memory)
            checked["memory"] += 1
    assert checked == {"postgres": 14, "memory": 12, "refused": 3}, checked
