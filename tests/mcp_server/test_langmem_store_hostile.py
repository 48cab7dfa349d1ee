"""The LangGraph store endpoint against hostile keys, namespaces, values, TTLs
and paging: every bad op gets a coded INVALID_ARGUMENT and changes nothing;
odd but valid keys and namespaces round-trip exactly and stay the tenant's
own. Through the real HTTP app (the ASGI router, Django, PostgreSQL)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.harness.surfaces.asgi import asgi_transport
from tests.mcp_server.test_langmem_store_batch import NS, STORE, footprint, send

pytestmark = pytest.mark.django_db(transaction=True)


def put(namespace: list[str], key: str, value: Any, **extra: Any) -> dict[str, Any]:
    return {"op": "put", "namespace": namespace, "key": key, "value": value, **extra}


def value(content: str = "User prefers tea") -> dict[str, Any]:
    return {"content": content}


BAD_OPS: dict[str, dict[str, Any]] = {
    "very long key": put(NS, "k" * 100_000, value()),
    "very long namespace label": put(["n" * 100_000], "k", value()),
    "very deep namespace": put(["n"] * 5000, "k", value()),
    "empty namespace label": put(["memories", ""], "k", value()),
    "blank namespace label": put(["memories", "  "], "k", value()),
    "empty namespace": put([], "k", value()),
    "empty key": put(NS, "", value()),
    "NUL in key": put(NS, "a\x00b", value()),
    "NUL in namespace": put(["a\x00b"], "k", value()),
    "NUL in content": put(NS, "k", value("a\x00b")),
    "NUL in an attribute": put(NS, "k", {"content": "x", "a": "b\x00"}),
    "lone surrogate in key": put(NS, "a\ud800", value()),
    "lone surrogate in namespace": put(["a\udc00"], "k", value()),
    "value a string": put(NS, "k", "text"),
    "value a number": put(NS, "k", 5),
    "value a list": put(NS, "k", [1, 2]),
    "oversized content": put(NS, "k", value("x" * 900_000)),
    "oversized attributes": put(NS, "k", {"content": "x", **{f"a{i}": i for i in range(20_000)}}),
    "ttl 0": put(NS, "k", value(), ttl=0),
    "ttl negative": put(NS, "k", value(), ttl=-1),
    "ttl huge": put(NS, "k", value(), ttl=10**400),
    "ttl a string": put(NS, "k", value(), ttl="forever"),
    "get NUL key": {"op": "get", "namespace": NS, "key": "a\x00"},
    "get long key": {"op": "get", "namespace": NS, "key": "k" * 200_000},
    "delete NUL key": put(NS, "a\x00", None),
    "search limit 0": {"op": "search", "namespace_prefix": NS, "limit": 0},
    "search limit negative": {"op": "search", "namespace_prefix": NS, "limit": -1},
    "search limit huge": {"op": "search", "namespace_prefix": NS, "limit": 10**30},
    "search limit float": {"op": "search", "namespace_prefix": NS, "limit": 1.5},
    "search offset negative": {"op": "search", "namespace_prefix": NS, "offset": -5},
    "search offset huge": {"op": "search", "namespace_prefix": NS, "query": "tea", "offset": 10**18},
    "search query NUL": {"op": "search", "namespace_prefix": NS, "query": "a\x00b"},
    "list limit 0": {"op": "list_namespaces", "limit": 0},
    "list limit negative": {"op": "list_namespaces", "limit": -5},
    "list limit huge": {"op": "list_namespaces", "limit": 10**30},
    "list offset negative": {"op": "list_namespaces", "offset": -1},
    "list offset huge": {"op": "list_namespaces", "offset": 10**30},
    "list max_depth 0": {"op": "list_namespaces", "max_depth": 0},
    "list prefix NUL": {"op": "list_namespaces", "prefix": ["a\x00"]},
}

# JSON's non-standard constants, which Python's parser accepts.
BAD_BODIES: dict[str, bytes] = {
    "ttl NaN": b'{"ops": [{"op": "put", "namespace": ["m"], "key": "k", "value": {"content": "x"}, "ttl": NaN}]}',
    "ttl Infinity": b'{"ops": [{"op": "put", "namespace": ["m"], "key": "k", "value": {}, "ttl": Infinity}]}',
    "attribute NaN": b'{"ops": [{"op": "put", "namespace": ["m"], "key": "k", "value": {"content": "x", "s": NaN}}]}',
    "limit Infinity": b'{"ops": [{"op": "search", "namespace_prefix": ["m"], "limit": Infinity}]}',
    "list offset NaN": b'{"ops": [{"op": "list_namespaces", "offset": NaN}]}',
}


async def post_raw(member: Any, body: bytes) -> httpx.Response:
    from memproj.asgi import Router

    headers = {"Authorization": f"Bearer {member.token}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return await client.post(STORE, content=body, headers=headers)


async def seeded(member: Any) -> tuple[int, int]:
    """Two namespaces with an item each, so paging has something to get wrong."""
    stored = await send(member, [put(["a", "one"], "k1", value()), put(["b", "two"], "k2", value())])
    assert stored.status_code == 200, stored.text
    return await footprint(member)


def refused_invalid(answer: httpx.Response) -> None:
    assert answer.status_code == 400, (answer.status_code, answer.text[:300])
    error = answer.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT" and error["message"]
    assert "Traceback" not in answer.text


@pytest.mark.parametrize("name", list(BAD_OPS))
async def test_a_bad_op_is_refused_with_a_coded_error_and_changes_nothing(member, name):
    before = await seeded(member)
    # Alone, and after a valid put: the batch's put must not be written either.
    for ops in ([BAD_OPS[name]], [put(NS, "fresh", value("User likes jazz")), BAD_OPS[name]]):
        refused_invalid(await send(member, ops))
        assert await footprint(member) == before


@pytest.mark.parametrize("name", list(BAD_BODIES))
async def test_a_non_finite_number_is_refused_and_changes_nothing(member, name):
    before = await seeded(member)
    refused_invalid(await post_raw(member, BAD_BODIES[name]))
    assert await footprint(member) == before


async def test_list_namespaces_pages_only_forwards(member):
    await seeded(member)
    listed = await send(member, [{"op": "list_namespaces", "limit": 1, "offset": 1}])
    assert listed.status_code == 200, listed.text
    assert listed.json()["results"] == [[["b", "two"]]]


ODD_NAMESPACES = [["a.b", "c/d"], ["..", "%2F", "*"], ["日本", "🙂", "ключ"], ["x" * 200]]
ODD_KEYS = ["../x/.", "a/b", "k.e.y", "🙂", "x" * 200, "*", "%00"]


async def test_odd_keys_and_namespaces_round_trip_and_stay_the_tenants_own(member, outsider):
    pairs = list(zip(ODD_NAMESPACES * 2, ODD_KEYS, strict=False))
    stored = await send(member, [put(ns, key, value(f"note {i}")) for i, (ns, key) in enumerate(pairs)])
    assert stored.status_code == 200, stored.text
    for i, (ns, key) in enumerate(pairs):
        got = (await send(member, [{"op": "get", "namespace": ns, "key": key}])).json()["results"][0]
        assert got is not None and got["namespace"] == ns and got["key"] == key, (ns, key)
        assert got["value"] == value(f"note {i}")
    listed = (await send(member, [{"op": "list_namespaces"}])).json()["results"][0]
    assert sorted(map(tuple, listed)) == sorted({tuple(ns) for ns, _ in pairs})

    theirs = await footprint(member)
    # Another tenant: the same namespaces and keys find nothing, list nothing, delete nothing.
    for ns, key in pairs:
        answer = await send(
            outsider,
            [
                {"op": "get", "namespace": ns, "key": key},
                {"op": "search", "namespace_prefix": ns},
                {"op": "search", "namespace_prefix": ns, "query": "note"},
            ],
        )
        assert answer.json()["results"] == [None, [], []], (ns, key)
        deleted = await send(outsider, [put(ns, key, None)])
        assert deleted.status_code in (200, 404), deleted.text
    everything = await send(
        outsider,
        [{"op": "list_namespaces"}, {"op": "search", "namespace_prefix": []}, {"op": "search", "query": "note"}],
    )
    assert everything.json()["results"] == [[], [], []]
    assert await footprint(member) == theirs
    for ns, key in pairs:
        got = (await send(member, [{"op": "get", "namespace": ns, "key": key}])).json()["results"][0]
        assert got is not None, (ns, key)


async def test_namespace_labels_are_kept_and_compared_exactly(member):
    """As in LangGraph's stores, ``(" a",)`` and ``("a",)`` are two namespaces:
    an item put under one is neither found, listed nor deleted through the
    other, and reads back under the namespace it was written to."""
    spaced, plain, trailing = [" a"], ["a"], ["a ", "b"]
    stored = await send(
        member,
        [put(spaced, "k", value("User prefers tea")), put(trailing, "k", value("User prefers coffee"))],
    )
    assert stored.status_code == 200, stored.text

    answer = await send(
        member,
        [
            {"op": "get", "namespace": plain, "key": "k"},
            {"op": "search", "namespace_prefix": plain},
            {"op": "search", "namespace_prefix": plain, "query": "tea"},
            {"op": "list_namespaces", "prefix": plain},
            {"op": "get", "namespace": ["a", "b"], "key": "k"},
            {"op": "search", "namespace_prefix": ["a", "b"], "query": "coffee"},
        ],
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["results"] == [None, [], [], [], None, []]

    answer = await send(
        member,
        [
            {"op": "get", "namespace": spaced, "key": "k"},
            {"op": "search", "namespace_prefix": spaced, "query": "tea"},
            {"op": "get", "namespace": trailing, "key": "k"},
            {"op": "list_namespaces"},
        ],
    )
    got, found, got_trailing, listed = answer.json()["results"]
    assert got["namespace"] == spaced and got["value"] == value("User prefers tea")
    assert [item["namespace"] for item in found] == [spaced]
    assert got_trailing["namespace"] == trailing and got_trailing["value"] == value("User prefers coffee")
    assert sorted(listed) == sorted([spaced, trailing])

    # Writing and deleting under the plain namespace leaves the spaced item alone.
    assert (await send(member, [put(plain, "k", value("User prefers water"))])).status_code == 200
    assert (await send(member, [put(plain, "k", None)])).status_code == 200
    answer = await send(member, [{"op": "get", "namespace": spaced, "key": "k"}])
    assert answer.json()["results"][0]["value"] == value("User prefers tea")


async def test_keys_are_kept_and_compared_exactly(member):
    """A key with spaces around it is its own key, as in LangGraph's stores: it
    reads back and deletes as sent, and the trimmed key is another item."""
    assert (await send(member, [put(NS, " k ", value("User prefers tea"))])).status_code == 200
    answer = await send(
        member, [{"op": "get", "namespace": NS, "key": " k "}, {"op": "get", "namespace": NS, "key": "k"}]
    )
    spaced, trimmed = answer.json()["results"]
    assert spaced["key"] == " k " and spaced["value"] == value("User prefers tea")
    assert trimmed is None

    assert (await send(member, [put(NS, "k", value("User prefers coffee"))])).status_code == 200
    assert (await send(member, [put(NS, " k ", None)])).status_code == 200
    answer = await send(
        member, [{"op": "get", "namespace": NS, "key": " k "}, {"op": "get", "namespace": NS, "key": "k"}]
    )
    deleted, kept = answer.json()["results"]
    assert deleted is None and kept["value"] == value("User prefers coffee")
