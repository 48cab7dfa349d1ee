"""SearchQuery: one value for what a search asks, checked when the search runs."""

from __future__ import annotations

import dataclasses

import pytest

from memory import api
from memory.errors import InvalidArgument
from memory.services.memories import fact_store

pytestmark = pytest.mark.django_db


def test_a_search_query_is_a_frozen_value():
    query = api.SearchQuery("diet", types=["fact"], limit=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        query.limit = 50  # type: ignore[misc]
    assert dataclasses.replace(query, limit=50).limit == 50
    assert query == api.SearchQuery("diet", types=["fact"], limit=5)


def test_the_search_checks_the_query_in_the_order_it_always_did(member):
    """Building a bad query is not an error (a dialect builds it from raw
    arguments); the search refuses it, naming the first bad field as before."""
    bad = api.SearchQuery("diet", mode="fuzzy", limit=0)
    with pytest.raises(InvalidArgument, match="mode"):
        api.memory_search(caller=member.caller, query=bad)
    with pytest.raises(InvalidArgument, match="limit"):
        api.memory_search(caller=member.caller, query=dataclasses.replace(bad, mode="keyword"))
    with pytest.raises(InvalidArgument, match="offset"):
        api.memory_search(caller=member.caller, query=api.SearchQuery("diet", offset=-1, limit=0))


def test_every_reader_takes_the_same_query(member):
    fact = fact_store(caller=member.caller, subject="user", predicate="diet", content="User is vegetarian").memory
    query = api.SearchQuery("vegetarian", types=["fact"], mode="keyword", limit=5)
    assert [i.memory.id for i in api.memory_search(caller=member.caller, query=query)] == [fact.id]
    assert [i.memory.id for i in api.memory_search_accessed(caller=member.caller, query=query)] == [fact.id]
    with pytest.raises(TypeError):
        api.memory_search(caller=member.caller, query="vegetarian", limit=5)  # type: ignore[call-arg, arg-type]
