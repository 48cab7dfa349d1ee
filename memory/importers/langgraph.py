"""LangGraph's PostgresStore (``langgraph-checkpoint-postgres``), which is where a
LangMem user's memories live: the table ``store(prefix, key, value jsonb,
created_at, updated_at, expires_at, ttl_minutes)``, primary key (prefix, key),
``prefix`` being the namespace joined with ".". LangMem's manage_memory tool
writes ``{"content": ...}`` under a UUID key. Read from the database (a
``postgresql://`` URL) or from a plain ``pg_dump`` of it (the ``COPY ... store``
block; the restrict / unrestrict meta-commands recent pg_dump writes are skipped).

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memory.importers.base import ImportedMemory, ImportSourceError, Record, Skipped, parse_time

SYSTEM = "langgraph"
# memproj's LangGraph store marks a value kept whole as JSON text with this
# metadata key (mcp_server's langmem dialect reads it back as the value).
JSON_VALUE = "_memproj_value"


def value_fields(value: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"], {k: v for k, v in value.items() if k != "content"}
    attributes = {k: v for k, v in value.items() if k != "content"} if isinstance(value, dict) else {}
    return json.dumps(value, ensure_ascii=False, sort_keys=True), {**attributes, JSON_VALUE: "json"}


class PostgresStoreSource:
    system = SYSTEM

    def __init__(self, location: str, *, table: str = "store") -> None:
        if not location.startswith(("postgres://", "postgresql://")):
            self.rows = _dumped_rows(Path(location), table)
            return
        import psycopg
        from psycopg import sql

        try:
            with psycopg.connect(location, autocommit=True) as connection:
                self.rows = connection.execute(
                    sql.SQL(
                        "SELECT prefix, key, value, created_at, updated_at, expires_at FROM {} "
                        "ORDER BY created_at, prefix, key"
                    ).format(sql.Identifier(table))
                ).fetchall()
        except psycopg.Error as exc:
            raise ImportSourceError(
                f"cannot read the store table {table!r} (the server's log has the database's answer)."
            ) from exc

    def estimate(self) -> int | None:
        return len(self.rows)

    def close(self) -> None:
        return None

    def records(self) -> Iterator[Record]:
        for prefix, key, value, created_at, updated_at, expires_at in self.rows:
            source_id = f"{prefix}/{key}"
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
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


def _copy_field(text: str) -> str | None:
    """One field of PostgreSQL's COPY text format."""
    if text == "\\N":
        return None
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            out.append(_COPY_ESCAPES.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _dumped_rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    """The store table's rows from a plain-format pg_dump file."""
    if not path.is_file():
        raise ImportSourceError(f"no file {path}: give the store's database URL or a plain pg_dump of it.")
    wanted = ["prefix", "key", "value", "created_at", "updated_at", "expires_at"]
    rows: list[tuple[Any, ...]] = []
    columns: list[str] | None = None
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if columns is None:
                match = re.match(r"^COPY (?:[\w\"]+\.)?\"?(\w+)\"? \(([^)]*)\) FROM stdin;", line)
                if match and match.group(1) == table:
                    columns = [c.strip().strip('"') for c in match.group(2).split(",")]
                continue
            if line.startswith("\\."):
                break
            fields = dict(zip(columns, (_copy_field(f) for f in line.rstrip("\n").split("\t")), strict=False))
            rows.append(tuple(fields.get(name) for name in wanted))
    if columns is None:
        raise ImportSourceError(f"{path} holds no COPY block of the table {table!r} (a plain-format pg_dump?).")
    return sorted(rows, key=lambda r: (str(r[3]), str(r[0]), str(r[1])))


def open_source(location: str, **options: Any) -> PostgresStoreSource:
    return PostgresStoreSource(location, **options)
