"""memproj's own export (``manage.py export``, format ``memproj-export/1``): a JSON
Lines file whose memory rows carry every column. Imported into another tenant
or installation, each memory keeps its id (when free), timestamps, counters,
validity and supersession; its outcome history comes from the export's
``marked_<signal>`` audit events, and the aliases it had from earlier imports
come along as aliases again. Principals, links, conflicts and the rest of the
audit log are not memories: ``manage.py import`` restores a whole tenant."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
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
    text_field,
    text_list,
)
from memory.importers.bounded_json import NotUtf8Line, json_lines, scan_lines

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
        refusal = ImportSourceError(f"{path} is not a {EXPORT_FORMAT} file (its first line must be the header).")
        try:
            header: Any = next((value for _, value in json_lines(path, max_lines=None)), {})
        except NotUtf8Line as exc:
            # The file is decoded ahead of its first line: a later line's bytes are that line's fault.
            if exc.line != 1:
                raise
            raise refusal from exc.__cause__ or exc
        except ImportSourceError as exc:
            raise refusal from exc.__cause__ or exc
        if not isinstance(header, dict) or header.get("type") != "header" or header.get("format") != EXPORT_FORMAT:
            raise refusal
        # Read through once, undecoded, before anything is written: a line that
        # is not UTF-8 is refused saying where, and the lines are counted.
        self.total, bad = scan_lines(path)
        if bad is not None:
            raise NotUtf8Line(f"{path.name}:{bad}: not JSON (it is not UTF-8 text).", bad)

    def _rows(self) -> Iterator[tuple[int, Any]]:
        """(line number, the line's JSON value), for every line after the header."""
        for number_, value in json_lines(self.path, max_lines=None):
            if number_ > 1:
                yield number_, value

    def estimate(self) -> int | None:
        return self.total - 1

    def close(self) -> None:
        return None

    def records(self) -> Iterator[Record]:
        outcomes: dict[str, list[tuple[str, datetime | None]]] = defaultdict(list)
        aliases: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for _, row in self._rows():
            if not isinstance(row, dict) or not isinstance(row.get("memory_id"), str):
                continue
            kind = row.get("type")
            if kind == "event" and isinstance(row.get("event_type"), str) and row["event_type"].startswith("marked_"):
                outcomes[row["memory_id"]].append((row["event_type"][7:], parse_time(row.get("created_at"))))
            elif kind == "alias" and isinstance(row.get("system"), str) and isinstance(row.get("alias"), str):
                aliases[row["memory_id"]].append((row["system"], row["alias"]))
        for line, row in self._rows():
            if not isinstance(row, dict):
                yield Skipped(f"line {line}", "a line that is not a JSON object")
                continue
            kind = row.get("type")
            if kind == "memory":
                memory_id = row.get("id")
                if not isinstance(memory_id, str) or not memory_id:
                    yield Skipped(f"line {line}", "a memory row without an id")
                    continue
                try:
                    yield _memory(row, outcomes.get(memory_id, []), aliases.get(memory_id, []))
                except BadRecord as exc:
                    yield Skipped(memory_id, f"not storable: {exc}")
            elif kind in _NOT_MEMORIES:
                yield Skipped(str(row.get("id", "")), _NOT_MEMORIES[kind])


def _memory(row: dict[str, Any], outcomes: list[tuple[str, datetime | None]], aliases: list[tuple[str, str]]) -> Record:
    created = parse_time(row.get("created_at"))
    return ImportedMemory(
        source_id=str(row["id"]),
        kind=text_field(row.get("kind"), "kind"),
        content=text_field(row.get("content"), "content"),
        created_at=created,
        updated_at=parse_time(row.get("updated_at")),
        occurred_at=parse_time(row.get("occurred_at")) or created,
        other_aliases=tuple(aliases),
        namespace=tuple(text_list(row.get("namespace"), "namespace")),
        scope=text_field(row.get("scope"), "scope") or "global",
        butler=text_field(row.get("butler"), "butler"),
        session_id=text_field(row.get("session_id"), "session_id"),
        subject=text_field(row.get("subject"), "subject"),
        predicate=text_field(row.get("predicate"), "predicate"),
        collection=text_field(row.get("collection"), "collection"),
        boundary_class=text_field(row.get("boundary_class"), "boundary_class") or "internal",
        tags=text_list(row.get("tags"), "tags"),
        metadata=mapping(row.get("metadata"), "metadata"),
        source=text_field(row.get("source"), "source"),
        importance=number(row.get("importance"), 5.0),
        confidence=number(row.get("confidence"), 1.0),
        permanence=text_field(row.get("permanence"), "permanence"),
        validity=text_field(row.get("validity"), "validity") or "active",
        superseded_by=text_field(row.get("superseded_by_id"), "superseded_by_id") or None,
        expires_at=parse_time(row.get("expires_at")),
        maturity=text_field(row.get("maturity"), "maturity"),
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
        embedding_model=text_field(row.get("embedding_model"), "embedding_model"),
    )


def open_source(location: str, **_: Any) -> MemprojExport:
    return MemprojExport(Path(location))
