"""Two rules of the write services that every dialect inherits:

- a keyed fact store that replaces a fact of a boundary class the caller's
  reads cannot see does not name it in its answer (the memory dialect's
  ``superseded_ids``): a claim is keyed by the hash of its text, so naming it
  would confirm a guess of a secret's text, which no read answers;
- a forgotten (retracted) memory cannot be superseded afterwards (memento's
  supersede_memory, a conflict accepted, a worker's duplicate merge): the
  forget stays what it was, and the forgotten id does not come to lead to
  the replacement."""

from __future__ import annotations

import pytest

from memory import api
from memory.claims import CLAIM_SUBJECT
from memory.models import Memory, Validity
from memory.validation import content_hash

pytestmark = pytest.mark.django_db


def test_replacing_a_hidden_fact_does_not_name_it(member):
    caller = member.caller
    secret_text = "The vault password is hunter2"
    secret = api.claim_upsert(
        caller=caller, text=secret_text, provenance={"at": "2025-01-01T00:00:00Z"}, boundary_class="secret"
    ).memory
    assert secret.boundary_class == "secret"

    guessed = api.fact_store(
        caller=caller, subject=CLAIM_SUBJECT, predicate=content_hash(secret_text), content="a guess", scope="project"
    )
    missed = api.fact_store(
        caller=caller,
        subject=CLAIM_SUBJECT,
        predicate=content_hash("The vault password is letmein"),
        content="a guess",
        scope="project",
    )

    # The answer to a right guess looks like the answer to a wrong one.
    assert guessed.superseded_ids == missed.superseded_ids == []
    # The write itself still happened (one active fact per key), and the
    # complete list is there for the admin.
    assert guessed.superseded_all_ids == [secret.pk]
    assert Memory.objects.get(pk=secret.pk).validity == Validity.SUPERSEDED


def test_replacing_a_visible_fact_still_names_it(member):
    caller = member.caller
    old = api.fact_store(caller=caller, subject="user", predicate="city", content="Austin").memory
    new = api.fact_store(caller=caller, subject="user", predicate="city", content="Boston")
    assert new.superseded_ids == [old.pk]
    assert new.superseded_all_ids == [old.pk]


def test_a_forgotten_memory_cannot_be_superseded(member):
    caller = member.caller
    forgotten = api.fact_store(caller=caller, subject=None, predicate=None, content="the user likes tea").memory
    replacement = api.fact_store(caller=caller, subject=None, predicate=None, content="the user likes coffee").memory
    api.memory_forget(caller=caller, kind="fact", memory_id=forgotten.pk)

    with pytest.raises(api.InvalidArgument, match="forgotten"):
        api.memory_supersede(caller=caller, old_id=forgotten.pk, new_id=replacement.pk)

    forgotten.refresh_from_db()
    assert forgotten.validity == Validity.RETRACTED
    assert forgotten.superseded_by_id is None
    assert api.memory_supersedes_map(caller=caller, memory_ids=[replacement.pk]) == {}


def test_superseding_then_forgetting_keeps_the_forget(member):
    """The other order: the forget of a superseded memory retracts it."""
    caller = member.caller
    old = api.fact_store(caller=caller, subject=None, predicate=None, content="the user lives in Austin").memory
    new = api.fact_store(caller=caller, subject=None, predicate=None, content="the user lives in Boston").memory
    api.memory_supersede(caller=caller, old_id=old.pk, new_id=new.pk)
    api.memory_forget(caller=caller, kind="fact", memory_id=old.pk)
    old.refresh_from_db()
    assert old.validity == Validity.RETRACTED
