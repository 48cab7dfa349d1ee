"""LangGraph's PostgresStore (``langgraph-checkpoint-postgres``), which is where a
LangMem user's memories live: the table ``store(prefix, key, value jsonb,
created_at, updated_at, expires_at, ttl_minutes)``, primary key (prefix, key),
``prefix`` being the namespace joined with ".". LangMem's manage_memory tool
writes ``{"content": ...}`` under a UUID key.

Each item becomes a fact keyed by its key in its namespace, as memproj's LangGraph
store and langmem dialect hold one (the key is the subject; a UUID key is also the
memory's id where free), so the same ``search_memory`` / store ``get`` finds it
under the same namespace and key. A value's string ``content`` is the text and
its other keys are attributes; any other value is kept whole as JSON text (as
memproj's store keeps one). Vectors in ``store_vectors`` come from whatever
model the index was configured with: they are recomputed."""

from __future__ import annotations

import json
from collections.abc import Iterator
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
            raise ImportSourceError("give the PostgresStore's database as a postgresql:// URL.")
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
            raise ImportSourceError(f"cannot read the store table {table!r}: {exc}".strip()) from exc

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


def open_source(location: str, **options: Any) -> PostgresStoreSource:
    return PostgresStoreSource(location, **options)
