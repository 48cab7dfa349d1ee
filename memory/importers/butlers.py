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
the memory's metadata (``butlers_links``). The tables are read through once
before anything is written, then a batch at a time as the import goes, each
row with its successor and links gathered onto it by the database."""

from __future__ import annotations

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
    postgres_rows,
    string_list,
)
from memory.importers.bounded_json import RECORD_MAX_CHARS, RECORDS_MAX, line_value

SYSTEM = "butlers"
MODEL = "all-MiniLM-L6-v2"
VALIDITY = {"active": "active", "fading": "active", "superseded": "superseded"}
MEMORY_TABLES = (("episode", "episodes"), ("fact", "facts"), ("rule", "rules"))
# A memory's successor and its other links, gathered onto its row by the
# database under names of the reader's own.
SUCCESSOR = "_memproj_successor"
LINKS = "_memproj_links"


def _vector(value: Any) -> list[float] | None:
    if not value:
        return None
    return [float(x) for x in str(value).strip("[]").split(",")]


class ButlersTables:
    """A butler's memory tables, read through once when opened, a memory at a
    time (without the vectors): a store past the bounds is refused before
    anything of it is written. Its memories are then read again as the import
    goes, a batch at a time, each with its successor and links."""

    system = SYSTEM

    def __init__(self, location: str, *, schema: str = "public") -> None:
        if not location.startswith(("postgres://", "postgresql://")):
            raise ImportSourceError("give the butler's database as a postgresql:// URL (and --option schema=NAME).")
        import psycopg

        self.location, self.schema = location, schema
        self.name = f"the butler's schema {schema!r}"
        try:
            with psycopg.connect(location, autocommit=True) as connection:
                self.tables = {
                    table
                    for table in ("episodes", "facts", "rules", "memory_links")
                    if connection.execute("SELECT to_regclass(%s) IS NOT NULL", [f"{schema}.{table}"]).fetchone()
                    == (True,)
                }
        except psycopg.Error as exc:
            raise ImportSourceError(
                "cannot read the butler's memory tables (the server's log has the database's answer)."
            ) from exc
        self.count = sum(1 for _ in self._memories(vectors=False))
        if not self.count:
            raise ImportSourceError(f"no episodes, facts or rules in schema {schema!r}.")

    def _memories(self, *, vectors: bool = True) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """(kind, id, row) of each memory, the episodes, then the facts, then the
        rules, oldest first; a row is refused past a record's bounds
        (memory.importers.bounded_json), its length measured by the database
        before it is sent, and past RECORDS_MAX memories in all."""
        read = 0
        for kind, table in MEMORY_TABLES:
            if table not in self.tables:
                continue
            with postgres_rows(self.location, self._query(table, vectors), self.name) as rows:
                for memory_id, text, vector in rows:
                    read += 1
                    if read > RECORDS_MAX:
                        raise ImportSourceError(
                            f"{self.name} holds more than {RECORDS_MAX} memories, more than an import reads."
                        )
                    if text is None:
                        raise ImportSourceError(
                            f"{self.name}: the {kind} {memory_id} is longer than {RECORD_MAX_CHARS} characters, "
                            "more than any memory an import stores holds."
                        )
                    row = line_value(text, f"{self.name}, {kind} {memory_id}")
                    row["embedding_text"] = vector
                    yield kind, memory_id, row

    def _query(self, table: str, vectors: bool) -> Any:
        """A memory table's rows as JSON text (without its vector and search
        vector), each with its successor and its other links: a fact naming it
        in supersedes_id (the newest), else a supersedes link to it (the
        oldest); its links to others oldest first."""
        from psycopg import sql

        def of(name: str) -> sql.Composable:
            return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

        longest = sql.Literal(RECORD_MAX_CHARS)
        successors: list[sql.Composable] = []
        if "facts" in self.tables:
            successors.append(
                sql.SQL(
                    "SELECT f.supersedes_id::text AS id, f.id::text AS successor, 0 AS source, f.created_at AS at "
                    "FROM {} f WHERE f.supersedes_id IS NOT NULL"
                ).format(of("facts"))
            )
        joins: list[sql.Composable] = [sql.SQL("")]
        extra: list[sql.Composable] = [sql.SQL("NULL"), sql.SQL("NULL")]
        if "memory_links" in self.tables:
            successors.append(
                sql.SQL(
                    "SELECT m.target_id::text, m.source_id::text, 1, m.created_at FROM {} m "
                    "WHERE m.relation = 'supersedes'"
                ).format(of("memory_links"))
            )
            joins.append(
                sql.SQL(
                    " LEFT JOIN (SELECT m.source_id::text AS id, jsonb_agg(jsonb_build_object('relation', m.relation, "
                    "'type', m.target_type, 'id', m.target_id::text) ORDER BY m.created_at) AS links FROM {} m "
                    "WHERE m.relation IS DISTINCT FROM 'supersedes' GROUP BY 1) l ON l.id = t.id::text"
                ).format(of("memory_links"))
            )
            extra[1] = sql.SQL("l.links")
        if successors:
            # Facts in (created_at, id) order, the last one naming it; links in
            # created_at order, the first.
            joins.append(
                sql.SQL(
                    " LEFT JOIN (SELECT DISTINCT ON (c.id) c.id, c.successor FROM ({}) c ORDER BY c.id, c.source, "
                    "CASE WHEN c.source = 0 THEN c.at END DESC, "
                    'CASE WHEN c.source = 0 THEN c.successor END COLLATE "C" DESC, c.at) s ON s.id = t.id::text'
                ).format(sql.SQL(" UNION ALL ").join(successors))
            )
            extra[0] = sql.SQL("s.successor")
        vector = (
            sql.SQL("CASE WHEN char_length(t.embedding::text) <= {} THEN t.embedding::text END").format(longest)
            if vectors
            else sql.SQL("NULL")
        )
        return sql.SQL(
            "SELECT left(t.id::text, 200), CASE WHEN char_length(r.text) <= {longest} "
            "THEN r.text END, {vector} FROM {table} t{joins} CROSS JOIN LATERAL (SELECT (to_jsonb(t) - 'embedding' "
            "- 'search_vector' || jsonb_build_object({successor_key}, {successor}, {links_key}, {links}))::text "
            "AS text) r ORDER BY t.created_at, t.id LIMIT {rows}"
        ).format(
            longest=longest,
            vector=vector,
            table=of(table),
            joins=sql.SQL("").join(joins),
            successor_key=sql.Literal(SUCCESSOR),
            successor=extra[0],
            links_key=sql.Literal(LINKS),
            links=extra[1],
            rows=sql.Literal(RECORDS_MAX + 1),
        )

    def estimate(self) -> int | None:
        return self.count

    def close(self) -> None:
        return None

    def records(self) -> Iterator[Record]:
        for kind, memory_id, row in self._memories():
            try:
                yield self._common(row, kind)
            except BadRecord as exc:
                yield Skipped(memory_id, f"not storable: {exc}")

    def _common(self, row: dict[str, Any], kind: str) -> ImportedMemory:
        memory_id = str(row["id"])
        metadata = mapping(row.get("metadata"), "metadata")
        for key in ("tenant_id", "sensitivity", "retention_class", "request_id", "source_butler"):
            if row.get(key) not in (None, ""):
                metadata[f"butlers_{key}"] = str(row[key])
        if row.get(LINKS):
            metadata["butlers_links"] = row[LINKS]
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
        if row.get(SUCCESSOR) and record.validity != "retracted":
            record.validity, record.superseded_by = "superseded", str(row[SUCCESSOR])
        return record


def open_source(location: str, **options: Any) -> ButlersTables:
    return ButlersTables(location, **options)
