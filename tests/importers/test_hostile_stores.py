"""Files an importer reads are someone else's (an admin upload): a reader
bounds what it unpacks, what it holds and how long it reads, refuses what it
cannot bound with a clear reason, and leaves nothing behind when it refuses.

- COGX: a tiny .cogx.tar.gz that unpacks to hundreds of MB, an over-long line,
  and archives that unpack and then fail (a newer version, no manifest, a link).
- roampal: a Desktop backup zip that unzips to hundreds of MB or holds no store;
  a chroma.sqlite3 whose tables are views over an endless query, whose joins
  never end, or that holds more rows than an import reads.
- pce-memory: a DuckDB file whose claims are a view over an endless range or
  carry a generated column, and a read past its time limit."""

from __future__ import annotations

import io
import json
import sqlite3
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from memory.errors import InvalidArgument
from memory.importers import cogx, pce, roampal
from memory.importers.base import ImportSourceError
from memory.services.imports import memories_import
from tests.conftest import make_identity

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def scratch_root(tmp_path, monkeypatch):
    """Scratch directories (tempfile.mkdtemp) go to this test's own directory."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _tar(path: Path, members: dict[str, bytes | int], *, links: dict[str, str] | None = None) -> Path:
    """A .cogx.tar.gz; an int member is that many spaces, written as it streams."""
    with tarfile.open(path, "w:gz") as archive:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(body, int):
                info.size = body
                archive.addfile(info, _Spaces(body))
            else:
                info.size = len(body)
                archive.addfile(info, io.BytesIO(body))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            archive.addfile(info)
    return path


class _Spaces(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        n = min(len(buffer), self.left)
        buffer[:n] = b" " * n
        self.left -= n
        return n


MANIFEST = json.dumps({"cogx_version": "0.1", "source_system": "cognee", "counts": {"memory": 1}}).encode()
MEMORY = json.dumps({"external_id": "m1", "external_system": "cognee", "content": "Alice uses Helix"}).encode()


# --- COGX ---------------------------------------------------------------------------------------


def test_a_cogx_archive_that_unpacks_to_hundreds_of_mb_is_refused_unread(tmp_path, scratch_root):
    # 300 MB of spaces on one line: a few hundred KB packed.
    bomb = _tar(tmp_path / "bomb.cogx.tar.gz", {"x/manifest.json": MANIFEST, "x/memories.jsonl": 300 * 1024 * 1024})
    assert bomb.stat().st_size < 1024 * 1024

    with pytest.raises(ImportSourceError, match="unpacks to more than"):
        cogx.open_source(str(bomb))

    assert list(scratch_root.iterdir()) == []


def test_members_adding_up_past_the_unpack_bound_are_refused_and_nothing_is_left(tmp_path, scratch_root, monkeypatch):
    monkeypatch.setattr(cogx, "UNPACK_MAX_BYTES", 1024 * 1024)
    archive = _tar(
        tmp_path / "two.cogx.tar.gz",
        {"x/manifest.json": MANIFEST, "x/documents.jsonl": 600 * 1024, "x/memories.jsonl": 600 * 1024},
    )

    with pytest.raises(ImportSourceError, match="unpacks to more than"):
        cogx.open_source(str(archive))

    assert list(scratch_root.iterdir()) == []


def test_an_over_long_cogx_line_is_refused_with_its_place_never_read_whole(tmp_path, scratch_root, monkeypatch):
    monkeypatch.setattr(cogx, "LINE_MAX_CHARS", 64 * 1024)
    line = json.dumps({"external_id": "m2", "content": "y" * 100_000}).encode()
    archive = _tar(
        tmp_path / "long.cogx.tar.gz",
        {"x/manifest.json": MANIFEST, "x/memories.jsonl": MEMORY + b"\n" + line + b"\n"},
    )
    source = cogx.open_source(str(archive))
    try:
        with pytest.raises(ImportSourceError, match=r"memories\.jsonl:2: a line longer than 65536 characters"):
            list(source.records())
    finally:
        source.close()
    assert list(scratch_root.iterdir()) == []


def test_a_line_of_spaces_past_the_line_bound_is_refused(tmp_path, scratch_root):
    # The probe's file at a size a test can afford: one line of blanks, longer than any record.
    archive = _tar(
        tmp_path / "blank.cogx.tar.gz",
        {"x/manifest.json": MANIFEST, "x/memories.jsonl": cogx.LINE_MAX_CHARS + 10},
    )
    source = cogx.open_source(str(archive))
    try:
        with pytest.raises(ImportSourceError, match="a line longer than"):
            list(source.records())
    finally:
        source.close()


@pytest.mark.parametrize(
    ("members", "links", "reason"),
    [
        (
            {"x/manifest.json": json.dumps({"cogx_version": "9.0"}).encode(), "x/memories.jsonl": 50 * 1024},
            None,
            "newer than this reader",
        ),
        ({"x/memories.jsonl": 50 * 1024}, None, "holds no manifest.json"),
        ({"x/manifest.json": MANIFEST, "x/memories.jsonl": 50 * 1024}, {"x/evil": "/etc/passwd"}, "link"),
        ({"x/manifest.json": b"{not json", "x/memories.jsonl": 50 * 1024}, None, "manifest.json is not JSON"),
    ],
    ids=["newer-version", "no-manifest", "absolute-link", "broken-manifest"],
)
def test_an_archive_that_unpacks_and_fails_leaves_no_scratch_directory(tmp_path, scratch_root, members, links, reason):
    archive = _tar(tmp_path / "bad.cogx.tar.gz", members, links=links)

    with pytest.raises(ImportSourceError, match=reason):
        cogx.open_source(str(archive))

    assert list(scratch_root.iterdir()) == []


def test_a_file_that_is_no_tarball_is_a_clear_error(tmp_path, scratch_root):
    bogus = tmp_path / "bogus.cogx.tar.gz"
    bogus.write_bytes(b"\x1f\x8b\x08\x00garbage" * 100)

    with pytest.raises(ImportSourceError, match="not a .cogx.tar.gz"):
        cogx.open_source(str(bogus))

    assert list(scratch_root.iterdir()) == []


# --- roampal ------------------------------------------------------------------------------------


def _chroma(path: Path, *, embeddings_view: bool = False, memories: int = 2, fan_out: int = 1) -> Path:
    """A chroma.sqlite3 shaped as roampal's: collections, segments, embeddings, metadata.
    ``fan_out`` repeats each segment and collection row (a join that multiplies)."""
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE collections (id TEXT, name TEXT);
        CREATE TABLE segments (id TEXT, collection TEXT);
        CREATE TABLE embedding_metadata (id INTEGER, key TEXT, string_value TEXT, int_value INTEGER,
                                         float_value REAL, bool_value INTEGER);
        """
    )
    db.executemany("INSERT INTO collections VALUES ('c', 'roampal_memory_bank')", [()] * fan_out)
    db.executemany("INSERT INTO segments VALUES ('s', 'c')", [()] * fan_out)
    if embeddings_view:
        db.execute(
            """
            CREATE VIEW embeddings AS
            WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r)
            SELECT n AS id, 's' AS segment_id, 'memory_bank_' || n AS embedding_id, '2024-01-01' AS created_at
            FROM r WHERE n < 0
            """
        )
    else:
        db.execute("CREATE TABLE embeddings (id INTEGER, segment_id TEXT, embedding_id TEXT, created_at TEXT)")
        for n in range(memories):
            db.execute("INSERT INTO embeddings VALUES (?, 's', ?, '2024-01-01')", (n, f"memory_bank_{n:08x}"))
            db.execute(
                "INSERT INTO embedding_metadata VALUES (?, 'chroma:document', ?, NULL, NULL, NULL)",
                (n, f"fact {n}"),
            )
    db.commit()
    db.close()
    return path


def test_a_small_roampal_store_reads(tmp_path):
    store = roampal.open_source(str(_chroma(tmp_path / "chroma.sqlite3", memories=3)))
    assert [r.content for r in store.records()] == ["fact 0", "fact 1", "fact 2"]  # type: ignore[union-attr]


def test_a_roampal_table_that_is_an_endless_view_is_refused(tmp_path):
    db = _chroma(tmp_path / "chroma.sqlite3", embeddings_view=True)

    with pytest.raises(ImportSourceError, match="embeddings is a view, not a table"):
        roampal.open_source(str(db))


def test_a_roampal_store_past_the_time_limit_is_refused(tmp_path, monkeypatch):
    # Real tables whose join multiplies (3,000 x 3,000 x 3,000 rows to sort): it never ends on its own.
    db = _chroma(tmp_path / "chroma.sqlite3", memories=3000, fan_out=3000)
    monkeypatch.setattr(roampal, "READ_SECONDS", 1.0)

    with pytest.raises(ImportSourceError, match="took longer than 1 s to read"):
        roampal.open_source(str(db))


def test_a_roampal_store_with_more_rows_than_an_import_reads_is_refused(tmp_path, monkeypatch):
    db = _chroma(tmp_path / "chroma.sqlite3", memories=5)
    monkeypatch.setattr(roampal, "ROWS_MAX", 4)

    with pytest.raises(ImportSourceError, match="more than 4 rows"):
        roampal.open_source(str(db))


def test_a_roampal_generated_column_is_refused(tmp_path):
    db_path = _chroma(tmp_path / "chroma.sqlite3", memories=0)
    db = sqlite3.connect(db_path)
    # A generated column computes its value as it is read: it could be a huge one per row.
    db.execute("DROP TABLE embedding_metadata")
    db.execute(
        "CREATE TABLE embedding_metadata (id INTEGER, key TEXT, int_value INTEGER, float_value REAL, "
        "bool_value INTEGER, string_value TEXT GENERATED ALWAYS AS (printf('%.*c', 1000, 'x')) VIRTUAL)"
    )
    db.execute("INSERT INTO embedding_metadata (id, key) VALUES (1, 'chroma:document')")
    db.commit()
    db.close()

    with pytest.raises(ImportSourceError, match="embedding_metadata computes string_value as it is read"):
        roampal.open_source(str(db_path))


def test_a_roampal_value_past_the_length_bound_is_refused(tmp_path, monkeypatch):
    db_path = _chroma(tmp_path / "chroma.sqlite3", memories=1)
    db = sqlite3.connect(db_path)
    db.execute("UPDATE embedding_metadata SET string_value = ?", ("x" * 5000,))
    db.commit()
    db.close()
    monkeypatch.setattr(roampal, "VALUE_MAX_BYTES", 4096)

    with pytest.raises(ImportSourceError, match="holds a value over 4096 bytes"):
        roampal.open_source(str(db_path))


def _zip(path: Path, members: dict[str, int | bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, body in members.items():
            if isinstance(body, bytes):
                archive.writestr(name, body)
                continue
            with archive.open(name, "w", force_zip64=True) as out:
                left = body
                while left:
                    n = min(left, 1024 * 1024)
                    out.write(b"\0" * n)
                    left -= n
    return path


def test_a_roampal_backup_that_unzips_to_hundreds_of_mb_is_refused_unread(tmp_path, scratch_root):
    bomb = _zip(tmp_path / "backup.zip", {"data/chromadb/chroma.sqlite3": 300 * 1024 * 1024})
    assert bomb.stat().st_size < 2 * 1024 * 1024

    with pytest.raises(ImportSourceError, match="unpacks to more than"):
        roampal.open_source(str(bomb))

    assert list(scratch_root.iterdir()) == []


def test_a_roampal_backup_without_a_store_leaves_no_scratch_directory(tmp_path, scratch_root):
    backup = _zip(tmp_path / "backup.zip", {"data/chromadb/other.bin": 50 * 1024, "data/notes.txt": b"hello"})

    with pytest.raises(ImportSourceError, match="holds no chromadb/chroma.sqlite3"):
        roampal.open_source(str(backup))

    assert list(scratch_root.iterdir()) == []


def test_a_roampal_backup_with_a_broken_store_leaves_no_scratch_directory(tmp_path, scratch_root):
    backup = _zip(tmp_path / "backup.zip", {"data/chromadb/chroma.sqlite3": b"not a database" * 100})

    with pytest.raises(ImportSourceError, match="is not a ChromaDB store"):
        roampal.open_source(str(backup))

    assert list(scratch_root.iterdir()) == []


def test_a_roampal_backup_reads_its_store_and_cleans_up(tmp_path, scratch_root):
    store = _chroma(tmp_path / "chroma.sqlite3", memories=2)
    backup = _zip(tmp_path / "backup.zip", {"data/chromadb/chroma.sqlite3": store.read_bytes()})

    source = roampal.open_source(str(backup))
    try:
        assert [r.content for r in source.records()] == ["fact 0", "fact 1"]  # type: ignore[union-attr]
    finally:
        source.close()
    assert list(scratch_root.iterdir()) == []


# --- pce-memory (DuckDB) ------------------------------------------------------------------------


def _duckdb(path: Path, claims_sql: str, *rows_sql: str) -> Path:
    import duckdb

    db = duckdb.connect(str(path))
    db.execute(claims_sql)
    for sql in rows_sql:
        db.execute(sql)
    db.close()
    return path


CLAIMS_TABLE = "CREATE TABLE claims (id VARCHAR, text VARCHAR, kind VARCHAR, scope VARCHAR, created_at VARCHAR)"


def test_a_pce_claims_view_over_an_endless_range_is_refused(tmp_path):
    db = _duckdb(
        tmp_path / "pce.duckdb",
        "CREATE VIEW claims AS SELECT i::VARCHAR AS id, 'x' AS text, '2024' AS created_at "
        "FROM range(10000000000000) t(i) WHERE i < 0",
    )

    with pytest.raises(ImportSourceError, match="claims is a view, not a table"):
        pce.open_source(str(db))


def test_a_pce_generated_column_is_refused(tmp_path):
    db = _duckdb(
        tmp_path / "pce.duckdb",
        "CREATE TABLE claims (id VARCHAR, created_at VARCHAR, "
        "text VARCHAR GENERATED ALWAYS AS (repeat('x', 50000000)) VIRTUAL)",
        "INSERT INTO claims (id, created_at) SELECT i::VARCHAR, '2024' FROM range(100) t(i)",
    )

    with pytest.raises(ImportSourceError, match="computes"):
        pce.open_source(str(db))


def test_a_pce_store_with_more_rows_than_an_import_reads_is_refused(tmp_path, monkeypatch):
    db = _duckdb(
        tmp_path / "pce.duckdb",
        CLAIMS_TABLE,
        "INSERT INTO claims SELECT 'clm_' || i, 'claim ' || i, 'fact', 'project', '2024' FROM range(5) t(i)",
    )
    monkeypatch.setattr(pce, "ROWS_MAX", 4)

    with pytest.raises(ImportSourceError, match="more than 4 rows"):
        pce.open_source(str(db))


def test_a_pce_read_past_its_time_limit_is_refused(tmp_path, monkeypatch):
    db = _duckdb(
        tmp_path / "pce.duckdb",
        CLAIMS_TABLE,
        "INSERT INTO claims SELECT 'clm_' || i, md5(i::VARCHAR), 'fact', 'project', md5(i::VARCHAR) "
        "FROM range(3000000) t(i)",
    )
    monkeypatch.setattr(pce, "READ_SECONDS", 0.01)

    with pytest.raises(ImportSourceError, match="took longer than 0.01 s to read"):
        pce.open_source(str(db))


def test_a_small_pce_store_reads(tmp_path):
    db = _duckdb(
        tmp_path / "pce.duckdb",
        CLAIMS_TABLE,
        "INSERT INTO claims SELECT 'clm_' || i, 'claim ' || i, 'fact', 'project', '2024' FROM range(3) t(i)",
    )
    source = pce.open_source(str(db))
    assert [r.content for r in source.records()] == ["claim 0", "claim 1", "claim 2"]  # type: ignore[union-attr]


# --- what a user sees: the import's coded error --------------------------------------------------


@pytest.mark.django_db
def test_the_import_answers_a_refused_store_with_its_coded_error(tmp_path):
    identity = make_identity("hostile-imports", "owner", role="admin")
    roampal_db = _chroma(tmp_path / "chroma.sqlite3", embeddings_view=True)
    pce_db = _duckdb(
        tmp_path / "pce.duckdb",
        "CREATE VIEW claims AS SELECT i::VARCHAR AS id FROM range(10000000000000) t(i) WHERE i < 0",
    )

    for system, location, table in (("roampal", roampal_db, "embeddings"), ("pce", pce_db, "claims")):
        with pytest.raises(InvalidArgument, match=f"{table} is a view, not a table") as refused:
            memories_import(caller=identity.caller, system=system, location=str(location), dry_run=True)
        assert refused.value.code == "INVALID_ARGUMENT"
        with pytest.raises(CommandError, match=f"{table} is a view, not a table"):
            call_command("import_memories", "--from", system, "--tenant", "hostile-imports", str(location), "--dry-run")
