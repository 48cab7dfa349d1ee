"""Input bounds shared by every write and read path (DESIGN §9): checked before
anything touches storage, so bad input changes nothing."""

from __future__ import annotations

import hashlib
import re
import unicodedata
import uuid
from collections.abc import Iterable

from django.conf import settings

from memory.errors import InvalidArgument
from memory.models import Kind

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,99}$")
_WHITESPACE = re.compile(r"[ \t\f\v]+")


def limits() -> dict:
    return settings.MEMPROJ


def text(value: object, *, field: str, max_chars: int | None = None) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{field} must be a string.")
    stripped = value.strip()
    if not stripped:
        raise InvalidArgument(f"{field} must not be empty.")
    max_chars = max_chars or limits()["MAX_CONTENT_CHARS"]
    if len(stripped) > max_chars:
        raise InvalidArgument(f"{field} is {len(stripped)} characters; the limit is {max_chars}. Split it up.")
    if "\x00" in stripped:
        raise InvalidArgument(f"{field} must not contain NUL characters.")
    return stripped


def query(value: object, *, field: str = "query") -> str:
    return text(value, field=field, max_chars=limits()["MAX_QUERY_CHARS"])


def label(value: object, *, field: str) -> str:
    """Scopes, butlers, session ids: short identifiers."""
    if not isinstance(value, str) or not _LABEL.match(value):
        raise InvalidArgument(f"{field} must be 1-100 characters of letters, digits and _.:@/- (got {value!r}).")
    return value


def number(value: object, *, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{field} must be a number between {low} and {high}.")
    if not (low <= float(value) <= high):
        raise InvalidArgument(f"{field} must be between {low} and {high} (got {value}).")
    return float(value)


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


# Seed 000: `retracted` is canonical; the legacy `forgotten` is accepted as an alias
# wherever a validity comes in (imports, filters) and never stored.
VALIDITY_ALIASES = {"forgotten": "retracted"}


def validity(value: object) -> str:
    from memory.models import Validity

    canonical = VALIDITY_ALIASES.get(str(value), str(value))
    if canonical not in Validity.values:
        raise InvalidArgument(f"validity must be one of {', '.join(Validity.values)} or 'forgotten' (got {value!r}).")
    return canonical


def normalize_content(value: str) -> str:
    """Seed 004 §1.z: NFC, CRLF -> LF, trimmed, runs of blanks folded."""
    normalized = unicodedata.normalize("NFC", value).replace("\r\n", "\n").replace("\r", "\n")
    return _WHITESPACE.sub(" ", normalized).strip()


def content_hash(value: str) -> str:
    return "sha256:" + hashlib.sha256(normalize_content(value).encode("utf-8")).hexdigest()
