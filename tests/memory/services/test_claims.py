"""pce's claim upsert: one claim per text in a tenant, and its refusal of the
same text under another kind, scope or boundary class names the existing
claim only to a caller whose reads can see it."""

import pytest

from memory.errors import Duplicate
from memory.services.claims import claim_upsert

pytestmark = pytest.mark.django_db

AT = {"at": "2025-01-01T00:00:00Z"}


def upsert(identity, text, boundary_class):
    return claim_upsert(
        caller=identity.caller, text=text, kind="fact", scope="project", boundary_class=boundary_class, provenance=AT
    )


def test_the_same_text_in_a_class_the_caller_reads_names_the_claim(member):
    first = upsert(member, "The staging door code is 4471", "internal").memory
    with pytest.raises(Duplicate) as refused:
        upsert(member, "The staging door code is 4471", "public")
    assert refused.value.details == {"existing_id": str(first.id)}
    assert "kind fact, scope project and boundary_class internal" in str(refused.value)


def test_another_dialects_fact_of_the_same_text_is_the_project_claim_it_shows_as(member):
    """A memory-dialect fact (scope `global`) shows as a `project` claim: a
    project upsert of its text returns it, as the same claim upserted again does."""
    from memory.services.memories import fact_store

    fact = fact_store(caller=member.caller, subject=None, predicate=None, content="Deploys freeze on Fridays").memory
    again = upsert(member, "Deploys freeze on Fridays", "internal")
    assert (again.memory.id, again.created) == (fact.id, False)


def test_the_same_text_in_a_class_the_caller_cannot_read_names_nothing(member):
    secret = upsert(member, "The vault door code is 8812", "secret").memory
    with pytest.raises(Duplicate) as refused:
        upsert(member, "The vault door code is 8812", "public")
    assert str(secret.id) not in str(refused.value) and "secret" not in str(refused.value)
    assert not getattr(refused.value, "details", None)
