"""The butlers memory module (``src/butlers/modules/memory``): its PostgreSQL
tables ``episodes``, ``facts``, ``rules`` and ``memory_links`` in a butler's
schema (``--option schema=NAME``, default ``public``). Its embeddings are 384-d
all-MiniLM-L6-v2, memproj's own model: they are kept.

memproj's memory dialect is this module's tools, so the mapping is one to one:
episodes (butler, session, importance, references, expiry), facts (subject,
predicate, importance, confidence, permanence and decay, scope, tags,
confirmation, ``valid_at`` / ``observed_at`` as when it happened, validity:
``fading`` is active, ``expired`` / ``forgotten`` retracted) and rules (maturity,
effectiveness, applied / success / harmful counts, last application). Each
keeps its UUID (as its id where free). A fact's ``supersedes_id`` and a
``supersedes`` memory link become supersession; the other links are kept in
the memory's metadata (``butlers_links``)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from memory.importers.base import (
    BadRecord,
    ImportedMemory,
    ImportSourceError,
    Record,
    Skipped,
    mapping,
    number,
    parse_time,
    string_list,
)

SYSTEM = "butlers"
MODEL = "all-MiniLM-L6-v2"
ORDER = "created_at, id"
VALIDITY = {"active": "active", "fading": "active", "superseded": "superseded"}


def _vector(value: Any) -> list[float] | None:
    if not value:
        return None
    return [float(x) for x in str(value).strip("[]").split(",")]


def _json(value: Any, default: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return default
    return default if value is None else value


class ButlersTables:
    system = SYSTEM

    def __init__(self, location: str, *, schema: str = "public") -> None:
        if not location.startswith(("postgres://", "postgresql://")):
            raise ImportSourceError("give the butler's database as a postgresql:// URL (and --option schema=NAME).")
        import psycopg
        from psycopg import sql
        from psycopg.rows import dict_row

        def rows(connection: Any, table: str, order: str) -> list[dict[str, Any]]:
            exists = connection.execute("SELECT to_regclass(%s) IS NOT NULL AS ok", [f"{schema}.{table}"]).fetchone()
            if not exists or not exists["ok"]:
                return []
            vector = sql.SQL(", embedding::text AS embedding_text") if table != "memory_links" else sql.SQL("")
            query = sql.SQL("SELECT *{} FROM {}.{} ORDER BY {}").format(
                vector, sql.Identifier(schema), sql.Identifier(table), sql.SQL(order)
            )
            return connection.execute(query).fetchall()

        try:
            with psycopg.connect(location, autocommit=True, row_factory=dict_row) as connection:
                self.episodes = rows(connection, "episodes", ORDER)
                self.facts = rows(connection, "facts", ORDER)
                self.rules = rows(connection, "rules", ORDER)
                self.links = rows(connection, "memory_links", "created_at")
        except psycopg.Error as exc:
            raise ImportSourceError(
                "cannot read the butler's memory tables (the server's log has the database's answer)."
            ) from exc
        if not (self.episodes or self.facts or self.rules):
            raise ImportSourceError(f"no episodes, facts or rules in schema {schema!r}.")

    def estimate(self) -> int | None:
        return len(self.episodes) + len(self.facts) + len(self.rules)

    def close(self) -> None:
        return None

    def records(self) -> Iterator[Record]:
        successor: dict[str, str] = {}
        links: dict[str, list[dict[str, str]]] = defaultdict(list)
        for fact in self.facts:
            if fact.get("supersedes_id"):
                successor[str(fact["supersedes_id"])] = str(fact["id"])
        for link in self.links:
            source, target = str(link["source_id"]), str(link["target_id"])
            if link["relation"] == "supersedes":
                successor.setdefault(target, source)
            else:
                links[source].append({"relation": link["relation"], "type": link["target_type"], "id": target})
        for kind, rows in (("episode", self.episodes), ("fact", self.facts), ("rule", self.rules)):
            for row in rows:
                try:
                    yield self._common(row, kind, links, successor)
                except BadRecord as exc:
                    yield Skipped(str(row.get("id", "")), f"not storable: {exc}")

    def _common(
        self, row: dict[str, Any], kind: str, links: dict[str, list[dict[str, str]]], successor: dict[str, str]
    ) -> ImportedMemory:
        memory_id = str(row["id"])
        metadata = mapping(_json(row.get("metadata"), {}), "metadata")
        for key in ("tenant_id", "sensitivity", "retention_class", "request_id", "source_butler"):
            if row.get(key) not in (None, ""):
                metadata[f"butlers_{key}"] = str(row[key])
        if links.get(memory_id):
            metadata["butlers_links"] = links[memory_id]
        created = parse_time(row.get("created_at"))
        vector = _vector(row.get("embedding_text"))
        record = ImportedMemory(
            source_id=memory_id,
            kind=kind,
            content=str(row.get("content") or ""),
            created_at=created,
            updated_at=created,
            occurred_at=created,
            scope=str(row.get("scope") or "global"),
            tags=string_list(row.get("tags")),
            metadata=metadata,
            source=SYSTEM,
            importance=number(row.get("importance"), 5.0, low=0, high=10),
            confidence=number(row.get("confidence"), 1.0, low=0, high=1),
            permanence=str(row.get("permanence") or ""),
            reference_count=int(number(row.get("reference_count"), 0, low=0)),
            last_referenced_at=parse_time(row.get("last_referenced_at")),
            last_confirmed_at=parse_time(row.get("last_confirmed_at")),
            embedding=vector,
            embedding_model=MODEL if vector else "",
        )
        if kind == "episode":
            record.butler = str(row.get("butler") or "")
            record.session_id = str(row.get("session_id") or "")
            record.expires_at = parse_time(row.get("expires_at"))
            record.metadata["butlers_consolidation_status"] = str(row.get("consolidation_status") or "")
        elif kind == "fact":
            record.subject, record.predicate = str(row.get("subject") or ""), str(row.get("predicate") or "")
            record.occurred_at = parse_time(row.get("valid_at")) or parse_time(row.get("observed_at")) or created
            record.validity = VALIDITY.get(str(row.get("validity") or "active"), "retracted")
            if row.get("invalid_at"):
                record.metadata["butlers_invalid_at"] = str(row["invalid_at"])
        else:
            record.maturity = str(row.get("maturity") or "candidate")
            record.effectiveness_score = number(row.get("effectiveness_score"), 0.0)
            record.applied_count = int(number(row.get("applied_count"), 0, low=0))
            record.success_count = number(row.get("success_count"), 0.0, low=0)
            record.harmful_count = int(number(row.get("harmful_count"), 0, low=0))
            record.last_applied_at = parse_time(row.get("last_applied_at"))
        if memory_id in successor and record.validity != "retracted":
            record.validity, record.superseded_by = "superseded", successor[memory_id]
        return record


def open_source(location: str, **options: Any) -> ButlersTables:
    return ButlersTables(location, **options)
