"""memproj's own export (``manage.py export``, format ``memproj-export/1``): a JSON
Lines file whose memory rows carry every column. Imported into another tenant
or installation, each memory keeps its id (when free), timestamps, counters,
validity and supersession; its outcome history comes from the export's
``marked_<signal>`` audit events, and the aliases it had from earlier imports
come along as aliases again. Principals, links, conflicts and the rest of the
audit log are not memories: ``manage.py import`` restores a whole tenant."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from memory.importers.base import ImportedMemory, ImportSourceError, Record, Skipped, number, parse_time

EXPORT_FORMAT = "memproj-export/1"
SYSTEM = "memproj"
_NOT_MEMORIES = {
    "principal": "principals are not imported (manage.py import restores a whole tenant)",
    "link": "links between memories are not imported",
    "conflict": "conflict candidates are not imported (the conflict check runs again)",
}


class MemprojExport:
    system = SYSTEM

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise ImportSourceError(f"no file {path}; give the file `manage.py export` wrote.")
        self.path = path
        with path.open(encoding="utf-8") as handle:
            first = handle.readline()
        try:
            header = json.loads(first)
        except ValueError:
            header = {}
        if header.get("type") != "header" or header.get("format") != EXPORT_FORMAT:
            raise ImportSourceError(f"{path} is not a {EXPORT_FORMAT} file (its first line must be the header).")

    def _rows(self) -> Iterator[dict[str, Any]]:
        with self.path.open(encoding="utf-8") as handle:
            next(handle)
            for number_, line in enumerate(handle, start=2):
                if not line.strip():
                    continue
                try:
                    yield json.loads(line)
                except ValueError as exc:
                    raise ImportSourceError(f"{self.path}:{number_}: not JSON ({exc})") from exc

    def estimate(self) -> int | None:
        with self.path.open(encoding="utf-8") as handle:
            return sum(1 for line in handle if line.strip()) - 1

    def close(self) -> None:
        return None

    def records(self) -> Iterator[Record]:
        outcomes: dict[str, list[tuple[str, datetime | None]]] = defaultdict(list)
        aliases: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for row in self._rows():
            kind = row.get("type")
            if kind == "event" and str(row.get("event_type", "")).startswith("marked_") and row.get("memory_id"):
                outcomes[row["memory_id"]].append((row["event_type"][7:], parse_time(row.get("created_at"))))
            elif kind == "alias" and row.get("memory_id"):
                aliases[row["memory_id"]].append((str(row.get("system", "")), str(row.get("alias", ""))))
        for row in self._rows():
            kind = row.get("type")
            if kind == "memory":
                yield _memory(row, outcomes.get(row.get("id", ""), []), aliases.get(row.get("id", ""), []))
            elif kind in _NOT_MEMORIES:
                yield Skipped(str(row.get("id", "")), _NOT_MEMORIES[kind])


def _memory(row: dict[str, Any], outcomes: list[tuple[str, datetime | None]], aliases: list[tuple[str, str]]) -> Record:
    created = parse_time(row.get("created_at"))
    return ImportedMemory(
        source_id=str(row["id"]),
        kind=str(row.get("kind", "")),
        content=str(row.get("content", "")),
        created_at=created,
        updated_at=parse_time(row.get("updated_at")),
        occurred_at=parse_time(row.get("occurred_at")) or created,
        other_aliases=tuple(aliases),
        namespace=tuple(row.get("namespace") or ()),
        scope=str(row.get("scope") or "global"),
        butler=str(row.get("butler") or ""),
        session_id=str(row.get("session_id") or ""),
        subject=str(row.get("subject") or ""),
        predicate=str(row.get("predicate") or ""),
        collection=str(row.get("collection") or ""),
        boundary_class=str(row.get("boundary_class") or "internal"),
        tags=list(row.get("tags") or []),
        metadata=dict(row.get("metadata") or {}),
        source=str(row.get("source") or ""),
        importance=number(row.get("importance"), 5.0),
        confidence=number(row.get("confidence"), 1.0),
        permanence=str(row.get("permanence") or ""),
        validity=str(row.get("validity") or "active"),
        superseded_by=str(row["superseded_by_id"]) if row.get("superseded_by_id") else None,
        expires_at=parse_time(row.get("expires_at")),
        maturity=str(row.get("maturity") or ""),
        success_count=number(row.get("success_count"), 0.0),
        harmful_count=int(number(row.get("harmful_count"), 0)),
        applied_count=int(number(row.get("applied_count"), 0)),
        effectiveness_score=number(row.get("effectiveness_score"), 0.0),
        outcome_score=number(row.get("outcome_score"), 0.5),
        utility=number(row.get("utility"), 0.0),
        last_applied_at=parse_time(row.get("last_applied_at")),
        reference_count=int(number(row.get("reference_count"), 0)),
        last_referenced_at=parse_time(row.get("last_referenced_at")),
        accessed_at=parse_time(row.get("accessed_at")),
        last_confirmed_at=parse_time(row.get("last_confirmed_at")),
        outcomes=outcomes,
        embedding=row.get("embedding") if isinstance(row.get("embedding"), list) else None,
        embedding_model=str(row.get("embedding_model") or ""),
    )


def open_source(location: str, **_: Any) -> MemprojExport:
    return MemprojExport(Path(location))
