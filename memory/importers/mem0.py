"""mem0 (OSS ``mem0ai`` 2.x): its memories from a ``get_all()`` JSON export or
straight from its pgvector table, with the history SQLite beside either.

- ``get_all`` answers ``{"results": [{id, memory, hash, created_at, updated_at,
  user_id?, agent_id?, run_id?, actor_id?, role?, metadata}]}`` (a bare list is
  read too);
- the pgvector table (``collection_name``, default ``mem0``) has ``id UUID,
  vector, payload JSONB``; the payload holds ``data`` (the text), ``hash``,
  ``created_at``, ``updated_at``, the id keys and the user's metadata, flattened;
- the history database (``history_db_path``) has ``history(id, memory_id,
  old_memory, new_memory, event, created_at, updated_at, is_deleted, actor_id,
  role)``: the only place an updated memory's earlier text and a deleted
  memory survive.

Each memory becomes a keyless fact under the namespace of its ids (``user``,
``agent``, ``run``), keeping its mem0 id (as its own id where free, always as an
alias). With the history, each earlier text of an updated memory becomes a
superseded version pointing at the next, and a deleted memory comes back
retracted (kept for the record, never retrieved)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memory.importers.base import (
    BadRecord,
    ImportedMemory,
    ImportSourceError,
    Record,
    Skipped,
    batched,
    mapping,
    parse_time,
    postgres_rows,
    text_field,
)
from memory.importers.bounded_json import RECORD_MAX_CHARS, RECORD_MAX_VALUES, RECORDS_MAX, line_value, open_json

SYSTEM = "mem0"
ID_KEYS = (("user_id", "user"), ("agent_id", "agent"), ("run_id", "run"))
LIST_KEYS = ("results", "memories")
# What the history's rows are read for.
HISTORY_COLUMNS = ("old_memory", "new_memory", "event", "created_at", "is_deleted", "actor_id", "role")
PAYLOAD_KEYS = {"data", "hash", "created_at", "updated_at", "user_id", "agent_id", "run_id", "actor_id", "role"}


def _namespace(item: dict[str, Any]) -> tuple[str, ...]:
    parts: list[str] = []
    for key, label in ID_KEYS:
        if item.get(key):
            parts += [label, text_field(item[key], key)]
    return tuple(parts)


def _export_items(path: Path) -> Iterator[Any]:
    """The memories of a get_all() export (``{"results": [...]}`` or a bare
    list), read one at a time (memory.importers.bounded_json)."""
    no_list = ImportSourceError(f"{path.name} holds no list of memories (get_all() answers {{'results': [...]}}).")
    handle, reader = open_json(path)
    with handle:
        first = reader.peek()
        if first == "[":
            yield from reader.elements()
        elif first == "{":
            members = reader.members()
            items = next((value for key, value in members if key in LIST_KEYS), None)
            if not isinstance(items, Iterator):
                raise no_list
            yield from items
            for _ in members:  # what follows the list, read past
                pass
        else:
            reader.value()
            raise no_list
        reader.finish()


class _History:
    """mem0's history database, each memory's events read as its turn comes
    (it is joined to a store read in that store's own order). Checked when
    opened, before any event is read: refused past RECORDS_MAX rows, or when
    one memory's events together are past a record's bounds (they are held
    while its versions are made). SQLite finds a memory's events by an index
    of the reader's own, in a temporary file (the database is read only)."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise ImportSourceError(f"no history database {path}; give mem0's history_db_path (or leave it out).")
        self.name = path.name
        self.connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.connection.row_factory = sqlite3.Row
        try:
            self.rows = self._check()
        except sqlite3.DatabaseError as exc:
            self.connection.close()
            raise ImportSourceError(f"{path.name} is not a mem0 history database.") from exc
        except BaseException:
            self.connection.close()
            raise

    def _check(self) -> int:
        """The history's rows, counted and measured before any is read."""
        connection = self.connection
        kind = connection.execute("SELECT type FROM sqlite_master WHERE name = 'history'").fetchone()
        # A view, or a column computed as it is read, could compute without end.
        computed = connection.execute("SELECT count(*) FROM pragma_table_xinfo('history') WHERE hidden IN (2, 3)")
        if kind is None or kind[0] != "table" or computed.fetchone()[0]:
            raise ImportSourceError(f"{self.name} is not a mem0 history database.")
        (rows,) = connection.execute(
            "SELECT count(*) FROM (SELECT 1 FROM history LIMIT ?)", [RECORDS_MAX + 1]
        ).fetchone()
        if rows > RECORDS_MAX:
            raise ImportSourceError(
                f"{self.name}: history holds more than {RECORDS_MAX} rows, more than an import reads."
            )
        # An older mem0 wrote fewer columns: those it lacks are read as NULL.
        present = {row[1] for row in connection.execute("SELECT * FROM pragma_table_info('history')")}
        if "memory_id" not in present:
            raise ImportSourceError(f"{self.name} is not a mem0 history database.")
        columns = [f"h.{column}" if column in present else f"NULL AS {column}" for column in HISTORY_COLUMNS]
        self.events_sql = (
            f"SELECT {', '.join(columns)} FROM memproj_events e JOIN main.history h ON h.rowid = e.n "  # noqa: S608
            "WHERE e.memory_id = ? ORDER BY e.created_at, e.n"
        )
        connection.execute("PRAGMA temp_store = FILE")
        length = " + ".join(
            f"coalesce(length(CAST({column} AS TEXT)), 0)" for column in HISTORY_COLUMNS if column in present
        )
        connection.execute(
            "CREATE TEMP TABLE memproj_events AS SELECT CAST(memory_id AS TEXT) AS memory_id, "  # noqa: S608
            f"{'created_at' if 'created_at' in present else 'NULL'} AS created_at, rowid AS n, {length} AS length "
            "FROM main.history WHERE memory_id IS NOT NULL"
        )
        connection.execute(f"{self.events_sql} LIMIT 0", [""])
        connection.execute("CREATE INDEX temp.memproj_events_memory ON memproj_events (memory_id, created_at, n)")
        connection.execute("CREATE TEMP TABLE memproj_present (memory_id TEXT PRIMARY KEY)")
        # Each field of an event counts as a value, as a record's do (bounded_json).
        largest = connection.execute(
            "SELECT substr(memory_id, 1, 200), sum(length) > ? FROM memproj_events GROUP BY memory_id "
            "HAVING sum(length) > ? OR count(*) * ? > ? LIMIT 1",
            [RECORD_MAX_CHARS, RECORD_MAX_CHARS, len(HISTORY_COLUMNS), RECORD_MAX_VALUES],
        ).fetchone()
        if largest is not None:
            memory_id, too_long = largest
            what = (
                f"is longer than {RECORD_MAX_CHARS} characters"
                if too_long
                else f"holds more than {RECORD_MAX_VALUES} values"
            )
            raise ImportSourceError(
                f"{self.name}: the history of the memory {memory_id} {what}, more than an import reads."
            )
        return int(rows)

    def events(self, memory_id: str, *, in_store: bool = False) -> list[dict[str, Any]]:
        """The memory's events, oldest first (``in_store``: the memory is one
        the store has, not to be read again by ``alone``)."""
        try:
            events = [dict(row) for row in self.connection.execute(self.events_sql, [memory_id])]
            if events and in_store:
                self.connection.execute("INSERT OR IGNORE INTO memproj_present VALUES (?)", [memory_id])
        except sqlite3.Error as exc:
            raise ImportSourceError(f"{self.name} could not be read to its end.") from exc
        return events

    def alone(self) -> Iterator[str]:
        """The memories of the history the store has not, in the order of their
        first event (read a batch at a time)."""
        try:
            cursor = self.connection.execute(
                "SELECT memory_id FROM (SELECT memory_id, created_at, n, "
                "row_number() OVER (PARTITION BY memory_id ORDER BY created_at, n) AS r FROM memproj_events) "
                "WHERE r = 1 AND memory_id NOT IN (SELECT memory_id FROM memproj_present) ORDER BY created_at, n"
            )
            for (memory_id,) in batched(cursor):
                yield memory_id
        except sqlite3.Error as exc:
            raise ImportSourceError(f"{self.name} could not be read to its end.") from exc

    def close(self) -> None:
        self.connection.close()


class Mem0Source:
    system = SYSTEM

    def __init__(self, location: str, *, history: str = "", table: str = "mem0", embedding_model: str = "") -> None:
        self.location = location
        self.table = table
        self.embedding_model = embedding_model
        self.history = _History(Path(history)) if history else None
        try:
            self.from_table = location.startswith(("postgres://", "postgresql://"))
            if not self.from_table:
                self.path = Path(location)
                if not self.path.is_file():
                    raise ImportSourceError(
                        f"no file {self.path}; give get_all()'s JSON or the pgvector database's URL."
                    )
            # Read through once here, a memory at a time (without the vectors):
            # a store an import cannot read is refused before anything of it is written.
            self.count = sum(1 for _ in self._items(vectors=False))
        except BaseException:
            self.close()
            raise

    def _items(self, *, vectors: bool = True) -> Iterator[Any]:
        return self._from_table(vectors=vectors) if self.from_table else _export_items(self.path)

    def _from_table(self, *, vectors: bool) -> Iterator[Any]:
        """The table's memories in id order, read a batch at a time
        (memory.importers.base.postgres_rows). A payload is refused past a record's bounds
        (memory.importers.bounded_json), its length measured by the database
        before it is sent; the vector is read only when it may be kept."""
        from psycopg import sql

        name = f"mem0's table {self.table!r}"
        longest = sql.Literal(RECORD_MAX_CHARS)
        vector = (
            sql.SQL("CASE WHEN char_length(t.vector::text) <= {} THEN t.vector::text END").format(longest)
            if vectors and self.embedding_model
            else sql.SQL("NULL")
        )
        query = sql.SQL(
            "SELECT t.id::text, char_length(p.text), CASE WHEN char_length(p.text) <= {longest} THEN p.text END, "
            "{vector} FROM {table} t CROSS JOIN LATERAL (SELECT t.payload::text AS text) p "
            "ORDER BY t.id LIMIT {rows}"
        ).format(longest=longest, vector=vector, table=sql.Identifier(self.table), rows=sql.Literal(RECORDS_MAX + 1))
        with postgres_rows(self.location, query, name) as rows:
            for read, (memory_id, length, payload, vector_text) in enumerate(rows, start=1):
                if read > RECORDS_MAX:
                    raise ImportSourceError(f"{name} holds more than {RECORDS_MAX} records, more than an import reads.")
                if payload is None and length is not None:
                    raise ImportSourceError(
                        f"{name}: the memory {memory_id} is longer than {RECORD_MAX_CHARS} characters, "
                        "more than any memory an import stores holds."
                    )
                decoded = line_value(payload or "{}", f"{name}, memory {memory_id}")
                yield _table_item(memory_id, decoded, vector_text) if isinstance(decoded, dict) else decoded

    def estimate(self) -> int | None:
        return self.count + (self.history.rows if self.history else 0)

    def close(self) -> None:
        if self.history is not None:
            self.history.close()

    def records(self) -> Iterator[Record]:
        for index, item in enumerate(self._items()):
            if not isinstance(item, dict):
                yield Skipped(f"item {index}", "a mem0 memory that is not a JSON object")
                continue
            try:
                memory_id = text_field(item.get("id"), "id")
            except BadRecord:
                memory_id = ""
            if not memory_id:
                yield Skipped(f"item {index}", "a mem0 memory without an id")
                continue
            events = self.history.events(memory_id, in_store=True) if self.history else []
            try:
                record = self._record(memory_id, item, text_field(item.get("memory"), "memory"))
            except BadRecord as exc:
                yield Skipped(memory_id, f"not storable: {exc}")
                continue
            yield from self._earlier_versions(record, events)
            yield record
        for memory_id in self.history.alone() if self.history else ():
            events = self.history.events(memory_id)  # type: ignore[union-attr]
            deleted = [e for e in events if str(e.get("event", "")).upper() == "DELETE" or e.get("is_deleted")]
            if not deleted:
                yield Skipped(memory_id, "in the history only, not in the store (give the store it belongs to)")
                continue
            last = deleted[-1]
            first = events[0]
            try:
                record = self._record(
                    memory_id,
                    {
                        "created_at": first.get("created_at"),
                        "updated_at": last.get("created_at"),
                        "actor_id": last.get("actor_id"),
                        "role": last.get("role"),
                    },
                    text_field(last.get("old_memory") or first.get("new_memory"), "old_memory"),
                )
            except BadRecord as exc:
                yield Skipped(memory_id, f"not storable: {exc}")
                continue
            record.validity = "retracted"
            record.metadata["mem0_event"] = "DELETE"
            yield from self._earlier_versions(record, [e for e in events if e is not last])
            yield record

    def _record(self, memory_id: str, item: dict[str, Any], text: str) -> ImportedMemory:
        metadata = mapping(item.get("metadata"), "metadata")
        for key in ("actor_id", "role", "hash"):
            if item.get(key):
                metadata[f"mem0_{key}"] = item[key]
        created = parse_time(item.get("created_at"))
        return ImportedMemory(
            source_id=memory_id,
            kind="fact",
            content=text,
            created_at=created,
            updated_at=parse_time(item.get("updated_at")) or created,
            occurred_at=created,
            namespace=_namespace(item),
            metadata=metadata,
            source=SYSTEM,
            embedding=item.get("_vector"),
            embedding_model=self.embedding_model,
        )

    def _earlier_versions(self, current: ImportedMemory, events: list[dict[str, Any]]) -> Iterator[ImportedMemory]:
        """Each UPDATE's old text, superseded by the text that replaced it."""
        updates = [e for e in events if str(e.get("event", "")).upper() == "UPDATE" and e.get("old_memory")]
        if not updates:
            return
        adds = [e for e in events if str(e.get("event", "")).upper() == "ADD"]
        since = parse_time(adds[0].get("created_at")) if adds else current.created_at
        if current.created_at is None:
            current.created_at = current.occurred_at = since
        for index, event in enumerate(updates):
            replaced_at = parse_time(event.get("created_at"))
            following = f"{current.source_id}#v{index + 1}" if index + 1 < len(updates) else current.source_id
            yield ImportedMemory(
                source_id=f"{current.source_id}#v{index}",
                kind="fact",
                content=str(event["old_memory"]),
                created_at=since,
                updated_at=replaced_at,
                occurred_at=since,
                namespace=current.namespace,
                metadata={**current.metadata, "mem0_version_of": current.source_id},
                source=SYSTEM,
                validity="superseded",
                superseded_by=following,
                keep_id=False,
            )
            since = replaced_at


def _table_item(memory_id: str, payload: dict[str, Any], vector: str | None) -> dict[str, Any]:
    """A table row as get_all() answers it (the vector, if read, as ``_vector``)."""
    item = {key: payload.get(key) for key in PAYLOAD_KEYS if key in payload}
    item["id"] = memory_id
    item["memory"] = payload.get("data", "")
    item["metadata"] = {k: v for k, v in payload.items() if k not in PAYLOAD_KEYS}
    if vector:
        parts = vector.strip("[]").split(",")
        try:
            item["_vector"] = [float(x) for x in parts]
        except ValueError:
            item["_vector"] = parts  # the import skips it (not numbers) and embeds the text itself
    return item


def open_source(location: str, **options: Any) -> Mem0Source:
    return Mem0Source(location, **options)
