"""roampal's update of a memory_bank entry (``memory_bank_update``) against an
outcome on that entry. The update reads the entry, embeds the new text (before
its transaction, so it takes a while) and only then locks the entry's key; the
new version carries the entry's confidence over. A feedback that changes the
confidence (pce's outdated, harmful, helpful) committing in that window
answered success and was then lost: the new version had the confidence read
before it. The interleaving is made deterministic by committing the feedback
from inside the window (the update's embedding of its new text)."""

from __future__ import annotations

from typing import Any

import pytest

from memory import api
from memory.models import Memory

pytestmark = pytest.mark.django_db(transaction=True)

OLD = "The on-call rotation changes on Mondays"
NEW = "The on-call rotation changes on Tuesdays"


def feedback_while_embedding(monkeypatch: pytest.MonkeyPatch, identity: Any, entry: Memory, signal: str) -> list:
    from memory.services import memories

    real = memories._embed_for_store
    answers: list = []

    def embed(content: str, **kwargs: Any) -> Any:
        if content == NEW and not answers:
            answers.append(api.memory_feedback(caller=identity.caller, memory_id=entry.pk, signal=signal))
        return real(content, **kwargs)

    monkeypatch.setattr(memories, "_embed_for_store", embed)
    return answers


def test_an_update_keeps_a_confidence_an_outcome_moved_after_the_entry_was_read(member, monkeypatch):
    entry = api.memory_bank_store(caller=member.caller, content=OLD)
    answers = feedback_while_embedding(monkeypatch, member, entry, "outdated")
    replaced, new = api.memory_bank_update(caller=member.caller, memory_id=entry.pk, content=NEW)
    assert answers and answers[0].applied, "the feedback did not run"
    moved = Memory.objects.get(pk=entry.pk).confidence
    assert moved == pytest.approx(entry.confidence - 0.2)
    assert replaced.pk == entry.pk
    assert Memory.objects.get(pk=new.pk).confidence == pytest.approx(moved)
    assert new.confidence == pytest.approx(moved)
