"""memory_pk: an id a caller sends is an alias the tenant holds or a UUID, and
anything else is refused before a statement is built from it."""

from __future__ import annotations

import pytest

from memory.errors import InvalidArgument
from memory.selectors.aliases import memory_pk
from memory.services.memories import fact_store
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("value", ["a\x00b", "\x00", "01234567-89ab-cdef-0123-456789abcdef\x00"])
def test_an_id_holding_a_nul_character_is_refused_as_an_id(value):
    # PostgreSQL text cannot hold NUL: sent to the alias look-up it was a driver
    # error (the admin's review form reached it), not the id refusal.
    caller = make_identity("acme", "alice").caller
    fact_store(caller=caller, subject=None, predicate=None, content="The build runs on Tuesdays.")
    with pytest.raises(InvalidArgument, match="id must be a UUID"):
        memory_pk(caller, value)


def test_an_id_is_still_a_uuid_or_an_alias():
    caller = make_identity("acme", "alice").caller
    stored = fact_store(caller=caller, subject=None, predicate=None, content="The build runs on Tuesdays.").memory
    assert memory_pk(caller, str(stored.id)) == stored.id
    with pytest.raises(InvalidArgument):
        memory_pk(caller, "no-such-alias")
