"""LangGraph's PostgresStore (``langgraph-checkpoint-postgres``), which is where a
LangMem user's memories live: the table ``store(prefix, key, value jsonb,
created_at, updated_at, expires_at, ttl_minutes)``, primary key (prefix, key),
``prefix`` being the namespace joined with ".". LangMem's manage_memory tool
writes ``{"content": ...}`` under a UUID key. Read from the database (a
``postgresql://`` URL) or from a plain ``pg_dump`` of it (the ``COPY ... store``
block; the restrict / unrestrict meta-commands recent pg_dump writes are skipped).
Either is read through once before anything is written, then again a batch at a
time as the import goes (the table's items oldest first, a dump's in its order).

Each item becomes a fact keyed by its key in its namespace, as memproj's LangGraph
store and langmem dialect hold one (the key is the subject; a UUID key is also the
memory's id where free), so the same ``search_memory`` / store ``get`` finds it
under the same namespace and key. A value's string ``content`` is the text and
its other keys are attributes; any other value is kept whole as JSON text (as
memproj's store keeps one). Vectors in ``store_vectors`` come from whatever
model the index was configured with: they are recomputed."""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterator
from contextlib import AbstractContextManager, closing
from pathlib import Path
from typing import Any

from memory.importers.base import (
    ImportedMemory,
    ImportSourceError,
    Record,
    Skipped,
    parse_position,
    parse_time,
    postgres_rows,
)
from memory.importers.bounded_json import RECORD_MAX_CHARS, RECORDS_MAX, RecordTooLarge, line_value

SYSTEM = "langgraph"
# memproj's LangGraph store marks a value kept whole as JSON text with this
# metadata key (mcp_server's langmem dialect reads it back as the value).
JSON_VALUE = "_memproj_value"
COLUMNS = ("prefix", "key", "value", "created_at", "updated_at", "expires_at")
# An item's value that is not JSON (a pg_dump can hold anything): skipped.
NOT_JSON = object()


def value_fields(value: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"], {k: v for k, v in value.items() if k != "content"}
    attributes = {k: v for k, v in value.items() if k != "content"} if isinstance(value, dict) else {}
    return json.dumps(value, ensure_ascii=False, sort_keys=True), {**attributes, JSON_VALUE: "json"}


class PostgresStoreSource:
    """The store table (or its COPY block in a pg_dump), read through once when
    opened, an item at a time: a store past the bounds is refused before
    anything of it is written. Its items are then read again as the import
    goes, a batch at a time."""

    system = SYSTEM

    def __init__(self, location: str, *, table: str = "store") -> None:
        self.location, self.table = location, table
        self.dump: Path | None = None
        self.name = f"the store table {table!r}"
        if not location.startswith(("postgres://", "postgresql://")):
            self.dump = Path(location)
            self.name = self.dump.name
            if not self.dump.is_file():
                raise ImportSourceError(f"no file {self.dump}: give the store's database URL or a plain pg_dump of it.")
        self.count = sum(1 for _ in self._items())

    def _items(self) -> Iterator[tuple[Any, ...]]:
        """Each item as (prefix, key, value, created_at, updated_at, expires_at),
        its value decoded within a record's bounds (NOT_JSON: not JSON); refused
        past RECORDS_MAX items or an item longer than RECORD_MAX_CHARS."""
        with closing(_dumped_rows(self.dump, self.table)) if self.dump else self._table_rows() as rows:
            for count, (prefix, key, length, value, *times) in enumerate(rows, start=1):
                if count > RECORDS_MAX:
                    raise ImportSourceError(
                        f"{self.name} holds more than {RECORDS_MAX} items, more than an import reads."
                    )
                item = f"{prefix}/{key}"[:200]  # as a message names it
                if length > RECORD_MAX_CHARS:
                    raise ImportSourceError(
                        f"{self.name}: the item {item} is longer than {RECORD_MAX_CHARS} characters, "
                        "more than any memory an import stores holds."
                    )
                try:
                    decoded = line_value(value, f"{self.name}, item {item}")
                except RecordTooLarge:
                    raise
                except ImportSourceError:
                    decoded = NOT_JSON
                yield (prefix, key, decoded, *times)

    def _table_rows(self) -> AbstractContextManager[Iterator[tuple[Any, ...]]]:
        """The table's items, oldest first, read a batch at a time
        (memory.importers.base.postgres_rows), as (prefix, key, length, value
        text, created_at, updated_at, expires_at): an item's length is measured
        by the database and its text sent only within RECORD_MAX_CHARS."""
        from psycopg import sql

        query = sql.SQL(
            "SELECT left(k.prefix, {longest}), left(k.key, {longest}), n.length, "
            "CASE WHEN n.length <= {longest} THEN k.value END, t.created_at, t.updated_at, t.expires_at "
            "FROM {table} t CROSS JOIN LATERAL (SELECT coalesce(t.prefix, '') AS prefix, "
            "coalesce(t.key, '') AS key, coalesce(t.value::text, '') AS value) k "
            "CROSS JOIN LATERAL (SELECT char_length(k.prefix) + char_length(k.key) + char_length(k.value) AS length) n "
            "ORDER BY t.created_at, t.prefix, t.key LIMIT {rows}"
        ).format(
            longest=sql.Literal(RECORD_MAX_CHARS), table=sql.Identifier(self.table), rows=sql.Literal(RECORDS_MAX + 1)
        )
        return postgres_rows(self.location, query, self.name)

    def estimate(self) -> int | None:
        return self.count

    def close(self) -> None:
        return None

    def records(self) -> Iterator[Record]:
        for prefix, key, value, created_at, updated_at, expires_at in self._items():
            source_id = f"{prefix}/{key}"
            if value is NOT_JSON:
                yield Skipped(source_id, "the value is not JSON")
                continue
            content, attributes = value_fields(value)
            created = parse_time(created_at)
            yield ImportedMemory(
                source_id=source_id,
                own_id=str(key),
                kind="fact",
                content=content,
                created_at=created,
                updated_at=parse_time(updated_at) or created,
                occurred_at=created,
                namespace=tuple(part for part in str(prefix).split(".") if part),
                subject=str(key),
                metadata=attributes,
                expires_at=parse_time(expires_at),
                source="langgraph",
            )


_COPY_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


_COPY_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def _copy_field(text: str) -> str | None:
    """One field of PostgreSQL's COPY text format."""
    if text == "\\N":
        return None
    return _COPY_ESCAPE.sub(lambda match: _COPY_ESCAPES.get(match[1], match[1]), text)


def _dump_lines(path: Path, longest: int) -> Iterator[tuple[str, bool]]:
    """The dump's lines, each read no further than ``longest`` characters, with
    whether it was read whole (a longer line is read past)."""
    with path.open(encoding="utf-8") as handle:
        try:
            while line := handle.readline(longest):
                whole = line.endswith("\n") or len(line) < longest
                yield line, whole
                while not whole and (rest := handle.readline(longest)):
                    whole = rest.endswith("\n") or len(rest) < longest
        except UnicodeDecodeError as exc:
            raise ImportSourceError(f"{path.name} is not a plain pg_dump{parse_position(exc)}.") from exc


def _dumped_rows(path: Path, table: str) -> Generator[tuple[Any, ...], None, None]:
    """The store table's rows from a plain-format pg_dump file as they are read
    (in the dump's order), as (prefix, key, length, value text, created_at,
    updated_at, expires_at)."""
    # COPY writes a character as at most two (a backslash escape); the other
    # columns are short.
    longest = 2 * RECORD_MAX_CHARS + 1024
    columns: list[str] | None = None
    for number, (line, whole) in enumerate(_dump_lines(path, longest), start=1):
        if columns is None:
            match = re.match(r"^COPY (?:[\w\"]+\.)?\"?(\w+)\"? \(([^)]*)\) FROM stdin;", line)
            if match and match.group(1) == table:
                columns = [c.strip().strip('"') for c in match.group(2).split(",")]
            continue
        if line.startswith("\\."):
            return
        if not whole:
            raise ImportSourceError(
                f"{path.name}:{number}: a row longer than {longest} characters, "
                "more than any memory an import stores holds."
            )
        fields = dict(zip(columns, (_copy_field(f) for f in line.rstrip("\n").split("\t")), strict=False))
        prefix, key, value = (fields.get(name) or "" for name in COLUMNS[:3])
        yield (prefix, key, len(prefix) + len(key) + len(value), value, *(fields.get(name) for name in COLUMNS[3:]))
    if columns is None:
        raise ImportSourceError(f"{path} holds no COPY block of the table {table!r} (a plain-format pg_dump?).")


def open_source(location: str, **options: Any) -> PostgresStoreSource:
    return PostgresStoreSource(location, **options)
