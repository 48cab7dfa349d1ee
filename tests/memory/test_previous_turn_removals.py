"""Every path by which a turn leaves retrieval takes its text out of the
vector of the turn after it (embedded with up to PREVIOUS_CHARS of it,
memory/embedtext.py), through ``embedtext.following_turns`` and
``vectors.turns_unembed`` as a forget does: roampal's lifecycle deleting a
memory (scored below its threshold, or by the sweep once time passed) and an
import linking a memory it holds to its successor. Real database, real model."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from memory.models import EmbeddingStatus, Memory
from memory.services.collections import collections_lifecycle, working_store
from memory.services.feedback import memory_feedback
from memory.services.imports import memories_import
from memory.services.memories import episode_store
from tests.memory.turn_vectors import made_from

pytestmark = [pytest.mark.django_db, pytest.mark.real_embedder]

SECRET = "my passport number is ZX-99, kept in the blue drawer of the hallway desk"
REPLY = "ok noted"
HEADER = {"type": "header", "format": "memproj-export/1", "tenant": "{}"}


def test_a_working_memory_deleted_by_its_scores_leaves_the_next_turns_vector(
    member, django_capture_on_commit_callbacks
):
    secret = working_store(caller=member.caller, content=SECRET, conversation_id="conv1")
    reply = working_store(caller=member.caller, content=REPLY, conversation_id="conv1")
    assert made_from(reply.pk, REPLY, previous=SECRET)
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(5):
            memory_feedback(caller=member.caller, memory_id=secret.pk, signal="failed")
            if Memory.objects.get(pk=secret.pk).validity == "retracted":
                break
    assert Memory.objects.get(pk=secret.pk).validity == "retracted"
    assert made_from(reply.pk, REPLY)


def test_the_lifecycle_sweep_reembeds_the_turns_after_the_memories_it_deletes_only(
    member, django_capture_on_commit_callbacks
):
    secret = working_store(caller=member.caller, content=SECRET, conversation_id="conv1")
    reply = working_store(caller=member.caller, content=REPLY, conversation_id="conv1")
    promoted = working_store(caller=member.caller, content="Did you like Rome?", conversation_id="conv2")
    answer = working_store(caller=member.caller, content="Loved it", conversation_id="conv2")
    Memory.objects.filter(pk=secret.pk).update(outcome_score=0.05)
    Memory.objects.filter(pk=promoted.pk).update(outcome_score=0.9, applied_count=3)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        result = collections_lifecycle()
    assert sorted(result.ids) == sorted([secret.pk, promoted.pk])
    assert Memory.objects.get(pk=secret.pk).validity == "retracted"
    assert Memory.objects.get(pk=promoted.pk).collection == "history"
    # At once: the reply has no vector; the turn after the promoted one keeps its own.
    assert Memory.objects.get(pk=reply.pk).embedding_status == EmbeddingStatus.PENDING
    assert made_from(answer.pk, "Loved it", previous="Did you like Rome?")
    for callback in callbacks:
        callback()
    assert made_from(reply.pk, REPLY)


def _export(tmp_path: Path, rows: list[dict]) -> str:
    path = tmp_path / f"export-{uuid.uuid4().hex[:6]}.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [HEADER, *rows]) + "\n")
    return str(path)


def test_an_import_that_links_a_turn_to_its_successor_reembeds_the_turn_after_it(
    member, tmp_path, django_capture_on_commit_callbacks
):
    now = timezone.now()
    old = {
        "type": "memory",
        "id": str(uuid.uuid4()),
        "kind": "episode",
        "content": SECRET,
        "session_id": "s1",
        "butler": "b",
        "created_at": (now - timedelta(minutes=1)).isoformat(),
        "expires_at": (now + timedelta(days=7)).isoformat(),
    }
    with django_capture_on_commit_callbacks(execute=True):
        memories_import(caller=member.caller, system="memproj", location=_export(tmp_path, [old]))
    reply = episode_store(caller=member.caller, content=REPLY, butler="b", session_id="s1")
    assert made_from(reply.pk, REPLY, previous=SECRET)
    # The same store exported again later: the turn was replaced by a correction.
    correction = {**old, "id": str(uuid.uuid4()), "session_id": "s2", "content": "it is in the red box"}
    with django_capture_on_commit_callbacks(execute=True):
        report = memories_import(
            caller=member.caller,
            system="memproj",
            location=_export(tmp_path, [{**old, "superseded_by_id": correction["id"]}, correction]),
        )
    assert report.superseded_links == 1
    assert Memory.objects.get(pk=old["id"]).validity == "superseded"
    assert made_from(reply.pk, REPLY)
