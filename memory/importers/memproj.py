"""memproj's own export (``manage.py export``, format ``memproj-export/1``): a JSON
Lines file whose memory rows carry every column. Imported into another tenant
or installation, each memory keeps its id (when free), timestamps, counters,
validity and supersession; its outcome history comes from the export's
``marked_<signal>`` audit events, and the aliases it had from earlier imports
come along as aliases again. Principals, links, conflicts and the rest of the
audit log are not memories: ``manage.py import`` restores a whole tenant."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeGuard

from memory.importers.base import (
    ID_MAX_CHARS,
    OUTCOME_SIGNALS,
    SYSTEM_MAX_CHARS,
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
        history = _History()
        try:
            # The outcome and alias rows come after the memory rows (in the
            # export's order): a first pass keeps them, bounded, on disk.
            yield from history.fill(self._rows())
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
                    if not _storable(memory_id, ID_MAX_CHARS):
                        yield Skipped(f"line {line}", _LONG_ID)
                        continue
                    outcomes, aliases, notes = history.of(memory_id)
                    try:
                        yield _memory(row, outcomes, aliases, notes)
                    except BadRecord as exc:
                        yield Skipped(memory_id, f"not storable: {exc}")
                elif kind in _NOT_MEMORIES:
                    shown = row.get("id")
                    where = shown if _storable(shown, ID_MAX_CHARS) else f"line {line}"
                    yield Skipped(where, _NOT_MEMORIES[kind])
        finally:
            history.close()


_LONG_ID = f"a memory row whose id is not an id memproj keeps (text of at most {ID_MAX_CHARS} characters)"
_BAD_OUTCOME = (
    f"an outcome event whose memory_id is not an id memproj keeps (text of at most {ID_MAX_CHARS} characters) "
    f"or whose signal is none of {', '.join(OUTCOME_SIGNALS)}"
)
_BAD_ALIAS = (
    f"an alias row whose memory_id or alias is not an id memproj keeps (text of at most {ID_MAX_CHARS} "
    f"characters) or whose system is not a name of at most {SYSTEM_MAX_CHARS}"
)
# What one memory brings of its history: its latest outcome events (the
# counters and scores are columns of the memory row, whole) and its first aliases.
OUTCOMES_PER_MEMORY = 1000
ALIASES_PER_MEMORY = 100
_FILL_CHUNK = 10_000


def _storable(value: Any, most: int) -> TypeGuard[str]:
    """Text of 1 to ``most`` characters PostgreSQL can hold (no NUL, no lone surrogate)."""
    if not isinstance(value, str) or not 0 < len(value) <= most or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _History:
    """The outcome and alias rows of an export, kept in a scratch SQLite file
    until their memories are read: a file of millions of them (an export is
    not bounded in lines) holds none of them in memory. Only what an import
    can store is kept (ids of an alias's length, known signals), each row
    bounded; the rest is skipped with its reason as the file is read."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="memproj-import-")
        self.db = sqlite3.connect(os.path.join(self.directory, "history.sqlite3"))
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("CREATE TABLE outcome (line INTEGER, memory_id TEXT, signal TEXT, at TEXT)")
        self.db.execute("CREATE TABLE alias (line INTEGER, memory_id TEXT, system TEXT, alias TEXT)")

    def fill(self, rows: Iterator[tuple[int, Any]]) -> Iterator[Skipped]:
        outcomes: list[tuple[int, str, str, str | None]] = []
        aliases: list[tuple[int, str, str, str]] = []
        for line, row in rows:
            if not isinstance(row, dict):
                continue
            kind, memory_id = row.get("type"), row.get("memory_id")
            event_type = row.get("event_type")
            if kind == "event" and isinstance(event_type, str) and event_type.startswith("marked_"):
                signal = event_type[len("marked_") :]
                if signal in OUTCOME_SIGNALS and _storable(memory_id, ID_MAX_CHARS):
                    at = parse_time(row.get("created_at"))
                    outcomes.append((line, memory_id, signal, at.isoformat() if at else None))
                else:
                    yield Skipped(f"line {line}", _BAD_OUTCOME)
            elif kind == "alias" and memory_id is not None:
                system, alias = row.get("system"), row.get("alias")
                storable = _storable(system, SYSTEM_MAX_CHARS) and _storable(alias, ID_MAX_CHARS)
                if not (storable and _storable(memory_id, ID_MAX_CHARS)):
                    yield Skipped(f"line {line}", _BAD_ALIAS)
                elif system != SYSTEM and isinstance(system, str) and isinstance(alias, str):
                    # (An id it had in an earlier memproj is not kept: the import keeps its id now.)
                    aliases.append((line, memory_id, system, alias))
            if len(outcomes) >= _FILL_CHUNK:
                self.db.executemany("INSERT INTO outcome VALUES (?, ?, ?, ?)", outcomes)
                outcomes = []
            if len(aliases) >= _FILL_CHUNK:
                self.db.executemany("INSERT INTO alias VALUES (?, ?, ?, ?)", aliases)
                aliases = []
        self.db.executemany("INSERT INTO outcome VALUES (?, ?, ?, ?)", outcomes)
        self.db.executemany("INSERT INTO alias VALUES (?, ?, ?, ?)", aliases)
        self.db.execute("CREATE INDEX outcome_memory ON outcome (memory_id, line)")
        self.db.execute("CREATE INDEX alias_memory ON alias (memory_id, line)")

    def of(self, memory_id: str) -> tuple[list[tuple[str, datetime | None]], list[tuple[str, str]], tuple[str, ...]]:
        """A memory's outcome history (oldest first, its latest
        ``OUTCOMES_PER_MEMORY``), its aliases (the first ``ALIASES_PER_MEMORY``)
        and notes saying what was left out."""
        latest = self.db.execute(
            "SELECT signal, at FROM outcome WHERE memory_id = ? ORDER BY line DESC LIMIT ?",
            (memory_id, OUTCOMES_PER_MEMORY + 1),
        ).fetchall()
        first = self.db.execute(
            "SELECT system, alias FROM alias WHERE memory_id = ? ORDER BY line LIMIT ?",
            (memory_id, ALIASES_PER_MEMORY + 1),
        ).fetchall()
        notes = []
        if len(latest) > OUTCOMES_PER_MEMORY:
            notes.append(
                f"an outcome history of more than {OUTCOMES_PER_MEMORY} events: its latest "
                f"{OUTCOMES_PER_MEMORY} were kept (the counters and scores are whole)"
            )
        if len(first) > ALIASES_PER_MEMORY:
            notes.append(f"more than {ALIASES_PER_MEMORY} aliases: the first {ALIASES_PER_MEMORY} were kept")
        outcomes = [
            (signal, datetime.fromisoformat(at) if at else None)
            for signal, at in reversed(latest[:OUTCOMES_PER_MEMORY])
        ]
        return outcomes, [(system, alias) for system, alias in first[:ALIASES_PER_MEMORY]], tuple(notes)

    def close(self) -> None:
        self.db.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def _memory(
    row: dict[str, Any],
    outcomes: list[tuple[str, datetime | None]],
    aliases: list[tuple[str, str]],
    notes: tuple[str, ...] = (),
) -> Record:
    created = parse_time(row.get("created_at"))
    return ImportedMemory(
        notes=notes,
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
