"""Bulk episode import (``episodes_store_bulk``, ``episodes_store_batches`` and
``manage.py ingest_episodes``): the same rules as one ``episode_store``, all or
nothing per call, an audit event per episode, keyword-searchable at once; each
episode embedded before it is stored and written once with its vector, or
stored pending with an embed follow-up for the worker when it cannot be
embedded now."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import DataError, IntegrityError, connection, transaction

from memory import api, embedtext
from memory.embeddings import get_embedder, set_embedder
from memory.models import FollowUp, FollowUpKind, Memory, MemoryEvent
from memory.services import followups
from memory.services.followups import followup_transport
from memory.services.memories import BULK_EPISODES_MAX, _copy_values, _memories_copy, episodes_store_batches
from memory.services.pipeline import followups_embed_run
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db(transaction=True)


def _episodes(n: int, **extra) -> list[dict]:
    return [{"content": f"Session {i}: we moved the kettle {i} metres", "butler": "home", **extra} for i in range(n)]


@pytest.fixture
def embed_sent(monkeypatch) -> list[list[str]]:
    """The embed follow-ups enqueued (the real transport, eager Celery here, watched)."""
    transport = followup_transport(FollowUpKind.EMBED)
    assert transport is not None
    sent: list[list[str]] = []

    def watched(ids: list[str], bulk: bool) -> object:
        sent.append(ids)
        return transport(ids, bulk)

    monkeypatch.setitem(followups._TRANSPORT, FollowUpKind.EMBED.value, watched)
    return sent


def _xmins(table: str, column: str, ids) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT xmin::text::bigint FROM {table} WHERE {column} = ANY(%s)", [list(ids)])  # noqa: S608
        return {row[0] for row in cursor.fetchall()}


def test_bulk_store_gives_every_episode_what_a_single_store_gives(member, outsider, embed_sent):
    single = api.episode_store(caller=member.caller, content="one at a time", butler="home", session_id="s0")
    rows = api.episodes_store_bulk(caller=member.caller, episodes=_episodes(3, session_id="s1", tags=["trip"]))
    stored = Memory.objects.filter(pk__in=[r.pk for r in rows]).order_by("content")
    assert [m.content for m in stored] == [f"Session {i}: we moved the kettle {i} metres" for i in range(3)]
    assert single.expires_at is not None
    single_ttl = single.expires_at - single.created_at
    for memory in stored:
        assert (memory.tenant_id, memory.principal_id) == (single.tenant_id, single.principal_id)
        assert memory.kind == "episode"
        assert (memory.session_id, memory.tags, memory.butler) == ("s1", ["trip"], "home")
        # The session TTL of the tenant policy, as for a single episode.
        assert memory.expires_at is not None
        assert abs((memory.expires_at - memory.created_at) - single_ttl).total_seconds() < 5
        # Embedded before it was stored, as the single store embeds (sync mode).
        assert (memory.embedding_status, memory.embedding_model) == (single.embedding_status, single.embedding_model)
        assert memory.embedding_model == embedtext.embedding_identity(get_embedder().model_name, in_session=True)
        text = embedtext.texts_for_embedding([(memory.pk, memory.kind, memory.content)])
        assert memory.embedding == pytest.approx(get_embedder().embed(text)[0], abs=1e-6)
    events = MemoryEvent.objects.filter(memory_id__in=[r.pk for r in rows], event_type="stored")
    assert sorted((e.memory_id for e in events), key=str) == sorted((r.pk for r in rows), key=str)
    # Written once, with the vector, by the transaction that wrote their events: no later UPDATE.
    assert _xmins("memory_memory", "id", [r.pk for r in rows]) == _xmins(
        "memory_memoryevent", "memory_id", [r.pk for r in rows]
    )
    assert len(_xmins("memory_memory", "id", [r.pk for r in rows])) == 1
    # Nothing left for the worker.
    assert embed_sent == []
    assert not FollowUp.objects.filter(memory_id__in=[r.pk for r in rows]).exists()
    hits = api.memory_search(
        caller=member.caller, query=api.SearchQuery("kettle metres", types=["episode"], mode="keyword")
    )
    assert {h.memory.pk for h in hits} >= {r.pk for r in rows}
    semantic = api.memory_search(
        caller=member.caller, query=api.SearchQuery("we moved the kettle", types=["episode"], mode="semantic")
    )
    assert {h.memory.pk for h in semantic} >= {r.pk for r in rows}
    assert api.memory_search(caller=outsider.caller, query=api.SearchQuery("kettle metres", mode="keyword")) == []


def test_bulk_store_during_an_embedder_outage_keeps_every_episode_pending(member, embedder_outage, monkeypatch):
    embed_sent: list[list[str]] = []  # enqueued, not run: the worker is down with the embedder
    monkeypatch.setitem(followups._TRANSPORT, FollowUpKind.EMBED.value, lambda ids, bulk: embed_sent.append(ids))
    rows = api.episodes_store_bulk(caller=member.caller, episodes=_episodes(3))
    ids = [r.pk for r in rows]
    stored = list(Memory.objects.filter(pk__in=ids))
    assert len(stored) == 3
    assert {(m.embedding_status, m.embedding is None, m.embedding_attempts) for m in stored} == {("pending", True, 1)}
    assert all(m.embedding_error for m in stored)
    # Keyword-searchable at once, and one embed follow-up per episode for the worker.
    hits = api.memory_search(
        caller=member.caller, query=api.SearchQuery("kettle metres", types=["episode"], mode="keyword")
    )
    assert {h.memory.pk for h in hits} >= set(ids)
    assert FollowUp.objects.filter(memory_id__in=ids, kind="embed", done_at__isnull=True).count() == 3
    assert embed_sent == [[str(pk) for pk in ids]]
    set_embedder(embedder_outage)  # the embedder is back: the worker gives them their vectors
    assert followups_embed_run(memory_ids=ids) == 3
    assert set(Memory.objects.filter(pk__in=ids).values_list("embedding_status", flat=True)) == {"ready"}
    assert FollowUp.objects.filter(memory_id__in=ids, kind="embed", done_at__isnull=True).count() == 0


def test_bulk_store_without_embedding_leaves_it_to_the_worker(member, embed_sent):
    rows = api.episodes_store_bulk(caller=member.caller, episodes=_episodes(3), embed=False)
    ids = [r.pk for r in rows]
    assert [r.embedding_status for r in rows] == ["pending"] * 3
    assert FollowUp.objects.filter(memory_id__in=ids, kind="embed").count() == 3
    assert embed_sent == [[str(pk) for pk in ids]]  # one embed task for the whole call
    # Eager tasks ran the embed follow-ups on commit: vectors from the worker path.
    assert set(Memory.objects.filter(pk__in=ids).values_list("embedding_status", flat=True)) == {"ready"}
    assert FollowUp.objects.filter(memory_id__in=ids, done_at__isnull=True).count() == 0


def test_bulk_stores_embed_each_session_episode_with_the_turn_before_it(member, settings, monkeypatch):
    """Within a call, across the batches of a stream (embedded while the batch
    before is still being written) and after turns stored earlier: each text
    is the one the worker path makes from the stored rows."""
    settings.MEMPROJ = {**settings.MEMPROJ, "EMBED_TEXT": "ctx1short"}
    monkeypatch.setitem(followups._TRANSPORT, FollowUpKind.EMBED.value, lambda ids, bulk: None)  # no worker run
    seen: list[str] = []
    real_embed = get_embedder().embed

    def recording_embed(texts: list[str]) -> list[list[float]]:
        seen.extend(texts)
        return real_embed(texts)

    monkeypatch.setattr(get_embedder(), "embed", recording_embed)
    api.episodes_store_bulk(
        caller=member.caller,
        episodes=[{"content": "stored before: do you cook?", "butler": "home", "session_id": "s1"}],
    )
    batches = [
        [
            {"content": "Only pasta.", "butler": "home", "session_id": "s1"},
            {"content": "a new session opens", "butler": "home", "session_id": "s2"},
            {"content": "a note of no session", "butler": "home"},
        ],
        [
            {"content": "Which kind?", "butler": "home", "session_id": "s1"},
            {"content": "its second turn", "butler": "home", "session_id": "s2"},
        ],
    ]
    stored = [m for rows in episodes_store_batches(caller=member.caller, batches=batches) for m in rows]
    rows = list(Memory.objects.filter(pk__in=[m.pk for m in stored]).order_by("created_at", "id"))
    model = get_embedder().model_name
    assert {m.content: (m.embedding_status, m.embedding_model) for m in rows} == {
        "Only pasta.": ("ready", f"{model}+ctx1short"),
        "a new session opens": ("ready", f"{model}+ctx1short"),
        "a note of no session": ("ready", model),  # embedded as stored under every version
        "Which kind?": ("ready", f"{model}+ctx1short"),
        "its second turn": ("ready", f"{model}+ctx1short"),
    }
    assert FollowUp.objects.filter(memory_id__in=[m.pk for m in rows], kind="embed").count() == 0
    worker_texts = embedtext.texts_for_embedding([(m.pk, m.kind, m.content) for m in rows])
    assert sorted(worker_texts) == sorted(seen[1:])
    assert "Only pasta.\n(previous turn: stored before: do you cook?)" in worker_texts
    assert "Which kind?\n(previous turn: Only pasta.)" in worker_texts
    assert "its second turn\n(previous turn: a new session opens)" in worker_texts
    assert "a note of no session" in worker_texts


def test_batches_are_embedded_ahead_and_a_bad_batch_stores_nothing_of_itself(member):
    log: list[str] = []
    batches = [_episodes(2), _episodes(2), [{"content": "x", "butler": "home", "importance": 11}], _episodes(2)]

    def read():
        for index, batch in enumerate(batches):
            log.append(f"read {index}")
            yield batch

    stream = episodes_store_batches(caller=member.caller, batches=read())
    stored: list[list[Memory]] = []
    with pytest.raises(api.InvalidArgument, match="importance"):
        for rows in stream:
            log.append(f"stored {len(stored)}")
            stored.append(rows)
    # The next batch is read (and embedded) before one is written; the bad one's
    # predecessors are stored, nothing of it, and nothing after it is read.
    assert log == ["read 0", "read 1", "stored 0", "read 2", "stored 1"]
    assert [len(rows) for rows in stored] == [2, 2]
    assert Memory.objects.filter(tenant_id=member.caller.tenant_id).count() == 4
    assert {m.embedding_status for m in Memory.objects.filter(tenant_id=member.caller.tenant_id)} == {"ready"}


def test_a_batch_that_cannot_be_read_stores_the_ones_before_it(member):
    def read():
        yield _episodes(2)
        raise OSError("the file went away")

    stored: list[list[Memory]] = []
    with pytest.raises(OSError, match="went away"):
        for rows in episodes_store_batches(caller=member.caller, batches=read()):
            stored.append(rows)
    assert [len(rows) for rows in stored] == [2]
    assert Memory.objects.filter(tenant_id=member.caller.tenant_id).count() == 2


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
    assert out.getvalue().strip() == "stored 5 episodes in tenant 'tenant-a'; embedded 5 now, 0 left to the worker"
    assert (
        Memory.objects.filter(tenant_id=member.caller.tenant_id, kind="episode", embedding_status="ready").count() == 5
    )

    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(good[:2] + ['{"content": "half', *good[2:]]) + "\n")
    with pytest.raises(CommandError, match=r"bad.jsonl:3: not JSON .*; 2 episodes stored before it"):
        call_command("ingest_episodes", str(bad), "--tenant", "tenant-a", "--batch", "2", stdout=io.StringIO())
    assert Memory.objects.filter(tenant_id=member.caller.tenant_id, kind="episode").count() == 7
    with pytest.raises(CommandError, match="no tenant 'nobody'"):
        call_command("ingest_episodes", str(path), "--tenant", "nobody")


def test_ingest_episodes_command_names_the_batch_of_an_invalid_episode(member, tmp_path):
    path = tmp_path / "history.jsonl"
    lines = [json.dumps(e) for e in _episodes(3)] + [json.dumps({"content": "x", "butler": "home", "importance": 11})]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CommandError, match=r"the batch from line 3: episodes\[1\]: importance.*; 2 episodes stored"):
        call_command("ingest_episodes", str(path), "--tenant", "tenant-a", "--batch", "2", stdout=io.StringIO())
    assert Memory.objects.filter(tenant_id=member.caller.tenant_id).count() == 2


def test_ingest_episodes_command_can_leave_embedding_to_the_worker(member, tmp_path, monkeypatch):
    monkeypatch.setitem(followups._TRANSPORT, FollowUpKind.EMBED.value, lambda ids, bulk: None)  # no worker run
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in _episodes(3)) + "\n")
    out = io.StringIO()
    call_command("ingest_episodes", str(path), "--tenant", "tenant-a", "--no-embed", stdout=out)
    assert out.getvalue().strip() == "stored 3 episodes in tenant 'tenant-a'; embedded 0 now, 3 left to the worker"
    assert FollowUp.objects.filter(kind="embed", done_at__isnull=True).count() == 3


def test_a_row_the_database_refuses_raises_djangos_error_and_stores_nothing(member):
    """A store writes its row with the bulk writes' COPY: a refusal must still be
    Django's IntegrityError (what the dialects code as a storage error), and
    the transaction it happened in stores nothing."""
    stored = api.episode_store(caller=member.caller, content="The release train leaves on Tuesdays", butler="general")
    again = Memory.objects.get(pk=stored.pk)
    again._state.adding = True
    again.content = "a second row under the same id"
    with pytest.raises(IntegrityError), transaction.atomic():
        _memories_copy([again], _copy_values([again], {}))
    assert list(Memory.objects.values_list("content", flat=True)) == ["The release train leaves on Tuesdays"]


@pytest.mark.parametrize("count", [2**31, 2**40 + 5, -(2**31) - 1])
def test_an_integer_past_its_column_is_refused_not_wrapped(member, count):
    """COPY's binary integers would wrap 2**40 + 5 into 5: refused as an INSERT is."""
    row = Memory(
        tenant_id=member.caller.tenant_id,
        kind="fact",
        content="The deploy key rotates monthly",
        content_hash="x",
        butler="general",
        reference_count=count,
    )
    with pytest.raises(DataError, match="reference_count"), transaction.atomic():
        _memories_copy([row], _copy_values([row], {}))
    assert not Memory.objects.exists()
