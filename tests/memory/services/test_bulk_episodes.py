"""Bulk episode import (``episodes_store_bulk`` and ``manage.py ingest_episodes``):
the same rules as one ``episode_store``, all or nothing per call, an audit event
and an embed follow-up per episode, keyword-searchable at once, embedded by
the worker path."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from memory import api
from memory.models import FollowUp, FollowUpKind, Memory, MemoryEvent
from memory.services import followups
from memory.services.followups import followup_transport
from memory.services.memories import BULK_EPISODES_MAX
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db(transaction=True)


def _episodes(n: int, **extra) -> list[dict]:
    return [{"content": f"Session {i}: we moved the kettle {i} metres", "butler": "home", **extra} for i in range(n)]


def test_bulk_store_gives_every_episode_what_a_single_store_gives(member, outsider, monkeypatch):
    transport = followup_transport(FollowUpKind.EMBED)
    assert transport is not None
    sent: list[list[str]] = []
    # The real transport (eager Celery here), watched: one embed task for the whole call.
    monkeypatch.setitem(followups._TRANSPORT, FollowUpKind.EMBED.value, lambda ids: (sent.append(ids), transport(ids)))
    single = api.episode_store(caller=member.caller, content="one at a time", butler="home", session_id="s0")
    rows = api.episodes_store_bulk(caller=member.caller, episodes=_episodes(3, session_id="s1", tags=["trip"]))
    stored = Memory.objects.filter(pk__in=[r.pk for r in rows]).order_by("content")
    assert [m.content for m in stored] == [f"Session {i}: we moved the kettle {i} metres" for i in range(3)]
    single_ttl = single.expires_at - single.created_at
    for memory in stored:
        assert (memory.tenant_id, memory.principal_id) == (single.tenant_id, single.principal_id)
        assert memory.kind == "episode"
        assert (memory.session_id, memory.tags, memory.butler) == ("s1", ["trip"], "home")
        # The session TTL of the tenant policy, as for a single episode.
        assert abs((memory.expires_at - memory.created_at) - single_ttl).total_seconds() < 5
    events = MemoryEvent.objects.filter(memory_id__in=[r.pk for r in rows], event_type="stored")
    assert sorted(e.memory_id for e in events) == sorted(r.pk for r in rows)
    assert FollowUp.objects.filter(memory_id__in=[r.pk for r in rows], kind="embed").count() == 3
    assert sent == [[str(r.pk) for r in rows]]  # the single store embedded inline (sync mode)
    assert FollowUp.objects.filter(memory_id__in=[r.pk for r in rows], done_at__isnull=True).count() == 0
    # Eager tasks ran the embed follow-ups on commit: vectors from the worker path.
    assert set(Memory.objects.filter(pk__in=[r.pk for r in rows]).values_list("embedding_status", flat=True)) == {
        "ready"
    }
    hits = api.memory_search(
        caller=member.caller, query=api.SearchQuery("kettle metres", types=["episode"], mode="keyword")
    )
    assert {h.memory.pk for h in hits} >= {r.pk for r in rows}
    assert api.memory_search(caller=outsider.caller, query=api.SearchQuery("kettle metres", mode="keyword")) == []


@pytest.mark.parametrize(
    "episodes, message",
    [
        (_episodes(2) + [{"content": "x", "butler": "home", "importance": 11}], "episodes[2]: importance"),
        (_episodes(1) + [{"content": "x", "butler": "home", "mood": "happy"}], "episodes[1] has unknown fields"),
        ([{"content": "no butler"}], "episodes[0] needs butler"),
        (_episodes(1) + [{"content": "", "butler": "home"}], "episodes[1]: content"),
        ([{"content": "bad\x00text", "butler": "home"}], "episodes[0]: content"),
        ([{"content": "x", "butler": "home", "metadata": ["not", "an", "object"]}], "metadata must be an object"),
        (_episodes(2) + ["just a string"], "episodes[2] must be an object"),
        ([], "at least one episode"),
        ("not a list", "must be a list"),
        (_episodes(BULK_EPISODES_MAX + 1), f"at most {BULK_EPISODES_MAX} episodes"),
    ],
)
def test_a_bad_episode_stores_nothing_of_its_call(member, episodes, message):
    before = (Memory.objects.count(), MemoryEvent.objects.count(), FollowUp.objects.count())
    with pytest.raises(api.InvalidArgument, match=message.replace("[", r"\[").replace("]", r"\]")):
        api.episodes_store_bulk(caller=member.caller, episodes=episodes)
    assert (Memory.objects.count(), MemoryEvent.objects.count(), FollowUp.objects.count()) == before


def test_a_read_only_token_cannot_bulk_store(db):
    reader = make_identity("tenant-a", "reader", scopes=["read"])
    with pytest.raises(api.PermissionDenied):
        api.episodes_store_bulk(caller=reader.caller, episodes=_episodes(1))
    assert Memory.objects.count() == 0


def test_ingest_episodes_command_stores_in_batches_and_stops_at_a_bad_line(member, tmp_path):
    path = tmp_path / "history.jsonl"
    good = [json.dumps(e) for e in _episodes(5)]
    path.write_text("\n".join(good[:3] + [""] + good[3:]) + "\n")
    out = io.StringIO()
    call_command("ingest_episodes", str(path), "--tenant", "tenant-a", "--batch", "2", stdout=out)
    assert out.getvalue().strip() == "stored 5 episodes in tenant 'tenant-a'; the worker embeds them"
    assert Memory.objects.filter(tenant_id=member.caller.tenant_id, kind="episode").count() == 5

    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(good[:2] + ['{"content": "half', *good[2:]]) + "\n")
    with pytest.raises(CommandError, match=r"bad.jsonl:3: not JSON .*; 2 episodes stored before it"):
        call_command("ingest_episodes", str(bad), "--tenant", "tenant-a", "--batch", "2", stdout=io.StringIO())
    assert Memory.objects.filter(tenant_id=member.caller.tenant_id, kind="episode").count() == 7
    with pytest.raises(CommandError, match="no tenant 'nobody'"):
        call_command("ingest_episodes", str(path), "--tenant", "nobody")
