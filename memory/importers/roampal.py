"""roampal (roampal-core, PyPI ``roampal``; and the Desktop app's backup zip):
its ChromaDB store, read straight from ChromaDB's SQLite file (no ChromaDB
needed here). The location may be roampal's data folder (``$ROAMPAL_DATA_PATH``;
``--option profile=NAME`` for an extra profile kept inside it), its
``chromadb`` folder, the ``chroma.sqlite3`` file, or a Desktop backup ``.zip``.

Collections ``roampal_working`` / ``history`` / ``patterns`` / ``memory_bank`` /
``books``, ids ``<collection>_<8 hex>``; live rows are the ``embeddings`` table
(``embeddings_queue`` still holds superseded text). Each record's metadata:
``score``, ``uses``, ``success_count``, ``last_outcome``, ``outcome_history``
(JSON), ``last_used``, ``created_at`` or ``timestamp``, ``updated_at``;
promotions ``original_id`` / ``promoted_from``; working ``conversation_id``,
``noun_tags``; memory_bank ``tags`` (JSON), ``importance``, ``confidence``,
``status`` (active | archived); books ``title``, ``source``, ``chunk_index``,
``total_chunks``.

Each collection rides on memproj's kind for it (working / history episodes,
patterns rules, memory_bank facts, books document chunks) in the same roampal
collection, with its score, uses, successes and outcome history, so roampal's
lifecycle and scoring go on from where they were. The roampal id stays the id
roampal clients see (memproj shows ``<collection>_<the same 8 hex>``, and the
prefix follows a later promotion, as upstream's does). An archived memory_bank
entry comes in retracted. Working and history memories get their TTL from the
import on (the store gives no expiry of its own); vectors are recomputed (roampal
embeds with its own multilingual model)."""

from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
import time
import zipfile
import zlib
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from memory.importers.base import (
    ImportedMemory,
    ImportSourceError,
    Record,
    Skipped,
    json_value,
    number,
    parse_time,
    string_list,
)

SYSTEM = "roampal"
KINDS = {"working": "episode", "history": "episode", "patterns": "rule", "memory_bank": "fact", "books": "document"}
# memproj's roampal TTLs (memory.scoring.WORKING_TTL / HISTORY_TTL), from the import on.
TTL_HOURS = {"working": 24, "history": 30 * 24}
# What a backup zip may unzip to: only its ChromaDB SQLite file is read, so
# only that is unzipped, at most a few times what an admin upload may be
# (64 MB). A larger store is unzipped by its owner and given as a folder.
ZIP_MAX_BYTES = 256 * 1024 * 1024
# A chroma.sqlite3 is someone else's file (an admin upload among them): its
# "tables" may be views over an endless query, or tables whose join multiplies.
# A read stops after this long, holds at most this many rows per query, and no
# value longer than this (a generated column computes one as it is read).
READ_SECONDS = 60.0
ROWS_MAX = 1_000_000
VALUE_MAX_BYTES = 16 * 1024 * 1024
# The tables read, and the columns read of each.
TABLES = ("embeddings", "segments", "collections", "embedding_metadata")
# sqlite's progress handler runs every this many virtual-machine steps.
PROGRESS_STEPS = 10_000
ROWS_QUERY = """
    SELECT c.name, e.id, e.embedding_id, e.created_at
    FROM embeddings e
    JOIN segments s ON e.segment_id = s.id
    JOIN collections c ON s.collection = c.id
    WHERE c.name LIKE 'roampal\\_%' ESCAPE '\\'
    ORDER BY e.created_at, e.id
"""


def _sqlite_in(location: Path, profile: str) -> Path:
    if location.is_file() and location.name.endswith(".sqlite3"):
        return location
    candidates = []
    if profile:
        candidates.append(location / profile / "chromadb" / "chroma.sqlite3")
    candidates += [location / "chromadb" / "chroma.sqlite3", location / "chroma.sqlite3"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ImportSourceError(
        f"no roampal store at {location}: give roampal's data folder, its chromadb folder, "
        "chroma.sqlite3, or a Desktop backup zip."
    )


def _unzip(location: Path, into: Path) -> Path:
    """The backup's chroma.sqlite3, unzipped into ``into`` (nothing else of it is read)."""
    try:
        with zipfile.ZipFile(location) as archive:
            stores = [
                info
                for info in archive.infolist()
                if "chromadb/" in info.filename
                and info.filename.rsplit("/", 1)[-1] == "chroma.sqlite3"
                and ".." not in info.filename
                and not info.filename.startswith("/")
                and not info.is_dir()
            ]
            if not stores:
                raise ImportSourceError(f"{location.name} holds no chromadb/chroma.sqlite3: not a roampal backup.")
            store = sorted(stores, key=lambda info: info.filename)[0]
            # zipfile writes no more than the size an entry declares.
            if store.file_size > ZIP_MAX_BYTES:
                raise ImportSourceError(
                    f"{location.name} unpacks to more than {ZIP_MAX_BYTES // (1024 * 1024)} MB, more than an "
                    "import unpacks; unzip it and give the folder to manage.py import_memories."
                )
            return Path(archive.extract(store, into))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, OSError, NotImplementedError) as exc:
        raise ImportSourceError(f"{location.name} is not a zip an import can unpack.") from exc


class _Deadline:
    """sqlite's progress handler: a statement running past the deadline is interrupted."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.passed = False

    def __call__(self) -> int:
        if time.monotonic() > self.at:
            self.passed = True
            return 1
        return 0


def _refuse_computed_tables(connection: sqlite3.Connection, path: Path) -> None:
    """Each table read must be a stored table: a view (or a virtual table, or a
    generated column) computes its rows as they are read, without end if it likes."""
    kinds = dict(
        connection.execute(
            "SELECT name, CASE WHEN sql LIKE 'CREATE VIRTUAL%' THEN 'virtual table' ELSE type END "
            "FROM sqlite_master WHERE name IN (?, ?, ?, ?)",
            TABLES,
        ).fetchall()
    )
    for table in TABLES:
        kind = kinds.get(table)
        if kind is None:
            raise ImportSourceError(f"{path.name} has no {table} table: not a ChromaDB store roampal wrote.")
        if kind != "table":
            raise ImportSourceError(
                f"{path.name}: {table} is a {kind}, not a table: not a ChromaDB store roampal wrote."
            )
        generated = [row[1] for row in connection.execute(f'PRAGMA table_xinfo("{table}")') if row[6] in (2, 3)]
        if generated:
            raise ImportSourceError(
                f"{path.name}: {table} computes {', '.join(generated)} as it is read (a generated column): "
                "not a ChromaDB store roampal wrote."
            )


def _bounded(connection: sqlite3.Connection, path: Path, query: str) -> Iterator[Any]:
    """The query's rows as they are read, refused past ``ROWS_MAX``."""
    for count, row in enumerate(connection.execute(f"{query} LIMIT {ROWS_MAX + 1}"), start=1):
        if count > ROWS_MAX:
            raise ImportSourceError(
                f"{path.name} holds more than {ROWS_MAX} rows to read in one table, more than an import reads."
            )
        yield row


class RoampalStore:
    system = SYSTEM

    def __init__(self, location: Path, *, profile: str = "") -> None:
        self._scratch: Path | None = None
        try:
            self._open(location, profile)
        except BaseException:
            # Nobody can close a store that failed to open: its unzipped copy goes now.
            self.close()
            raise

    def _open(self, location: Path, profile: str) -> None:
        if location.is_file() and location.suffix == ".zip":
            self._scratch = Path(tempfile.mkdtemp(prefix="memproj-roampal-"))
            location = _unzip(location, self._scratch)
        path = _sqlite_in(location, profile)
        deadline = _Deadline(READ_SECONDS)
        try:
            connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, VALUE_MAX_BYTES)
                connection.set_progress_handler(deadline, PROGRESS_STEPS)
                _refuse_computed_tables(connection, path)
                self.rows = list(_bounded(connection, path, ROWS_QUERY))
                self.metadata: dict[int, dict[str, Any]] = defaultdict(dict)
                for row_id, key, text, integer, real, boolean in _bounded(
                    connection,
                    path,
                    "SELECT id, key, string_value, int_value, float_value, bool_value FROM embedding_metadata",
                ):
                    value = next((v for v in (text, integer, real, boolean) if v is not None), None)
                    # A store repeats a few keys on every row: one copy of each is held.
                    self.metadata[row_id][sys.intern(key) if isinstance(key, str) else key] = value
            finally:
                connection.close()
        except sqlite3.DatabaseError as exc:
            if deadline.passed:
                raise ImportSourceError(
                    f"{path.name} took longer than {READ_SECONDS:g} s to read, longer than an import reads: "
                    "not a ChromaDB store roampal wrote."
                ) from exc
            if "too big" in str(exc):
                raise ImportSourceError(
                    f"{path.name} holds a value over {VALUE_MAX_BYTES} bytes: not a ChromaDB store roampal wrote."
                ) from exc
            raise ImportSourceError(f"{path.name} is not a ChromaDB store roampal wrote.") from exc

    def estimate(self) -> int | None:
        return len(self.rows)

    def close(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def records(self) -> Iterator[Record]:
        now = timezone.now()
        for collection_name, row_id, doc_id, row_created in self.rows:
            collection = str(collection_name).removeprefix("roampal_")
            meta = self.metadata.get(row_id, {})
            if collection not in KINDS:
                yield Skipped(doc_id, f"collection {collection_name} is not one roampal keeps memories in")
                continue
            text = meta.get("chroma:document") or meta.get("content") or meta.get("text") or ""
            yield _record(collection, str(doc_id), str(text), meta, parse_time(row_created), now)


_OWN_KEYS = {
    "chroma:document",
    "content",
    "text",
    "score",
    "uses",
    "success_count",
    "last_outcome",
    "outcome_history",
    "last_used",
    "created_at",
    "timestamp",
    "updated_at",
    "tags",
    "noun_tags",
    "importance",
    "confidence",
    "status",
    "title",
    "chunk_index",
    "total_chunks",
    "source",
    "conversation_id",
    "original_id",
}


def _record(
    collection: str, doc_id: str, text: str, meta: dict[str, Any], row_created: datetime | None, now: datetime
) -> ImportedMemory:
    created = parse_time(meta.get("created_at")) or parse_time(meta.get("timestamp")) or row_created
    history = json_value(meta.get("outcome_history"), default=[])
    outcomes = [
        (str(o.get("outcome")), parse_time(o.get("timestamp")))
        for o in (history if isinstance(history, list) else [])
        if isinstance(o, dict) and o.get("outcome")
    ]
    extra = {k: v for k, v in meta.items() if k not in _OWN_KEYS}
    record = ImportedMemory(
        source_id=doc_id,
        kind=KINDS[collection],
        content=text,
        created_at=created,
        updated_at=parse_time(meta.get("updated_at")) or created,
        occurred_at=created,
        collection=collection,
        butler="roampal",
        source="roampal",
        metadata=extra,
        outcome_score=number(meta.get("score"), 0.5, low=0, high=1),
        applied_count=int(number(meta.get("uses"), 0, low=0)),
        success_count=number(meta.get("success_count"), 0.0, low=0),
        last_applied_at=parse_time(meta.get("last_used")),
        outcomes=outcomes,
        keep_id=False,
    )
    if meta.get("original_id") and meta["original_id"] != doc_id:
        record.extra_aliases = (str(meta["original_id"]),)
    hours = TTL_HOURS.get(collection)
    if hours:
        record.expires_at = now + timedelta(hours=hours)
    if collection == "working":
        conversation = str(meta.get("conversation_id") or "")
        if conversation:
            record.session_id = conversation
            record.metadata["conversation_id"] = conversation
        record.tags = string_list(meta.get("noun_tags"))
    elif collection == "memory_bank":
        record.subject, record.predicate = "memory_bank", f"entry:{doc_id.rsplit('_', 1)[-1]}"
        record.tags = string_list(meta.get("tags"))
        record.importance = number(meta.get("importance"), 0.7, low=0, high=1) * 10
        record.confidence = number(meta.get("confidence"), 0.7, low=0, high=1)
        record.permanence = "permanent"
        if meta.get("status") == "archived":
            record.validity = "retracted"
    elif collection == "books":
        record.metadata.update(
            {
                "title": str(meta.get("title") or ""),
                "chunk": int(number(meta.get("chunk_index"), 0)),
                "chunks": int(number(meta.get("total_chunks"), 0)),
                "source": str(meta.get("source") or ""),
            }
        )
        record.source = "book"
    return record


def open_source(location: str, **options: Any) -> RoampalStore:
    return RoampalStore(Path(location), **options)
