"""Records an import cannot store as they are: numbers past a column's range,
fields of the wrong type, rows that are not objects, vectors that are not
finite, out of range or of another dimension, times in the future. Each is
skipped with its reason (or, for a vector, replaced by memproj's own
embedding of the text), the dry run reports exactly what the real import
does, the rest of the store comes in, and nothing raises. Also: the tenant's
quota as a dry run predicts it and as a real run reports it, the decay state
an imported fact gets, and an import racing a store of the same fact key."""

from __future__ import annotations

import json
import math
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from memory import scoring
from memory.embeddings import get_embedder
from memory.errors import QuotaExceeded
from memory.models import EmbeddingStatus, Memory
from memory.services import imports
from memory.services.imports import ImportReport, memories_import
from memory.services.memories import fact_store, memory_restore
from memory.services.sweeps import facts_decay
from policy.services.policies import policy_apply
from policy.services.tokens import token_authenticate
from tests.conftest import make_identity

HEADER = {"type": "header", "format": "memproj-export/1", "tenant": "{}"}


def memproj_file(tmp_path: Path, rows: list[Any]) -> str:
    path = tmp_path / f"export-{uuid.uuid4().hex[:6]}.jsonl"
    with path.open("w") as handle:
        handle.write(json.dumps(HEADER) + "\n")
        for row in rows:
            handle.write(json.dumps(row, allow_nan=True) + "\n")
    return str(path)


def row(i: int, **fields: Any) -> dict[str, Any]:
    out = {"type": "memory", "id": str(uuid.uuid4()), "kind": "fact", "content": f"zebra fact number {i}"}
    out.update(fields)
    return out


def both(caller, system: str, location: str, **kwargs: Any) -> tuple[ImportReport, ImportReport]:
    """The dry run's report, then the real import's."""
    dry = memories_import(caller=caller, system=system, location=location, dry_run=True, **kwargs)
    assert Memory.objects.filter(tenant_id=caller.tenant_id).count() == 0
    real = memories_import(caller=caller, system=system, location=location, **kwargs)
    return dry, real


def assert_same_plan(dry: ImportReport, real: ImportReport) -> None:
    assert dry.created == real.created
    assert dry.skipped == real.skipped
    assert dry.noted == real.noted


def stored(caller) -> int:
    return Memory.objects.filter(tenant_id=caller.tenant_id).count()


@pytest.fixture
def caller(db):
    return make_identity("hostile-imports", "owner", role="admin").caller


# --- numbers past a column's range ---------------------------------------------------------


@pytest.mark.django_db
def test_a_count_past_the_integer_column_is_skipped_in_the_dry_run_and_the_import(tmp_path, caller):
    rows = [row(i) for i in range(250)] + [row(250, harmful_count=1e300)] + [row(i) for i in range(251, 260)]
    rows += [row(260, reference_count=3_000_000_000), row(261, kind="rule", applied_count=2**40)]
    dry, real = both(caller, "memproj", memproj_file(tmp_path, rows))
    assert_same_plan(dry, real)
    assert real.created == {"fact": 259}
    reasons = " ".join(real.skipped)
    assert "harmful_count" in reasons and "reference_count" in reasons and "applied_count" in reasons
    assert sum(real.skipped.values()) == 3
    assert stored(caller) == 259
    # A second run finishes: nothing new, nothing raised.
    again = memories_import(caller=caller, system="memproj", location=memproj_file(tmp_path, rows))
    assert again.created_total == 0 and stored(caller) == 259


# --- fields of the wrong type, rows that are not objects -----------------------------------

WRONG_TYPES = [
    ("metadata", [1, 2]),
    ("metadata", {"x": float("nan")}),
    ("tags", 5),
    ("tags", [1, {"x": 2}]),
    ("namespace", 7),
    ("namespace", [1, 2]),
    ("content", {"a": 1}),
    ("scope", ["x"]),
    ("subject", {"k": 1}),
    ("session_id", "a\x00b"),
    ("collection", "x" * 40),
    ("source", "s" * 100),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), WRONG_TYPES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG_TYPES)])
def test_a_field_of_the_wrong_type_skips_only_its_record(tmp_path, caller, name, value):
    rows = [row(i) for i in range(3)] + [row(3, **{name: value})]
    dry, real = both(caller, "memproj", memproj_file(tmp_path, rows))
    assert_same_plan(dry, real)
    assert real.created == {"fact": 3} or (name in ("source", "collection") and real.created == {"fact": 4})
    if real.created == {"fact": 3}:
        (reason,) = real.skipped
        assert name in reason or name.rstrip("s") in reason
        assert "Traceback" not in reason and "psycopg" not in reason
    assert stored(caller) == real.created_total


@pytest.mark.django_db
def test_rows_without_an_id_or_that_are_not_objects_are_skipped(tmp_path, caller):
    rows = [row(0), {"type": "memory", "content": "no id here"}, "just a string", [1, 2], 5, None, row(1)]
    dry, real = both(caller, "memproj", memproj_file(tmp_path, rows))
    assert_same_plan(dry, real)
    assert real.created == {"fact": 2}
    assert sum(real.skipped.values()) == 5
    assert stored(caller) == 2


# --- vectors ------------------------------------------------------------------------------

BAD_VECTORS = {
    "nan": [float("nan")] * 384,
    "inf": [float("inf")] + [0.1] * 383,
    "past float32": [1e39] * 384,
    "past halfvec": [3e38] * 384,
    "just past halfvec": [70000.0] + [0.1] * 383,
    "strings": ["abc"] * 384,
    "nulls": [None] * 384,
    "booleans": [True] * 384,
    "zero": [0.0] * 384,
    "short": [0.1] * 383,
}


@pytest.mark.django_db
def test_a_vector_that_cannot_be_stored_is_replaced_by_memprojs_own(tmp_path, caller):
    model = get_embedder().model_name
    rows = [row(i) for i in range(3)]
    for i, (name, vector) in enumerate(BAD_VECTORS.items()):
        rows.append(row(10 + i, content=f"vector case {name}", embedding=vector, embedding_model=model))
    dry, real = both(caller, "memproj", memproj_file(tmp_path, rows))
    assert_same_plan(dry, real)
    assert real.created == {"fact": 3 + len(BAD_VECTORS)} and not real.skipped
    assert sum(real.noted.values()) == len(BAD_VECTORS)
    for name in BAD_VECTORS:
        memory = Memory.objects.get(tenant_id=caller.tenant_id, content=f"vector case {name}")
        assert memory.embedding_status == EmbeddingStatus.READY
        expected = get_embedder().embed([memory.content])[0]
        assert [round(x, 5) for x in memory.embedding] == [round(x, 5) for x in expected]


@pytest.mark.django_db
def test_a_valid_vector_of_memprojs_model_is_kept_at_unit_length(tmp_path, caller):
    model = get_embedder().model_name
    own = get_embedder().embed(["some other text entirely"])[0]
    rows = [row(0, content="kept vector", embedding=[x * 40000 for x in own], embedding_model=model)]
    dry, real = both(caller, "memproj", memproj_file(tmp_path, rows))
    assert_same_plan(dry, real)
    assert not real.noted and real.created == {"fact": 1}
    memory = Memory.objects.get(tenant_id=caller.tenant_id)
    assert math.isclose(math.sqrt(sum(x * x for x in memory.embedding)), 1.0, rel_tol=1e-4)
    assert [round(x, 4) for x in memory.embedding] == [round(x, 4) for x in own]


@pytest.mark.django_db
def test_a_memento_export_with_a_nan_vector_comes_in_whole(tmp_path, caller, monkeypatch):
    monkeypatch.setattr("memory.importers.memento.MODEL", get_embedder().model_name)
    nodes: list[dict[str, Any]] = [
        {"id": str(uuid.uuid4()), "content": f"memento node {i} about the copper kettle"} for i in range(260)
    ]
    nodes[250]["embedding"] = [float("nan")] * 384
    nodes[251]["embedding"] = ["x"] * 384
    nodes[252]["content"] = {"not": "text"}
    path = tmp_path / "memento.json"
    path.write_text(json.dumps(nodes))
    dry, real = both(caller, "memento", str(path))
    assert_same_plan(dry, real)
    assert real.created == {"fact": 259} and sum(real.skipped.values()) == 1
    assert sum(real.noted.values()) == 2
    assert stored(caller) == 259


# --- the other readers ----------------------------------------------------------------------


@pytest.mark.django_db
def test_mem0_metadata_that_is_not_an_object_skips_its_memory(tmp_path, caller):
    items: list[Any] = [{"id": str(uuid.uuid4()), "memory": f"mem0 item {i} walrus"} for i in range(3)]
    items.append({"id": str(uuid.uuid4()), "memory": "bad metadata", "metadata": [1, 2, 3]})
    items.append({"id": str(uuid.uuid4()), "memory": {"not": "text"}})
    items.append("not an object")
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps({"results": items}))
    dry, real = both(caller, "mem0", str(path))
    assert_same_plan(dry, real)
    assert real.created == {"fact": 3}
    assert any("metadata" in reason for reason in real.skipped)
    assert stored(caller) == 3


@pytest.mark.django_db
def test_mcp_memory_lines_of_the_wrong_shape(tmp_path, caller):
    lines = [
        {"type": "entity", "name": "alice", "entityType": "person", "observations": ["likes tea"]},
        [1, 2],
        "a string line",
        {"type": "entity", "name": "bob", "entityType": "person", "observations": 5},
        {"type": "entity", "name": "carol", "entityType": "person", "observations": "a long string"},
        {"type": "entity", "name": {"x": 1}, "entityType": "person", "observations": ["x"]},
        {"type": "entity", "name": "dan\x00", "entityType": "person", "observations": ["plays chess"]},
        {"type": "relation", "from": "alice", "to": "carol", "relationType": "knows"},
        {"type": "relation", "from": ["alice"], "to": "carol", "relationType": "knows"},
    ]
    path = tmp_path / "memory.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    dry, real = both(caller, "mcp-memory", str(path))
    assert_same_plan(dry, real)
    assert (dry.entities, dry.relations) == (real.entities, real.relations)
    contents = sorted(Memory.objects.filter(tenant_id=caller.tenant_id).values_list("content", flat=True))
    # "a long string" is one observation, not one memory per character.
    assert contents == ["a long string", "likes tea"]
    assert (real.entities, real.relations) == (3, 1)
    assert sum(real.skipped.values()) == 7


# --- times and the decay state --------------------------------------------------------------


@pytest.mark.django_db
def test_future_times_are_clamped_and_imported_facts_get_their_decay_state(tmp_path, caller):
    mid = str(uuid.uuid4())
    rows = [
        row(
            0,
            id=mid,
            content="imported fact confirmed far in the future",
            validity="retracted",
            last_confirmed_at="9999-12-30T00:00:00+00:00",
            created_at="2024-01-01T00:00:00Z",
            permanence="standard",
        ),
        row(1, content="a fact from the future", created_at="9000-01-01T00:00:00Z", accessed_at="9000-01-01"),
        row(2, content="an old standard fact", created_at="2020-01-01T00:00:00Z", permanence="standard"),
        row(3, content="a new standard fact", permanence="standard"),
    ]
    before = timezone.now()
    dry, real = both(caller, "memproj", memproj_file(tmp_path, rows))
    assert_same_plan(dry, real)
    after = timezone.now()
    for memory in Memory.objects.filter(tenant_id=caller.tenant_id):
        for name in ("created_at", "updated_at", "occurred_at", "last_confirmed_at", "accessed_at"):
            value = getattr(memory, name)
            assert value is None or value <= after, (memory.content, name, value)
        assert memory.fact_state, memory.content
        state, _ = scoring.fact_state_schedule(
            confidence=memory.confidence,
            decay_rate=memory.decay_rate,
            confirmed_at=memory.last_confirmed_at or memory.created_at,
            now=after,
        )
        assert memory.fact_state == state
    new = Memory.objects.get(tenant_id=caller.tenant_id, content="a new standard fact")
    assert new.fact_state == "active"
    assert new.fact_state_changes_at is not None and new.fact_state_changes_at > before
    old = Memory.objects.get(tenant_id=caller.tenant_id, content="an old standard fact")
    assert old.fact_state == "expired" and old.fact_state_changes_at is None
    # Restored, the fact is due; the decay sweep runs through it.
    memory_restore(caller=caller, memory_id=mid)
    facts_decay(now=timezone.now() + timedelta(seconds=5))
    assert Memory.objects.get(pk=mid).fact_state_changes_at is not None


# --- the quota ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_quota_smaller_than_the_import_in_the_dry_run_and_the_import(tmp_path, db):
    owner = make_identity("hostile-quota", "owner", role="admin")
    policy_apply(caller=owner.caller, yaml="quotas:\n  max_memories: 250\n")
    caller = token_authenticate(owner.token)
    assert caller is not None
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps({"results": [{"id": str(uuid.uuid4()), "memory": f"item {i}"} for i in range(500)]}))
    dry = memories_import(caller=caller, system="mem0", location=str(path), dry_run=True, batch_size=100)
    text = "\n".join(dry.lines())
    assert "quotas.max_memories" in text and "store 200" in text
    with pytest.raises(QuotaExceeded) as info:
        memories_import(caller=caller, system="mem0", location=str(path), batch_size=100)
    assert "stored 200" in str(info.value) and "Nothing was stored" not in str(info.value)
    assert stored(caller) == 200


# --- an import racing a store of the same fact key ------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_import_and_a_store_of_the_same_fact_key_both_finish(tmp_path, monkeypatch):
    caller = make_identity("hostile-race", "owner", role="admin").caller
    rows = [row(0, content="User lives in Lisbon", subject="user", predicate="city", created_at="2030-01-01")]
    rows[0]["created_at"] = (timezone.now() + timedelta(days=1)).isoformat()
    real_insert = imports.memories_insert
    errors: list[BaseException] = []

    def store() -> None:
        try:
            fact_store(caller=caller, subject="user", predicate="city", content="User lives in Porto")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connection.close()

    racer = threading.Thread(target=store)

    def insert_after_a_store(**kwargs: Any) -> None:
        # The store runs between the import's read of the key's holder and its insert.
        racer.start()
        racer.join(timeout=3)
        real_insert(**kwargs)

    monkeypatch.setattr(imports, "memories_insert", insert_after_a_store)
    report = memories_import(caller=caller, system="memproj", location=memproj_file(tmp_path, rows))
    racer.join(timeout=30)
    assert not errors and report.created == {"fact": 1}
    active = Memory.objects.filter(tenant_id=caller.tenant_id, subject="user", predicate="city", validity="active")
    assert active.count() == 1
    assert Memory.objects.filter(tenant_id=caller.tenant_id, subject="user").count() == 2


def test_created_times_clamp_to_a_sane_range():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert imports.clamp_time(datetime(9999, 12, 30, tzinfo=UTC), now=now) == now
    assert imports.clamp_time(datetime(1, 1, 1, tzinfo=UTC), now=now) == imports.EARLIEST_TIME
    assert imports.clamp_time(None, now=now) is None


# --- the last lines of defence --------------------------------------------------------------


@pytest.mark.django_db
def test_a_record_the_database_still_refuses_is_skipped_alone(tmp_path, caller, monkeypatch):
    checked = imports._validated

    def let_through(record, namespace, now):
        values, notes = checked(record, namespace, now)
        if record.content == "zebra fact number 3":
            values["harmful_count"] = 10**30  # what no check should let through
        return values, notes

    monkeypatch.setattr(imports, "_validated", let_through)
    report = memories_import(
        caller=caller, system="memproj", location=memproj_file(tmp_path, [row(i) for i in range(6)])
    )
    assert report.created == {"fact": 5}
    ((reason, count),) = report.skipped.items()
    assert count == 1 and "refused" in reason and "int" not in reason
    assert sorted(Memory.objects.filter(tenant_id=caller.tenant_id).values_list("content", flat=True)) == [
        f"zebra fact number {i}" for i in (0, 1, 2, 4, 5)
    ]


class _BrokenReader:
    system = "mem0"

    def records(self):
        yield from (imports.ImportedMemory(source_id=f"ok-{i}", kind="fact", content=f"read {i}") for i in range(3))
        raise KeyError("a field the reader expected")

    def estimate(self):
        return None

    def close(self):
        return None


@pytest.mark.django_db
def test_a_reader_failing_on_a_record_stops_with_a_message_after_storing_what_came_before(caller, monkeypatch):
    monkeypatch.setattr(imports, "open_source", lambda *args, **kwargs: _BrokenReader())
    with pytest.raises(imports.InvalidArgument) as info:
        memories_import(caller=caller, system="mem0", location="anything")
    assert "could not be read" in str(info.value) and "KeyError" not in str(info.value)
    assert stored(caller) == 3


def test_butlers_metadata_that_is_not_an_object_skips_its_row(monkeypatch):
    from memory.importers.butlers import ButlersTables

    tables = ButlersTables.__new__(ButlersTables)
    good = {"id": str(uuid.uuid4()), "content": "a fact", "subject": "user", "predicate": "likes", "metadata": {}}
    bad = {"id": str(uuid.uuid4()), "content": "another fact", "metadata": [1, 2]}
    # Each row as the reader reads it: the table's row as JSON, decoded.
    monkeypatch.setattr(tables, "_memories", lambda: iter([("fact", row["id"], row) for row in (good, bad)]))
    records = list(tables.records())
    assert isinstance(records[0], imports.ImportedMemory)
    assert isinstance(records[1], imports.Skipped) and "metadata" in records[1].reason


def test_facts_of_one_key_come_in_as_history_behind_the_newest(tmp_path, caller):
    """Two imported facts of one key, and a newer one the tenant already holds:
    every one is stored, only the newest stays active, the others superseded."""
    held = fact_store(caller=caller, subject="user", predicate="city", content="User lives in Porto").memory
    rows = [
        row(0, content="User lives in Lisbon", subject="user", predicate="city", created_at="2020-01-01T00:00:00Z"),
        row(1, content="User lives in Madrid", subject="user", predicate="city", created_at="2021-01-01T00:00:00Z"),
    ]
    report = memories_import(caller=caller, system="memproj", location=memproj_file(tmp_path, rows))
    assert report.created == {"fact": 2} and not report.skipped
    states = dict(Memory.objects.filter(tenant_id=caller.tenant_id, subject="user").values_list("content", "validity"))
    assert states == {
        "User lives in Porto": "active",
        "User lives in Lisbon": "superseded",
        "User lives in Madrid": "superseded",
    }
    assert Memory.objects.get(content="User lives in Madrid").superseded_by_id == held.pk
