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

import json
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

SYSTEM = "pce"
CLAIM_SUBJECT = "claim"  # memory.claims.CLAIM_SUBJECT: a claim is a fact keyed by its text
RETRACTED_STATUSES = {"rolled_back", "retracted", "deleted", "tombstoned"}


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
            connection = duckdb.connect(str(path), read_only=True, config={"enable_external_access": False})
        except duckdb.Error as exc:
            raise ImportSourceError(f"{path} is not a DuckDB file pce-memory wrote ({exc}).") from exc
        try:
            self.claims = self._rows(connection, "SELECT * FROM claims ORDER BY created_at, id")
            tables = {r[0] for r in connection.execute("SELECT table_name FROM information_schema.tables").fetchall()}
            self.feedback = (
                self._rows(connection, "SELECT * FROM feedback ORDER BY ts, id") if "feedback" in tables else []
            )
            self.entities = self._rows(connection, "SELECT * FROM entities ORDER BY id") if "entities" in tables else []
            self.claim_entities = (
                self._rows(connection, "SELECT * FROM claim_entities") if "claim_entities" in tables else []
            )
            self.relations = (
                self._rows(connection, "SELECT * FROM relations ORDER BY id") if "relations" in tables else []
            )
        except duckdb.Error as exc:
            raise ImportSourceError(f"{path} has no pce-memory claims table ({exc}).") from exc
        finally:
            connection.close()

    @staticmethod
    def _rows(connection: Any, query: str) -> list[dict[str, Any]]:
        cursor = connection.execute(query)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

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

    def _files(self, folder: str) -> list[Path]:
        return sorted((self.path / folder).rglob("*.json")) if (self.path / folder).is_dir() else []

    def estimate(self) -> int | None:
        return sum(len(self._files(f)) for f in ("claims", "entities", "relations"))

    def close(self) -> None:
        return None

    def _load(self, file: Path) -> dict[str, Any]:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ImportSourceError(f"{file} is not JSON ({exc}).") from exc
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
