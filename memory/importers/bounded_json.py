"""JSON read from someone else's file (an admin upload among them) one record
at a time, each bounded before it is decoded.

Decoded JSON takes many times the room of its text (the three characters
``{},`` become a dict and a pointer to it, some twenty times their size), so
a file is never decoded whole: a reader takes one record at a time (a JSON
Lines line, one element of a JSON array), finds where it ends by scanning
its brackets and strings without building anything, and refuses it, saying
where it is, when it is longer than ``RECORD_MAX_CHARS`` or holds more than
``RECORD_MAX_VALUES`` values: far more than any memory an import stores
holds (its text is bounded by MEMPROJ_MAX_CONTENT_CHARS, its metadata by
64 KB, its vector by its dimensions). A file of more than ``RECORDS_MAX``
records is more than an import reads in one go."""

from __future__ import annotations

import codecs
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from memory.importers.base import ImportSourceError, parse_position

RECORD_MAX_CHARS = 8 * 1024 * 1024
RECORD_MAX_VALUES = 100_000
RECORDS_MAX = 1_000_000
CHUNK_CHARS = 1024 * 1024
# UTF-8, with the byte order mark some editors put in front (Notepad,
# PowerShell's Out-File) read past: RFC 8259 lets a reader ignore it.
ENCODING = "utf-8-sig"

_WHITESPACE = re.compile(r"[ \t\r\n]*")
_STRUCTURE = re.compile(r'["\[\]{},]')
_STRING_END = re.compile(r'["\\]')
_SCALAR_END = re.compile(r"[ \t\r\n,\]}]")
_EXPECTED = {
    "[": "Expecting value",
    "{": "Expecting value",
    ":": "Expecting ':' delimiter",
    ",]": "Expecting ',' delimiter",
    ",}": "Expecting ',' delimiter",
}


class RecordTooLarge(ImportSourceError):
    """One record is past the bounds (a reader may read the file another way)."""


class NotUtf8Line(ImportSourceError):
    """A JSON Lines file holds bytes that are not UTF-8 on ``line``."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


def scan_lines(path: Path) -> tuple[int, int | None]:
    """How many lines of ``path`` are not blank, and the number of the first
    line that is not UTF-8 (None when every line is), read in one pass
    without holding more than a chunk. A text file is decoded ahead of the
    line being read, so the decoder's error does not say which line it met;
    a newline byte is never part of a multibyte character, so each line is
    decoded on its own."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    number, filled, blank = 1, 0, True
    with path.open("rb") as handle:
        while raw := handle.readline(CHUNK_CHARS):
            ends = raw.endswith(b"\n")
            blank = blank and not raw.strip()
            try:
                decoder.decode(raw, final=ends)
            except UnicodeDecodeError:
                return filled, number
            if ends:
                filled += 0 if blank else 1
                number, blank = number + 1, True
                decoder.reset()
    filled += 0 if blank else 1
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return filled, number
    return filled, None


def undecodable_line(path: Path) -> int | None:
    """The number of the first line of ``path`` that is not UTF-8 (None when every line is)."""
    return scan_lines(path)[1]


class JsonReader:
    """JSON values read from a text stream one at a time: an array's
    elements, an object's members, or values one after another (JSON Lines).
    What has been read is let go: at most one record's text is held."""

    def __init__(self, handle: TextIO, name: str) -> None:
        self.handle = handle
        self.name = name
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.line = 1  # the line buf[0] is on
        self.column = 1  # and its column
        self.records = 0

    # --- the buffer --------------------------------------------------------------------------

    def _more(self) -> int:
        """Read more of the file, letting go of what was read before ``pos``:
        how far the buffer moved, or -1 at the end of the file."""
        if self.eof:
            return -1
        try:
            chunk = self.handle.read(CHUNK_CHARS)
        except UnicodeDecodeError as exc:
            raise ImportSourceError(f"{self.name} is not JSON{parse_position(exc)}.") from exc
        if not chunk:
            self.eof = True
            return -1
        moved = self.pos
        if moved:
            gone = self.buf[:moved]
            newlines = gone.count("\n")
            if newlines:
                self.line += newlines
                self.column = len(gone) - gone.rfind("\n")
            else:
                self.column += len(gone)
            self.pos = 0
        self.buf = self.buf[moved:] + chunk
        return moved

    def _position(self, index: int) -> tuple[int, int]:
        line = self.line + self.buf.count("\n", 0, index)
        start = self.buf.rfind("\n", 0, index)
        return line, index - start if start >= 0 else self.column + index

    def _not_json(self, index: int, cause: BaseException | None = None, expected: str = "") -> ImportSourceError:
        """The file's fault at ``index``, in our words; the parser's (or what
        was expected there, in its words) is the cause the import service logs."""
        line, column = self._position(min(index, len(self.buf)))
        error = ImportSourceError(f"{self.name} is not JSON (line {line}, column {column}).")
        error.__cause__ = cause or json.JSONDecodeError(_EXPECTED.get(expected, "Expecting value"), self.buf, index)
        return error

    def _too_large(self, start: int, what: str) -> RecordTooLarge:
        line, column = self._position(start)
        return RecordTooLarge(
            f"{self.name}: the record at line {line}, column {column} {what}, "
            "more than any memory an import stores holds."
        )

    def peek(self) -> str:
        """The next character that is not whitespace ("" at the end of the file)."""
        while True:
            match = _WHITESPACE.match(self.buf, self.pos)
            assert match is not None
            self.pos = match.end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if self._more() < 0:
                return ""

    def expect(self, allowed: str) -> str:
        found = self.peek()
        if not found or found not in allowed:
            raise self._not_json(self.pos, expected=allowed)
        self.pos += 1
        return found

    # --- values ------------------------------------------------------------------------------

    def value(self) -> Any:
        """The next value, decoded once it is known to be within the bounds."""
        if not self.peek():
            raise self._not_json(self.pos)
        start, end = self._extent()
        try:
            decoded = json.loads(self.buf[start:end])
        except RecursionError as exc:
            line, column = self._position(start)
            error = ImportSourceError(
                f"{self.name}: the record at line {line}, column {column} is nested too deeply "
                "for a memory an import stores."
            )
            raise error from exc
        except ValueError as exc:
            offset = exc.pos if isinstance(exc, json.JSONDecodeError) else 0
            raise self._not_json(start + offset, exc) from exc
        self.pos = end
        return decoded

    def _extent(self) -> tuple[int, int]:
        """Where the value starting at ``pos`` starts and ends, found without
        decoding it; refused as soon as it is past the bounds."""
        start = self.pos
        first = self.buf[start]
        if first not in '[{"':
            while True:
                match = _SCALAR_END.search(self.buf, start)
                if match is not None:
                    return start, match.start()
                if len(self.buf) - start > RECORD_MAX_CHARS:
                    raise self._too_large(start, f"is longer than {RECORD_MAX_CHARS} characters")
                moved = self._more()
                if moved < 0:
                    return start, len(self.buf)
                start -= moved
        in_string = first == '"'
        depth = 0 if in_string else 1
        values = 1
        index = start + 1
        while True:
            if index - start > RECORD_MAX_CHARS:
                raise self._too_large(start, f"is longer than {RECORD_MAX_CHARS} characters")
            if in_string:
                match = _STRING_END.search(self.buf, index)
                if match is None or (match.group() == "\\" and match.end() >= len(self.buf)):
                    index = len(self.buf) if match is None else match.start()
                    moved = self._more()
                    if moved < 0:
                        return start, len(self.buf)
                    start, index = start - moved, index - moved
                    continue
                if match.group() == "\\":
                    index = match.end() + 1
                    continue
                index = match.end()
                in_string = False
                if depth == 0:
                    return start, index
                continue
            match = _STRUCTURE.search(self.buf, index)
            if match is None:
                index = len(self.buf)
                moved = self._more()
                if moved < 0:
                    return start, len(self.buf)
                start, index = start - moved, index - moved
                continue
            char = match.group()
            index = match.end()
            if char == '"':
                in_string = True
            elif char in "[{":
                depth += 1
                values += 1
            elif char in "]}":
                depth -= 1
                if depth <= 0:
                    return start, index
            else:
                values += 1
            if values > RECORD_MAX_VALUES:
                raise self._too_large(start, f"holds more than {RECORD_MAX_VALUES} values")

    def finish(self) -> None:
        """Refuse anything after the value read last (as a JSON document may hold one value only)."""
        if self.peek():
            raise self._not_json(self.pos, json.JSONDecodeError("Extra data", self.buf, self.pos))

    def check(self) -> None:
        """Refuse the next value if it is past the bounds, without decoding it."""
        if self.peek():
            self._extent()

    def _count(self) -> None:
        self.records += 1
        if self.records > RECORDS_MAX:
            raise ImportSourceError(f"{self.name} holds more than {RECORDS_MAX} records, more than an import reads.")

    def elements(self) -> Iterator[Any]:
        """The elements of the array that starts here, one at a time."""
        self.expect("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            self._count()
            yield self.value()
            if self.expect(",]") == "]":
                return

    def members(self) -> Iterator[tuple[str, Any]]:
        """The members of the object that starts here, as (key, value). An
        array comes as an iterator of its elements, read one at a time (what
        of it is not read is read past before the next member is)."""
        self.expect("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            if self.peek() != '"':
                expected = "Expecting property name enclosed in double quotes"
                raise self._not_json(self.pos, json.JSONDecodeError(expected, self.buf, self.pos))
            key = self.value()
            self.expect(":")
            if self.peek() == "[":
                elements = self.elements()
                yield key, elements
                for _ in elements:
                    pass
            else:
                self._count()
                yield key, self.value()
            if self.expect(",}") == "}":
                return

    def values(self) -> Iterator[Any]:
        """The values that follow, one after another (JSON Lines, concatenated JSON)."""
        while self.peek():
            self._count()
            yield self.value()


def open_json(path: Path, name: str | None = None) -> tuple[TextIO, JsonReader]:
    """The file opened for a ``JsonReader`` (to be closed by the caller)."""
    handle = path.open(encoding=ENCODING)
    return handle, JsonReader(handle, name or path.name)


def json_lines(
    path: Path, name: str | None = None, *, max_chars: int | None = None, max_lines: int | None = RECORDS_MAX
) -> Iterator[tuple[int, Any]]:
    """(line number, the line's JSON value) for every line that is not blank,
    each read no further than ``max_chars`` (``RECORD_MAX_CHARS``) and refused
    past the bounds; a file of more than ``max_lines`` lines is refused (None:
    memproj's and COGX's own exports, whose lines are a large tenant's every row)."""
    name = name or path.name
    max_chars = max_chars or RECORD_MAX_CHARS
    with path.open(encoding=ENCODING) as handle:
        number = 0
        while True:
            try:
                line = handle.readline(max_chars + 1)
            except UnicodeDecodeError as exc:
                where = undecodable_line(path) or number + 1
                raise NotUtf8Line(f"{name}:{where}: not JSON{parse_position(exc)}.", where) from exc
            if not line:
                return
            number += 1
            if len(line) > max_chars and not line.endswith("\n"):
                raise ImportSourceError(
                    f"{name}:{number}: a line longer than {max_chars} characters, "
                    "more than any memory an import stores holds."
                )
            if not line.strip():
                continue
            if max_lines is not None and number > max_lines:
                raise ImportSourceError(f"{name} holds more than {max_lines} lines, more than an import reads.")
            yield number, line_value(line, f"{name}:{number}")


def line_value(line: str, name: str) -> Any:
    """One line's JSON value, refused past the bounds before it is decoded."""
    if len(line) > RECORD_MAX_VALUES:
        # Long enough to hold more values than the bound: counted first.
        JsonReader(io.StringIO(line), name).check()
    try:
        return json.loads(line)
    except RecursionError as exc:
        raise ImportSourceError(f"{name}: nested too deeply for a memory an import stores.") from exc
    except ValueError as exc:
        raise ImportSourceError(f"{name}: not JSON{parse_position(exc)}.") from exc
