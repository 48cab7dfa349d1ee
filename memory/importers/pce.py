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
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from memory import validation
from memory.importers.base import (
    ImportedEntity,
    ImportedMemory,
    ImportedRelation,
    ImportSourceError,
    Record,
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
# a huge value per row as they are read. Those are refused; any read stops
# after this long, holds at most this many rows per table, and runs in a
# bounded part of the server's memory and cores.
READ_SECONDS = 60.0
ROWS_MAX = 200_000
# Text packs tightly in a DuckDB file (a small one can hold the same long
# value in every row), and what is read is held in the server's memory: the
# tables read hold at most this much text between them.
TEXT_MAX_BYTES = 128 * 1024 * 1024
DUCKDB_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "enable_external_access": False,
    "memory_limit": "1GB",
    "threads": 2,
}
TABLES = ("claims", "feedback", "entities", "claim_entities", "relations")


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
            connection = duckdb.connect(str(path), read_only=True, config=DUCKDB_CONFIG)
        except duckdb.Error as exc:
            raise ImportSourceError(f"{path.name} is not a DuckDB file pce-memory wrote.") from exc
        watchdog = _Watchdog(connection, READ_SECONDS)
        try:
            with watchdog:
                tables = self._tables(connection, path)
                if "claims" not in tables:
                    raise ImportSourceError(f"{path.name} has no pce-memory claims table.")
                self._check_text(connection, path, tables)
                self.claims = self._rows(connection, path, "claims", "ORDER BY created_at, id")
                self.feedback = (
                    self._rows(connection, path, "feedback", "ORDER BY ts, id") if "feedback" in tables else []
                )
                self.entities = self._rows(connection, path, "entities", "ORDER BY id") if "entities" in tables else []
                self.claim_entities = (
                    self._rows(connection, path, "claim_entities", "") if "claim_entities" in tables else []
                )
                self.relations = (
                    self._rows(connection, path, "relations", "ORDER BY id") if "relations" in tables else []
                )
        except duckdb.Error as exc:
            if watchdog.passed:
                raise ImportSourceError(
                    f"{path.name} took longer than {READ_SECONDS:g} s to read, longer than an import reads: "
                    "not a DuckDB file pce-memory wrote."
                ) from exc
            raise ImportSourceError(f"{path.name} is not a pce-memory store an import can read.") from exc
        finally:
            connection.close()

    @staticmethod
    def _tables(connection: Any, path: Path) -> set[str]:
        """The tables read that the file has, each refused unless a stored table
        without generated columns (a view or a generated column computes as it is read)."""
        found: set[str] = set()
        for name, kind in connection.execute(
            "SELECT table_name, table_type FROM information_schema.tables WHERE list_contains(?, table_name)",
            [list(TABLES)],
        ).fetchall():
            if kind != "BASE TABLE":
                shown = "a view" if kind == "VIEW" else f"a {str(kind).lower()}"
                raise ImportSourceError(
                    f"{path.name}: {name} is {shown}, not a table: not a DuckDB file pce-memory wrote."
                )
            found.add(name)
        for name, column in connection.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE list_contains(?, table_name) AND is_generated <> 'NEVER' ORDER BY table_name, column_name",
            [list(TABLES)],
        ).fetchall():
            raise ImportSourceError(
                f"{path.name}: {name} computes {column} as it is read (a generated column): "
                "not a DuckDB file pce-memory wrote."
            )
        return found

    @staticmethod
    def _check_text(connection: Any, path: Path, tables: set[str]) -> None:
        """Refuse tables holding more text than an import reads, before any of it is read."""
        total = 0
        for table in sorted(tables):
            # table is one of this module's own (TABLES), never the file's.
            sizes = connection.execute(
                f'SELECT sum(strlen(CAST(COLUMNS(*) AS VARCHAR))) FROM "{table}"'  # noqa: S608
            ).fetchone()
            total += sum(int(size or 0) for size in sizes)
            if total > TEXT_MAX_BYTES:
                raise ImportSourceError(
                    f"{path.name} holds more than {TEXT_MAX_BYTES // (1024 * 1024)} MB of text, "
                    "more than an import reads."
                )

    @staticmethod
    def _rows(connection: Any, path: Path, table: str, order: str) -> list[dict[str, Any]]:
        # table and order are this module's own (TABLES), never the file's.
        cursor = connection.execute(f'SELECT * FROM "{table}" {order} LIMIT {ROWS_MAX + 1}')  # noqa: S608
        names = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
        if len(rows) > ROWS_MAX:
            raise ImportSourceError(f"{path.name}: {table} holds more than {ROWS_MAX} rows, more than an import reads.")
        return [dict(zip(names, row, strict=True)) for row in rows]

    def estimate(self) -> int | None:
        return len(self.claims) + len(self.entities) + len(self.relations)

    def close(self) -> None:
        return None

    def records(self) -> Iterator[Record]:
        feedback: dict[str, list[tuple[str, datetime | None]]] = defaultdict(list)
        for row in self.feedback:
            feedback[str(row["claim_id"])].append((str(row["signal"]), parse_time(row.get("ts"))))
        for row in self.claims:
            yield _claim(row, feedback.get(str(row["id"]), []))
        claims_of: dict[str, list[str]] = defaultdict(list)
        for row in self.claim_entities:
            claims_of[str(row["entity_id"])].append(str(row["claim_id"]))
        for row in self.entities:
            yield _entity(row, claims_of.get(str(row["id"]), []))
        for row in self.relations:
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
