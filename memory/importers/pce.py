"""pce-memory (v0.14.0, CAPHTECH/pce-memory): its DuckDB file (``$PCE_DB``) or
the ``.pce-shared`` directory its sync writes.

The DuckDB file (``apps/pce-memory/src/db/schema.sql``): ``claims`` (id, text,
kind, scope, boundary_class, memory_type, status, content_hash, utility,
confidence, created_at, updated_at, retrieval_count, last_retrieved_at,
provenance, tombstone, tombstone_at, superseded_by), ``entities``,
``claim_entities``, ``relations``, ``feedback`` (claim_id, signal, ts),
``evidence``. ``.pce-shared``: ``claims/<scope>/<hash>.json`` (text, kind,
scope, boundary_class, memory_type, content_hash, provenance, tombstone),
``entities/<id>.json``, ``relations/<id>.json``, ``manifest.json``; a synced
claim has no id of its own (its content hash names it) and is dated by its
provenance.

Each claim is stored as memproj's pce dialect stores one (a policy hint a rule,
any other kind a fact keyed by its text, the claim kind and provenance in
metadata, ``principle`` permanent, else stable) with its scope, boundary class,
utility, confidence and retrieval count; its ``clm_...`` id is what pce clients
see and send (an alias the pce dialect shows and accepts). Its feedback becomes
its outcome history and counters (helpful successes, harmful harms); a
tombstoned or rolled-back claim comes in retracted, a superseded one superseded
by its successor. Entities and relations keep their types, keys, attributes and
evidence claims. Vectors are recomputed (pce-memory embeds with a quantised
MiniLM of its own)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from memory import validation
from memory.importers.base import (
    GRAPH_RECORDS_MAX,
    ImportedEntity,
    ImportedMemory,
    ImportedRelation,
    ImportSourceError,
    Record,
    batched,
    json_value,
    number,
    parse_time,
)
from memory.importers.bounded_json import RECORDS_MAX, open_json

SYSTEM = "pce"
CLAIM_SUBJECT = "claim"  # memory.claims.CLAIM_SUBJECT: a claim is a fact keyed by its text
RETRACTED_STATUSES = {"rolled_back", "retracted", "deleted", "tombstoned"}
# A DuckDB file is someone else's (an admin upload among them): its "tables"
# may be views over an endless range, or carry generated columns that compute
# a huge value per row as they are read. Those are refused; reading it takes
# at most this long in all, a table of more than this many rows is refused
# before any row is read, and DuckDB runs in a bounded part of the server's
# memory and cores.
READ_SECONDS = 60.0
ROWS_MAX = 200_000
# Text packs tightly in a DuckDB file (a small one can hold the same long
# value in every row), and what is read is held in the server's memory (DuckDB
# sorts a table's rows before the first is read): the tables read hold at most
# this much text between them.
TEXT_MAX_BYTES = 128 * 1024 * 1024
DUCKDB_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "enable_external_access": False,
    "memory_limit": "1GB",
    "threads": 2,
}
TABLES = ("claims", "feedback", "entities", "claim_entities", "relations")
# A claim's feedback and an entity's claims are gathered onto its row by
# DuckDB, under names of the reader's own.
FEEDBACK = "_memproj_feedback"
CLAIM_IDS = "_memproj_claims"


def _claim(row: dict[str, Any], feedback: list[tuple[str, datetime | None]]) -> ImportedMemory:
    text = str(row.get("text") or "")
    kind = str(row.get("kind") or "fact")
    scope = str(row.get("scope") or "project")
    provenance = json_value(row.get("provenance"), default={}) or {}
    created = parse_time(row.get("created_at")) or parse_time(provenance.get("at"))
    counts = Counter(signal for signal, _ in feedback)
    metadata: dict[str, Any] = {"claim_kind": kind, "provenance": provenance}
    for key in ("memory_type", "content_hash"):
        if row.get(key):
            metadata[f"pce_{key}"] = row[key]
    retracted = bool(row.get("tombstone")) or str(row.get("status") or "") in RETRACTED_STATUSES
    record = ImportedMemory(
        source_id=str(row.get("id") or row.get("content_hash") or ""),
        kind="rule" if kind == "policy_hint" else "fact",
        content=text,
        created_at=created,
        updated_at=parse_time(row.get("updated_at")) or created,
        occurred_at=parse_time(provenance.get("at")) if isinstance(provenance, dict) else None,
        scope=scope,
        boundary_class=str(row.get("boundary_class") or "internal"),
        metadata=metadata,
        source="pce",
        confidence=number(row.get("confidence"), 0.5, low=0, high=1),
        utility=number(row.get("utility"), 0.0),
        reference_count=int(number(row.get("retrieval_count"), 0, low=0)),
        last_referenced_at=parse_time(row.get("last_retrieved_at")),
        accessed_at=parse_time(row.get("last_retrieved_at")),
        permanence="permanent" if scope == "principle" else "stable",
        success_count=float(counts["helpful"]),
        harmful_count=counts["harmful"],
        applied_count=sum(counts.values()),
        outcomes=feedback,
        validity="retracted" if retracted else "active",
        keep_id=False,
    )
    record.occurred_at = record.occurred_at or created
    if record.kind == "fact":
        record.subject, record.predicate = CLAIM_SUBJECT, validation.content_hash(text) if text.strip() else ""
    if row.get("superseded_by") and not retracted:
        record.validity, record.superseded_by = "superseded", str(row["superseded_by"])
    if retracted and row.get("tombstone_at"):
        record.metadata["pce_tombstone_at"] = str(row["tombstone_at"])
    return record


class _Watchdog:
    """Interrupts the connection's query once the deadline has passed (again
    and again, so a query started after it is stopped too) until stopped."""

    def __init__(self, connection: Any, seconds: float) -> None:
        self.connection = connection
        self.seconds = seconds
        self.passed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pce-import-deadline", daemon=True)

    def _run(self) -> None:
        if self._stop.wait(self.seconds):
            return
        self.passed = True
        while not self._stop.is_set():
            self.connection.interrupt()
            self._stop.wait(0.05)

    def __enter__(self) -> _Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


class DuckDbStore:
    """Checked whole when opened, before any row is read: its tables, their
    text and their rows are counted. Its rows are read as the import goes,
    a batch at a time, on the connection kept open until ``close``."""

    system = SYSTEM

    def __init__(self, path: Path) -> None:
        try:
            import duckdb
        except ImportError as exc:
            raise ImportSourceError(
                "reading pce-memory's DuckDB file needs the duckdb package (pip install duckdb)."
            ) from exc
        try:
            # A DuckDB file can hold views over read_text('/any/path') or other
            # databases: with external access off, reading the store reads
            # nothing else of the server's (an admin upload is someone else's file).
            self.connection: Any = duckdb.connect(str(path), read_only=True, config=DUCKDB_CONFIG)
        except duckdb.Error as exc:
            raise ImportSourceError(f"{path.name} is not a DuckDB file pce-memory wrote.") from exc
        self.path = path
        self.seconds_left = READ_SECONDS
        try:
            with self._reading():
                self.tables = self._tables()
                if "claims" not in self.tables:
                    raise ImportSourceError(f"{path.name} has no pce-memory claims table.")
                self._check_text()
                self.counts = self._count_rows()
                # Each query the import runs, bound now: a file whose tables
                # lack what they are read by is refused before anything is written.
                for query in self._queries():
                    if query is not None:
                        self.connection.execute(f"SELECT * FROM ({query}) LIMIT 0")  # noqa: S608
        except BaseException:
            self.connection.close()
            raise

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A read of the file, in what is left of READ_SECONDS (the time spent
        in DuckDB, not the import's own between two batches); DuckDB's error
        becomes a refusal in our words."""
        import duckdb

        started = time.monotonic()
        watchdog = _Watchdog(self.connection, max(self.seconds_left, 0.0))
        try:
            with watchdog:
                yield
        except duckdb.Error as exc:
            if watchdog.passed:
                raise ImportSourceError(
                    f"{self.path.name} took longer than {READ_SECONDS:g} s to read, longer than an import reads: "
                    "not a DuckDB file pce-memory wrote."
                ) from exc
            raise ImportSourceError(f"{self.path.name} is not a pce-memory store an import can read.") from exc
        finally:
            self.seconds_left -= time.monotonic() - started

    def _tables(self) -> set[str]:
        """The tables read that the file has, each refused unless a stored table
        without generated columns (a view or a generated column computes as it is read)."""
        found: set[str] = set()
        for name, kind in self.connection.execute(
            "SELECT table_name, table_type FROM information_schema.tables WHERE list_contains(?, table_name)",
            [list(TABLES)],
        ).fetchall():
            if kind != "BASE TABLE":
                shown = "a view" if kind == "VIEW" else f"a {str(kind).lower()}"
                raise ImportSourceError(
                    f"{self.path.name}: {name} is {shown}, not a table: not a DuckDB file pce-memory wrote."
                )
            found.add(name)
        for name, column in self.connection.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE list_contains(?, table_name) AND is_generated <> 'NEVER' ORDER BY table_name, column_name",
            [list(TABLES)],
        ).fetchall():
            raise ImportSourceError(
                f"{self.path.name}: {name} computes {column} as it is read (a generated column): "
                "not a DuckDB file pce-memory wrote."
            )
        return found

    def _check_text(self) -> None:
        """Refuse tables holding more text than an import reads, before any of it is read."""
        total = 0
        for table in sorted(self.tables):
            # table is one of this module's own (TABLES), never the file's.
            sizes = self.connection.execute(
                f'SELECT sum(strlen(CAST(COLUMNS(*) AS VARCHAR))) FROM "{table}"'  # noqa: S608
            ).fetchone()
            total += sum(int(size or 0) for size in sizes)
            if total > TEXT_MAX_BYTES:
                raise ImportSourceError(
                    f"{self.path.name} holds more than {TEXT_MAX_BYTES // (1024 * 1024)} MB of text, "
                    "more than an import reads."
                )

    def _count_rows(self) -> dict[str, int]:
        """Each table's rows, refused past ROWS_MAX; the entities and relations
        (the import holds them all) past GRAPH_RECORDS_MAX."""
        counts: dict[str, int] = {}
        for table in sorted(self.tables):
            (count,) = self.connection.execute(f'SELECT count(*) FROM "{table}"').fetchone()  # noqa: S608
            if count > ROWS_MAX:
                raise ImportSourceError(
                    f"{self.path.name}: {table} holds more than {ROWS_MAX} rows, more than an import reads."
                )
            counts[table] = count
        if counts.get("entities", 0) + counts.get("relations", 0) > GRAPH_RECORDS_MAX:
            raise ImportSourceError(
                f"{self.path.name} holds more than {GRAPH_RECORDS_MAX} entities and relations, "
                "more than an import reads."
            )
        return counts

    def _queries(self) -> tuple[str, str | None, str | None]:
        """What ``records`` reads (None: a table the file has not): the claims
        oldest first, each with its feedback, oldest first; the entities, each
        with its claims' ids; the relations. (FEEDBACK and CLAIM_IDS are this
        module's own names, never the file's.)"""
        claims = "SELECT c.* FROM claims c"
        if "feedback" in self.tables:
            claims = (
                f'SELECT c.*, f."{FEEDBACK}" FROM claims c LEFT JOIN ('  # noqa: S608
                "SELECT CAST(claim_id AS VARCHAR) AS claim, "
                f"list({{'signal': signal, 'ts': ts}} ORDER BY ts, id) AS \"{FEEDBACK}\" "
                "FROM feedback GROUP BY 1) f ON f.claim = CAST(c.id AS VARCHAR)"
            )
        entities = "SELECT e.* FROM entities e"
        if "claim_entities" in self.tables:
            entities = (
                f'SELECT e.*, l."{CLAIM_IDS}" FROM entities e LEFT JOIN ('  # noqa: S608
                "SELECT CAST(entity_id AS VARCHAR) AS entity, "
                f'list(CAST(claim_id AS VARCHAR) ORDER BY claim_id) AS "{CLAIM_IDS}" '
                "FROM claim_entities GROUP BY 1) l ON l.entity = CAST(e.id AS VARCHAR)"
            )
        return (
            f"{claims} ORDER BY c.created_at, c.id",
            f"{entities} ORDER BY e.id" if "entities" in self.tables else None,
            "SELECT * FROM relations ORDER BY id" if "relations" in self.tables else None,
        )

    def _rows(self, query: str) -> Iterator[dict[str, Any]]:
        """The query's rows, a batch at a time (memory.importers.base.batched)."""
        with self._reading():
            cursor = self.connection.execute(query)
            names = [d[0] for d in cursor.description]
        for row in batched(cursor, self._reading):
            yield dict(zip(names, row, strict=True))

    def estimate(self) -> int | None:
        return sum(self.counts.get(table, 0) for table in ("claims", "entities", "relations"))

    def close(self) -> None:
        self.connection.close()

    def records(self) -> Iterator[Record]:
        claims, entities, relations = self._queries()
        for row in self._rows(claims):
            feedback = [(str(f["signal"]), parse_time(f["ts"])) for f in row.pop(FEEDBACK, None) or []]
            yield _claim(row, feedback)
        for row in self._rows(entities) if entities else ():
            yield _entity(row, list(row.pop(CLAIM_IDS, None) or []))
        for row in self._rows(relations) if relations else ():
            yield _relation(row)


def _entity(row: dict[str, Any], claims: list[str]) -> ImportedEntity:
    attrs = json_value(row.get("attrs"), default={}) or {}
    return ImportedEntity(
        source_id=str(row["id"]),
        name=str(row.get("name") or ""),
        type=str(row.get("type") or "Concept"),
        canonical_key=str(row.get("canonical_key") or ""),
        attrs=attrs if isinstance(attrs, dict) else {"attrs": attrs},
        claims=claims,
    )


def _relation(row: dict[str, Any]) -> ImportedRelation:
    props = json_value(row.get("props"), default={}) or {}
    return ImportedRelation(
        source_id=str(row["id"]),
        src=str(row["src_id"]),
        dst=str(row["dst_id"]),
        type=str(row.get("type") or ""),
        props=props if isinstance(props, dict) else {"props": props},
        evidence=str(row["evidence_claim_id"]) if row.get("evidence_claim_id") else None,
    )


class SharedDirectory:
    """``.pce-shared``: what ``pce_memory_sync_push`` wrote for a team to pull."""

    system = SYSTEM

    def __init__(self, path: Path) -> None:
        if not (path / "manifest.json").is_file() and not (path / "claims").is_dir():
            raise ImportSourceError(f"{path} is not a .pce-shared directory (no manifest.json, no claims/).")
        self.path = path
        self.total = self._check()

    def _files(self, folder: str) -> list[Path]:
        return sorted((self.path / folder).rglob("*.json")) if (self.path / folder).is_dir() else []

    def _check(self) -> int:
        """Every file read through once, one at a time: a directory an import
        cannot read is refused before anything of it is written. The count of files."""
        files = 0
        for folder in ("claims", "entities", "relations"):
            for file in self._files(folder):
                files += 1
                if files > RECORDS_MAX:
                    raise ImportSourceError(
                        f"{self.path.name} holds more than {RECORDS_MAX} files, more than an import reads."
                    )
                self._load(file)
        return files

    def estimate(self) -> int | None:
        return self.total

    def close(self) -> None:
        return None

    def _load(self, file: Path) -> dict[str, Any]:
        """One file's record (memory.importers.bounded_json: refused past a record's bounds)."""
        handle, reader = open_json(file)
        with handle:
            data = reader.value()
            reader.finish()
        return data if isinstance(data, dict) else {}

    def records(self) -> Iterator[Record]:
        for file in self._files("claims"):
            yield _claim(self._load(file), [])
        for file in self._files("entities"):
            row = self._load(file)
            if not row.get("tombstone"):
                yield _entity(row, [])
        for file in self._files("relations"):
            row = self._load(file)
            if not row.get("tombstone"):
                yield _relation(row)


def open_source(location: str, **_: Any) -> DuckDbStore | SharedDirectory:
    path = Path(location)
    if path.is_dir():
        return SharedDirectory(path)
    if not path.is_file():
        raise ImportSourceError(f"no pce-memory store at {path}: give its DuckDB file ($PCE_DB) or .pce-shared.")
    return DuckDbStore(path)
