"""roampal's score_response / score_memories against an update of a scored
memory. The ids are looked up first (``collection_ids``: each id's current
version), then each outcome is applied in its own transaction, which checks
under the memory's lock that the version is still live. An update committing
in between replaces the version looked up: the outcome must land on the
version current now, as update_memory itself applies after another update,
not be skipped as if the id named nothing.

The interleaving is made deterministic by committing the update from inside
the window, right after the look-up."""

from __future__ import annotations

from typing import Any

import pytest

from memory import api
from memory.models import Memory
from tests.conftest import call

pytestmark = pytest.mark.django_db(transaction=True)

OLD = "The staging database listens on port 5433"
NEW = "The staging database listens on port 6543"


def update_after_lookup(monkeypatch: pytest.MonkeyPatch, raced: list[Memory]) -> None:
    """The first look-up of ids is followed by an update (committed) of the memory it found."""
    real = api.collection_ids

    def lookup_then_update(caller: Any, ids: Any) -> Any:
        found = real(caller, ids)
        if not raced:
            (pk,) = {memory.pk for memory in found.values()}  # the ids given name one memory
            raced.append(api.memory_bank_update(caller=caller, memory_id=pk, content=NEW)[1])
        return found

    monkeypatch.setattr(api, "collection_ids", lookup_then_update)


@pytest.mark.parametrize("tool", ["score_response", "score_memories"])
async def test_an_outcome_for_a_memory_updated_after_the_lookup_scores_its_current_version(
    member, mcp_client_for, monkeypatch, tool
):
    raced: list[Memory] = []
    arguments: dict[str, Any] = {"outcome": "worked"} if tool == "score_response" else {}
    async with mcp_client_for(member, "roampal") as client:
        added = await call(client, "add_to_memory_bank", content=OLD)
        update_after_lookup(monkeypatch, raced)
        scored = await call(client, tool, memory_scores={added["id"]: "worked"}, **arguments)
    assert raced, "the update did not run"
    assert scored["scored"] == {added["id"]: "worked"} and scored["skipped"] == [], scored
    assert scored["updated"] == 1
    current = await Memory.objects.aget(pk=raced[0].pk)
    assert (current.validity, current.applied_count, current.success_count) == ("active", 1, 1)
    replaced = await Memory.objects.aget(content=OLD)
    assert (replaced.validity, replaced.applied_count) == ("superseded", 0)


async def test_two_ids_of_one_memory_updated_after_the_lookup_score_it_once(member, mcp_client_for, monkeypatch):
    """The display id and the UUID name one memory: after the update both
    resolve to its new version, which gets one outcome, not two."""
    raced: list[Memory] = []
    async with mcp_client_for(member, "roampal") as client:
        added = await call(client, "add_to_memory_bank", content=OLD)
        first = await Memory.objects.aget(content=OLD)
        update_after_lookup(monkeypatch, raced)
        scored = await call(client, "score_memories", memory_scores={added["id"]: "worked", str(first.pk): "failed"})
    assert scored["scored"] == {added["id"]: "worked"} and scored["skipped"] == [str(first.pk)], scored
    current = await Memory.objects.aget(pk=raced[0].pk)
    assert (current.applied_count, current.success_count) == (1, 1)
