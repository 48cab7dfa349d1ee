"""The neutral records every reader turns an upstream store into, and the small
parsing helpers the readers share. A reader knows one upstream format; the
import service (memory.services.imports) knows memproj: it never sees an
upstream row, only these records."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from policy.document import DEFAULT_BOUNDARY_CLASS


@dataclass
class ImportedMemory:
    """One memory as memproj will hold it, with the upstream id it had."""

    source_id: str
    kind: str  # episode | fact | rule | document
    content: str
    created_at: datetime | None = None
    updated_at: datetime | None = None
    # When it happened, where upstream says so apart from created_at.
    occurred_at: datetime | None = None
    # Further upstream ids of the same memory (a roampal promotion's original id).
    extra_aliases: tuple[str, ...] = ()
    # Ids the memory had in other systems, as (system, id): a memproj export carries
    # the aliases its own imports recorded, so they survive a move between installs.
    other_aliases: tuple[tuple[str, str], ...] = ()
    namespace: tuple[str, ...] = ()
    scope: str = "global"
    butler: str = ""
    session_id: str = ""
    subject: str = ""
    predicate: str = ""
    collection: str = ""
    boundary_class: str = DEFAULT_BOUNDARY_CLASS
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    importance: float = 5.0
    confidence: float = 1.0
    permanence: str = ""
    validity: str = "active"  # active | superseded | retracted
    superseded_by: str | None = None  # the successor's source_id
    expires_at: datetime | None = None
    maturity: str = ""
    success_count: float = 0.0
    harmful_count: int = 0
    applied_count: int = 0
    effectiveness_score: float = 0.0
    outcome_score: float = 0.5
    utility: float = 0.0
    last_applied_at: datetime | None = None
    reference_count: int = 0
    last_referenced_at: datetime | None = None
    accessed_at: datetime | None = None
    last_confirmed_at: datetime | None = None
    # The outcome signals it received, oldest first: (signal, when), e.g. ("worked", t).
    outcomes: list[tuple[str, datetime | None]] = field(default_factory=list)
    # Upstream's vector as it came (kept only when upstream computed it with
    # memproj's own model, and only once the import service checked it).
    embedding: list[Any] | None = None
    embedding_model: str = ""
    # Keep ``source_id`` (or ``own_id`` when given) as the memory's own id when it
    # is a UUID no other memory has.
    keep_id: bool = True
    own_id: str = ""
    # What the reader changed to fit (history cut to its bound), for the report's notes.
    notes: tuple[str, ...] = ()


# The longest upstream id memproj keeps as an alias, and the longest system
# name an alias carries (MemoryAlias.alias and .system): a reader holding ids
# (an export's alias and outcome rows) keeps none longer.
ID_MAX_CHARS = 300
SYSTEM_MAX_CHARS = 32
# The outcome signals an imported memory's history is kept in (as marked_<signal> events).
OUTCOME_SIGNALS = ("worked", "partial", "failed", "unknown", "helpful", "harmful", "outdated", "duplicate")


# The import service holds a store's entities and relations until its memories
# are written (an entity links to its claims, a relation to its ends), all of
# them at once: a reader refuses a store holding more of them than this before
# it yields any record.
GRAPH_RECORDS_MAX = 200_000


@dataclass
class ImportedEntity:
    """A knowledge-graph node (pce-memory entities, the MCP memory server's entities)."""

    source_id: str
    name: str
    type: str = "Concept"
    canonical_key: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
    claims: list[str] = field(default_factory=list)  # source ids of memories that mention it


@dataclass
class ImportedRelation:
    source_id: str
    src: str  # an entity's source_id
    dst: str
    type: str
    props: dict[str, Any] = field(default_factory=dict)
    evidence: str | None = None  # a memory's source_id


@dataclass
class Skipped:
    """An upstream row that will not become a memory, and why."""

    source_id: str
    reason: str


Record = ImportedMemory | ImportedEntity | ImportedRelation | Skipped


class Source(Protocol):
    """An opened upstream store."""

    system: str

    def records(self) -> Iterator[Record]: ...

    def estimate(self) -> int | None:
        """How many records ``records`` will yield, for the progress bar (None: unknown)."""
        ...

    def close(self) -> None: ...


class ImportSourceError(Exception):
    """The location is not a store this reader can read (with what to do instead).

    Its message is shown to whoever gave the store (an admin upload's owner),
    so it is in our words only: the library's exception that caused it (its
    ``__cause__``, with its text, paths and versions) is logged by the import
    service, never put into the message."""


# A database table is read this many rows at a time as the import goes, none
# held after its batch (a reader checks a table's limits before reading it).
BATCH_ROWS = 500


def batched(cursor: Any, reading: Callable[[], AbstractContextManager[object]] = nullcontext) -> Iterator[Any]:
    """The rows of a query run on a DB-API cursor (DuckDB's, SQLite's, a
    psycopg server-side cursor), fetched ``BATCH_ROWS`` at a time; each fetch
    runs within ``reading()`` (pce's time limit), never the caller's work
    between two rows."""
    while True:
        with reading():
            rows = cursor.fetchmany(BATCH_ROWS)
        if not rows:
            return
        yield from rows


@contextmanager
def postgres_rows(location: str, query: Any, name: str) -> Iterator[Iterator[tuple[Any, ...]]]:
    """A query's rows from the PostgreSQL database at ``location`` (a libpq URL),
    ``batched`` through a server-side cursor in a read-only transaction, which
    ends with the ``with`` block (a reader's refusal part-way closes it at
    once). JSON comes as its text, for a reader to decode within a record's
    bounds (memory.importers.bounded_json.line_value). A database error is
    refused as not reading ``name``."""
    import psycopg
    from psycopg.types.string import TextLoader

    try:
        with psycopg.connect(location) as connection:
            connection.read_only = True
            for json_type in ("json", "jsonb"):
                connection.adapters.register_loader(json_type, TextLoader)
            with connection.cursor(name="memproj_import") as cursor:
                cursor.execute(query)
                yield batched(cursor)
    except psycopg.Error as exc:
        raise ImportSourceError(f"cannot read {name} (the server's log has the database's answer).") from exc


def parse_position(exc: BaseException) -> str:
    """Where a file failed to parse, in our words, for an ImportSourceError's
    message ("" when the parser says nothing we can restate)."""
    if isinstance(exc, json.JSONDecodeError):
        return f" (line {exc.lineno}, column {exc.colno})"
    if isinstance(exc, UnicodeDecodeError):
        return " (it is not UTF-8 text)"
    if isinstance(exc, RecursionError):
        return " (it is nested too deeply)"
    return ""


class BadRecord(ValueError):
    """One upstream row has a field no memory can hold (the message says which):
    the reader yields it as ``Skipped`` and goes on with the next row."""


def text_field(value: Any, field: str, default: str = "") -> str:
    """A field upstream writes as text: a string (numbers are read as their
    text); None or absent is ``default``; anything else is a ``BadRecord``."""
    if value is None:
        return default
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise BadRecord(f"{field} must be text (got {type(value).__name__})")


def text_list(value: Any, field: str) -> list[str]:
    """A field upstream writes as a list of strings (None or absent: empty)."""
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise BadRecord(f"{field} must be a list of strings")
    return list(value)


def mapping(value: Any, field: str) -> dict[str, Any]:
    """A field upstream writes as a JSON object (None or absent: empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRecord(f"{field} must be an object (got {type(value).__name__})")
    return dict(value)


def parse_time(value: Any) -> datetime | None:
    """An upstream timestamp: ISO 8601 (naive means UTC, as roampal and mem0
    write local-less times), epoch seconds, or milli/micro/nanoseconds; in
    UTC, or None when it has no UTC time a reader could load back (31
    December 9999 23:00 at -05:00 is year 10000 in UTC: PostgreSQL would store
    it, and every read of the row would then fail)."""
    parsed = _parse_time(value)
    if parsed is None:
        return None
    try:
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        return None


def _parse_time(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
        if not math.isfinite(seconds):
            return None
        # Past 2e10 s (year 2603) a number is read as milli-, micro- or
        # nanoseconds; larger than nanoseconds can be, it is no time at all.
        for _unit in ("ms", "us", "ns"):
            if abs(seconds) <= 2e10:
                break
            seconds /= 1000
        if abs(seconds) > 2e10:
            return None
        try:
            return datetime.fromtimestamp(seconds, tz=UTC)
        except (ValueError, OverflowError, OSError):
            return None
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            try:
                return _parse_time(float(text))
            except ValueError:
                return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def json_value(value: Any, default: Any = None) -> Any:
    """A field that upstream stores as a JSON string (roampal's tags, noun_tags,
    outcome_history; pce's provenance) or already decoded."""
    if value is None or value == "":
        return default
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return default
    return value


def number(value: Any, default: float, *, low: float | None = None, high: float | None = None) -> float:
    try:
        result = float(value)
    except (TypeError, ValueError):
        return default
    if not math.isfinite(result):
        return default
    if low is not None:
        result = max(low, result)
    if high is not None:
        result = min(high, result)
    return result


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def string_list(value: Any) -> list[str]:
    decoded = json_value(value, default=[])
    if isinstance(decoded, str):
        return [decoded]
    if isinstance(decoded, list | tuple):
        return [str(v) for v in decoded if v is not None and str(v).strip()]
    return []
