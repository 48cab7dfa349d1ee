"""Input bounds shared by every write and read path (one set of limits for every
dialect): checked before
anything touches storage, so bad input changes nothing."""

from __future__ import annotations

import hashlib
import json
import re
import sys
import unicodedata
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from django.conf import settings

from memory.errors import InvalidArgument
from memory.models import Kind, Validity

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,99}$")
# RFC 3339's date-time (section 5.6; "T" and "Z" may be lower case): ASCII
# digits only, seconds and an offset required.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:[Zz]|[+-](\d{2}):(\d{2}))", re.ASCII
)
_WHITESPACE = re.compile(r"[ \t\f\v]+")
# A namespace is part of the one-active-fact-per-key index: its segments, the
# subject and the predicate together must fit a B-tree index row (2,704 bytes).
MAX_NAMESPACE_SEGMENTS = 10
MAX_NAMESPACE_SEGMENT_CHARS = 200
MAX_NAMESPACE_BYTES = 1024
# Metadata and attribute filters are JSON the database stores or compares as jsonb.
MAX_JSON_DEPTH = 32
# A body that is JSON but deeper than json.loads reads (RecursionError): the
# refusal says so, rather than that the body is no JSON object.
TOO_DEEP_TO_READ = f"the body is nested too deeply to read; JSON here is at most {MAX_JSON_DEPTH} levels deep."
MAX_JSON_BYTES = 64 * 1024
MAX_KEY_CHARS = 200
# Characters that show nothing: controls, format characters (zero-width
# spaces and joiners, direction marks, the byte order mark) and separators.
# str.strip() removes only the separators, so a text of these alone is empty
# to a reader and to both search channels, yet passed as text.
_INVISIBLE = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
# What a name may not hold anywhere (``identifier``): the invisible characters but spaces.
_UNPRINTABLE = _INVISIBLE - {"Zs"}


def limits() -> dict:
    return settings.MEMPROJ


def text(value: object, *, field: str, max_chars: int | None = None) -> str:
    stripped = present(value, field=field)
    max_chars = max_chars or limits()["MAX_CONTENT_CHARS"]
    if len(stripped) > max_chars:
        raise InvalidArgument(f"{field} is {len(stripped)} characters; the limit is {max_chars}. Split it up.")
    return encodable(stripped, field=field)


def present(value: object, *, field: str) -> str:
    """A string with something to read in it, returned stripped: neither empty
    nor of blanks and invisible characters alone (``text`` checks this first;
    a text kept as given, a hooked exchange's answer, checks only this)."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{field} must be a string.")
    stripped = value.strip()
    if not stripped:
        raise InvalidArgument(f"{field} must not be empty.")
    if all(unicodedata.category(char) in _INVISIBLE for char in stripped):
        raise InvalidArgument(f"{field} must not be empty (it holds only invisible characters).")
    return stripped


def encodable(value: str, *, field: str) -> str:
    """Text PostgreSQL can store: no NUL, and valid UTF-8 (a JSON body may
    carry a lone surrogate such as "\\ud800", which no UTF-8 text holds)."""
    if "\x00" in value:
        raise InvalidArgument(f"{field} must not contain NUL characters.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{field} is not valid Unicode text (it contains a lone surrogate).") from None
    return value


def identifier(value: object, *, field: str, max_chars: int = MAX_KEY_CHARS) -> str:
    """A client-chosen name (a conversation id, a key, a namespace segment):
    any printable text of 1-``max_chars`` characters, stored and compared as
    given. Printable as a label is: no control or format character and no line
    or paragraph separator (a name is shown back in logs, the admin and
    answers, where a terminal escape, a direction override or a line break
    would recolour, reorder or forge what follows it). Spaces are kept."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{field} must be a non-empty string.")
    if len(value) > max_chars:
        raise InvalidArgument(f"{field} is {len(value)} characters; the limit is {max_chars}.")
    value = encodable(value, field=field)
    unprintable = next((char for char in value if unicodedata.category(char) in _UNPRINTABLE), None)
    if unprintable is not None:
        raise InvalidArgument(
            f"{field} must not contain control, format or line separator characters "
            f"(it contains U+{ord(unprintable):04X})."
        )
    return value


def namespace(value: object, *, field: str = "namespace") -> list[str]:
    """A namespace path (LangGraph style): at most ``MAX_NAMESPACE_SEGMENTS``
    segments of at most ``MAX_NAMESPACE_SEGMENT_CHARS`` characters,
    ``MAX_NAMESPACE_BYTES`` in all. Empty is the root.

    Segments are kept and compared exactly as given, surrounding spaces
    included: LangGraph's stores compare namespace tuples exactly, so
    ``(" a",)`` and ``("a",)`` are two namespaces there and must be here. A
    blank segment is refused (LangGraph refuses an empty label; a label of
    spaces alone is refused like a blank key)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidArgument(f"{field} must be a list of strings.")
    if len(value) > MAX_NAMESPACE_SEGMENTS:
        raise InvalidArgument(f"{field} has {len(value)} segments; the limit is {MAX_NAMESPACE_SEGMENTS}.")
    parts = [identifier(part, field=f"{field} segment", max_chars=MAX_NAMESPACE_SEGMENT_CHARS) for part in value]
    size = sum(len(part.encode("utf-8")) for part in parts)
    if size > MAX_NAMESPACE_BYTES:
        raise InvalidArgument(f"{field} is {size} bytes of UTF-8; the limit is {MAX_NAMESPACE_BYTES}.")
    return parts


def typed_namespace(text: str) -> list[str]:
    """A namespace typed as a path (a form field, a command option): segments
    separated by '/', the spaces around them layout. The service keeps segments
    exactly as given, so a segment with surrounding spaces (written through the
    API) is not one a typed path can name."""
    return [segment.strip() for segment in text.split("/") if segment.strip()]


def json_document(raw: bytes | str) -> Any:
    """A request body read as JSON, refusing an object that names a key twice,
    at any depth: json.loads keeps the last one, so ``{"content": "a",
    "content": "b"}`` was taken as "b" while another reader of the same bytes (a
    proxy, a log, a policy check) may take "a". Raises ValueError (what
    json.loads raises) for a body that is not JSON; JSON nested deeper than
    json.loads reads, or with an integer longer than Python converts, is
    InvalidArgument saying so (one refusal for every surface, in its words)."""
    try:
        return json.loads(raw, object_pairs_hook=_unique_keys)
    except RecursionError:
        # JSON, but deeper than the reader goes: "not a JSON object" would mislead.
        raise InvalidArgument(TOO_DEEP_TO_READ) from None
    except ValueError as exc:
        if str(exc).startswith("Exceeds the limit"):
            raise InvalidArgument(
                f"the body has a number of more than {sys.get_int_max_str_digits()} digits; send it as a string."
            ) from exc
        raise


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidArgument(f"the body has the key {key[:50]!r} twice in one object; send each key once.")
            seen.add(key)
    return document


def nesting(value: object, *, field: str = "the body", max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON nested deeper than ``max_depth`` before anything walks it
    recursively (iterative, so a hostile depth costs no stack)."""
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, Mapping):
            children: Iterable[object] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= max_depth:
            raise InvalidArgument(f"{field} is nested more than {max_depth} levels deep.")
        pending.extend((child, depth + 1) for child in children)


def json_value(value: object, *, field: str) -> Any:
    """A JSON value the database can hold as jsonb: strings (keys too) without
    NUL or lone surrogates, at most ``MAX_JSON_DEPTH`` levels deep and
    ``MAX_JSON_BYTES`` when serialised. Errors name the key path, never the value."""
    size = _check_json(value, field, 0)
    if size > MAX_JSON_BYTES:
        raise InvalidArgument(f"{field} is about {size} bytes as JSON; the limit is {MAX_JSON_BYTES}.")
    return value


def _check_json(value: object, where: str, depth: int) -> int:
    """The approximate serialised size of ``value``, after checking it."""
    if depth > MAX_JSON_DEPTH:
        raise InvalidArgument(f"{where} is nested more than {MAX_JSON_DEPTH} levels deep.")
    if value is None or isinstance(value, bool):
        return 5
    if isinstance(value, int):
        # jsonb numbers are numeric; a Python int of any size is not JSON.
        if abs(value) >= 10**300:
            raise InvalidArgument(f"{where} is too large a number.")
        return 21
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidArgument(f"{where} must be a finite number.")
        return 24
    if isinstance(value, str):
        return len(encodable(value, field=where).encode("utf-8")) + 2
    if isinstance(value, Mapping):
        size = 2
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgument(f"{where} keys must be strings.")
            if len(key) > MAX_KEY_CHARS:
                raise InvalidArgument(f"{where} has a key over {MAX_KEY_CHARS} characters.")
            encodable(key, field=f"a key of {where}")
            size += len(key.encode("utf-8")) + 4 + _check_json(item, f"{where}.{key}", depth + 1)
            if size > MAX_JSON_BYTES:
                return size
        return size
    if isinstance(value, (list, tuple)):
        size = 2
        for index, item in enumerate(value):
            size += 1 + _check_json(item, f"{where}[{index}]", depth + 1)
            if size > MAX_JSON_BYTES:
                return size
        return size
    raise InvalidArgument(f"{where} must be JSON (an object, list, string, number, true, false or null).")


def metadata(value: object, *, field: str = "metadata") -> dict[str, Any]:
    """Free-form attributes stored with a memory: a JSON object (see ``json_value``)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{field} must be an object.")
    return dict(json_value(value, field=field))


def query(value: object, *, field: str = "query") -> str:
    return text(value, field=field, max_chars=limits()["MAX_QUERY_CHARS"])


def is_label(value: object) -> TypeGuard[str]:
    # fullmatch: a pattern's ``$`` also matches before a final newline, so
    # ``match`` took "global\n" as a label, stored as a scope of its own.
    return isinstance(value, str) and _LABEL.fullmatch(value) is not None


def label(value: object, *, field: str) -> str:
    """Scopes, butlers, session ids: short identifiers."""
    if not is_label(value):
        raise InvalidArgument(f"{field} must be 1-100 characters of letters, digits and _.:@/- (got {value!r}).")
    return value


def number(value: object, *, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{field} must be a number between {low} and {high}.")
    if not (low <= float(value) <= high):
        raise InvalidArgument(f"{field} must be between {low} and {high} (got {value}).")
    # + 0.0 turns -0.0 (within every bound) into 0.0, so it is not stored and answered as "-0.0".
    return float(value) + 0.0


def http_url(value: object, *, field: str) -> str:
    """An absolute http or https URL with a host, returned as written. A URL a
    client stores is shown back in answers and may be rendered as a link:
    ``javascript:`` or ``data:`` would run when followed, and another scheme
    (``file:``, ``vbscript:``) is no source a reader can open. No whitespace or
    control character anywhere: urlsplit strips leading blanks and drops tabs
    and newlines, so it would check another URL than the one stored."""
    refused = InvalidArgument(f"{field} must be an absolute http or https URL.")
    if not isinstance(value, str) or any(unicodedata.category(char) in _INVISIBLE for char in value):
        raise refused
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number in range
    except ValueError:
        raise refused from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise refused
    return value


def last_minute_of_utc_day(hour: int, minute: int, offset: timedelta) -> bool:
    """Whether the time of day hour:minute at UTC ``offset`` is 23:59 UTC, the
    only minute a leap second can end (RFC 3339 section 5.7). From the time of
    day alone: converting the date could leave Python's years 1-9999."""
    return (hour * 3600 + minute * 60 - int(offset.total_seconds())) % 86400 == 86400 - 60


def rfc3339(value: object, *, field: str) -> str:
    """An RFC 3339 date-time (JSON Schema's ``format: date-time``), returned as
    written. datetime.fromisoformat also reads a date alone, a time without an
    offset, ISO 8601's basic and week forms: none of them is one. A leap second
    (``23:59:60`` UTC, RFC 3339 section 5.7: the last minute of a UTC day, in
    any offset) is one; datetime cannot hold it, so it is checked as ``:59``."""
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    try:
        if match is None:
            raise ValueError(value)
        year, month, day, hour, minute, second, offset_hours, offset_minutes = match.groups()
        if offset_hours is not None and (int(offset_hours) > 23 or int(offset_minutes) > 59):
            raise ValueError(value)
        leap = int(second) == 60
        written = datetime(int(year), int(month), int(day), int(hour), int(minute), 59 if leap else int(second))
        if leap:
            offset = timedelta(0)
            if offset_hours is not None:
                sign = -1 if match.string[match.start(7) - 1] == "-" else 1
                offset = sign * timedelta(hours=int(offset_hours), minutes=int(offset_minutes))
            if not last_minute_of_utc_day(int(hour), int(minute), offset):
                raise ValueError(value)
            _ = written - offset  # an instant past year 1 or 9999 (OverflowError) is refused below
    except (ValueError, OverflowError):
        raise InvalidArgument(f"{field} must be an RFC 3339 date-time, e.g. 2025-01-31T12:00:00Z.") from None
    return str(value)


def limit(value: object, *, field: str = "limit", maximum: int | None = None) -> int:
    maximum = maximum or limits()["MAX_LIMIT"]
    if isinstance(value, bool) or not isinstance(value, int) or not (1 <= value <= maximum):
        raise InvalidArgument(f"{field} must be an integer from 1 to {maximum} (got {value!r}).")
    return value


def tags(values: Iterable[object] | None) -> list[str]:
    if values is None:
        return []
    items = list(values)
    if len(items) > limits()["MAX_TAGS"]:
        raise InvalidArgument(f"at most {limits()['MAX_TAGS']} tags are allowed.")
    out: list[str] = []
    for item in items:
        tag = text(item, field="tag", max_chars=limits()["MAX_TAG_CHARS"])
        if tag not in out:
            out.append(tag)
    return out


def kind(value: object, *, allowed: Iterable[str] = Kind.values) -> str:
    allowed = list(allowed)
    if value not in allowed:
        raise InvalidArgument(f"type must be one of {', '.join(allowed)} (got {value!r}).")
    return str(value)


def memory_id(value: object) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(
            f"id must be a UUID such as the ids returned by store and search (got {value!r})."
        ) from exc


def choice(value: object, *, field: str, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    if value not in allowed:
        raise InvalidArgument(f"{field} must be one of {', '.join(allowed)} (got {value!r}).")
    return str(value)


# As in the butlers memory module, `retracted` is canonical; the legacy `forgotten` is accepted as an alias
# wherever a validity comes in (imports, filters) and never stored.
VALIDITY_ALIASES = {"forgotten": "retracted"}


def validity(value: object) -> str:
    canonical = VALIDITY_ALIASES.get(str(value), str(value))
    if canonical not in Validity.values:
        raise InvalidArgument(f"validity must be one of {', '.join(Validity.values)} or 'forgotten' (got {value!r}).")
    return canonical


def normalize_content(value: str) -> str:
    """pce-memory v0.14.0's content normalization: NFC, CRLF -> LF, trimmed, runs of blanks folded."""
    normalized = unicodedata.normalize("NFC", value).replace("\r\n", "\n").replace("\r", "\n")
    return _WHITESPACE.sub(" ", normalized).strip()


def content_hash(value: str) -> str:
    return "sha256:" + hashlib.sha256(normalize_content(value).encode("utf-8")).hexdigest()
