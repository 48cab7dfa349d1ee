"""Time-aware ranking (issue 14): a query's time expression becomes a bounded
preference for memories of that period, applied after fusion, never a filter.

``parse(query, now)`` reads the expressions a question about the past uses,
relative to ``now`` (the request time; the question date in the benchmark):

- a period: "yesterday", "two weeks ago", "last Friday", "last weekend",
  "last month", "last summer", "in the past few months", "this year",
  "in March", "in May 2023", "in 2022";
- a day named by its date: "On April 27th", "on May 2nd", "the 3rd of May",
  "May 2, 2023" (the latest such day up to ``now`` unless a year is given);
- an order: "most recently", "currently", "the latest" prefer newer memories,
  "the first time", "originally", "when I just started" older ones (parsed,
  but only the orders in ``PREFER_ORDERS`` count: none by default, see there).

A memory's fit is 1 inside the period and halves every ``tail`` outside it (a
quarter of the period, at least a day: "two weeks ago" is said loosely); for an
order, its place between the candidates' oldest and newest time. The fused
relevance becomes ``(1 - boost) * relevance + boost * fit`` (memory.scoring
``time_boosted``), so a memory of the right period rises among comparable
matches but an unrelated one is not pulled up.

Only what the query asks about counts: with a question mark, only the question
sentences are read ("I painted a picture yesterday. Which colour looks best?"
asks about no period). A day named by its date is the exception: it is read in
the whole query, since a question names it as often in the sentence before
("On May 4th, I told you about a problem. What was it?"), and a date is seldom
said in passing. A text longer than ``MAX_QUERY_CHARS`` is a context
(a dialogue, a prompt) rather than a question and is not read at all. A query
without a time expression costs one regular-expression scan of at most
``MAX_QUERY_CHARS`` characters.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from memory.scoring import ChannelHit

MAX_QUERY_CHARS = 400
DAY = timedelta(days=1)
UNIT_DAYS = {"day": 1.0, "week": 7.0, "month": 30.44, "year": 365.25}
NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "couple of": 2,
    "a few": 3,
    "few": 3,
    "several": 3,
}
MONTHS = {
    name: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for name in names
}
WEEKDAYS = {d: i for i, d in enumerate(("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))}
SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}  # first month (northern hemisphere)

_NUM = r"(\d{1,3}|" + "|".join(sorted(NUMBERS, key=len, reverse=True)) + ")"
_UNIT = r"(day|week|month|year)s?"
_MONTH = r"(" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
# A day by its date: "april 27th", "on may 2", "3rd of may", "may 2, 2023".
_NAMED_DAY = re.compile(
    rf"(\bon\s+)?\b(?:{_MONTH}\s+(\d{{1,2}})(st|nd|rd|th)?|(\d{{1,2}})(?:st|nd|rd|th)?\s+of\s+{_MONTH})\b"
    r"(?:,?\s+(\d{4}))?"
)
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("ago", re.compile(rf"\b{_NUM}\s+{_UNIT}\s+ago\b")),
    ("past_n", re.compile(rf"\b(?:last|past)\s+{_NUM}\s+{_UNIT}\b")),
    ("yesterday", re.compile(r"\byesterday\b")),
    ("past_unit", re.compile(r"\bpast\s+(day|week|month|year)\b")),
    ("last_unit", re.compile(r"\blast\s+(week|weekend|month|year)\b")),
    ("this_unit", re.compile(r"\bthis\s+(week|month|year)\b")),
    ("last_weekday", re.compile(r"\blast\s+(" + "|".join(WEEKDAYS) + r")\b")),
    ("last_season", re.compile(r"\blast\s+(" + "|".join(SEASONS) + r")\b")),
    ("month", re.compile(rf"\b(?:in|during|since|last|early|late|mid)\s+{_MONTH}(?:\s+(\d{{4}}))?\b")),
    ("month_year", re.compile(rf"\b{_MONTH}\s+(\d{{4}})\b")),
    ("year", re.compile(r"\b(?:in|during|back in)\s+((?:19|20)\d\d)\b")),
    (
        "recent",
        re.compile(
            r"\b(most recent(?:ly)?|latest|currently|current|right now|these days|nowadays|the last time|"
            r"do i \w+ now)\b"
        ),
    ),
    (
        "early",
        re.compile(
            r"\b(the first time|first started|just started|at first|initially|originally|earliest|used to|"
            r"when i (?:first |just )?started)\b"
        ),
    ),
]
# One scan decides whether any pattern can match (the common case: none).
_ANY = re.compile(
    r"\b(?:ago|last|past|yesterday|this (?:week|month|year)|(?:19|20)\d\d|most recent|latest|current|currently|"
    r"right now|these days|nowadays|now|first|started|initially|originally|earliest|used to|"
    + "|".join(sorted(MONTHS, key=len, reverse=True))
    + r")\b"
)
_ANY_MONTH = re.compile(r"\b(?:" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\b")
ORDERS = {"recent", "early"}
# The orders that count (a period always does). None by default: on LongMemEval,
# "currently" / "the latest" preferring newer memories ranked knowledge-update
# questions worse (their evidence is the old value and the new one), and
# "initially" preferring older ones changed nothing (bench/quality.py measures it).
PREFER_ORDERS: frozenset[str] = frozenset()
_SENTENCE = re.compile(r"[^.!?\n]*\?")


@dataclass(frozen=True)
class TimeIntent:
    """A period [start, end) the query asks about, or an order ("recent" / "early")."""

    start: datetime | None = None
    end: datetime | None = None
    prefer: str | None = None
    phrase: str = ""

    def fit(self, at: datetime, oldest: datetime, newest: datetime) -> float:
        """How well a memory of time ``at`` fits, in [0, 1]."""
        if self.start is not None and self.end is not None:
            if self.start <= at < self.end:
                return 1.0
            width = self.end - self.start
            if at < self.start:
                return float(0.5 ** ((self.start - at) / max(DAY, width / 4)))
            # Later memories may tell of the period ("I finished it last month"): a longer tail.
            return float(0.5 ** ((at - self.end) / max(2 * DAY, width / 2)))
        span = (newest - oldest).total_seconds()
        if span <= 0:
            return 0.0
        place = (at - oldest).total_seconds() / span
        return place if self.prefer == "recent" else 1.0 - place


def question_text(query: str) -> str:
    """What a time expression is read in: the question sentences of a query
    that has any, else the whole query; nothing for a long context."""
    if len(query) > MAX_QUERY_CHARS:
        return ""
    text = query.lower().replace("\u2019", "'")
    if "?" in text:
        return " ".join(_SENTENCE.findall(text))
    return text


def _day(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_start(year: int, month: int, like: datetime) -> datetime:
    while month < 1:
        month, year = month + 12, year - 1
    while month > 12:
        month, year = month - 12, year + 1
    return like.replace(year=year, month=month, day=1, hour=0, minute=0, second=0, microsecond=0)


def _count(word: str) -> float:
    return float(word) if word.isdigit() else float(NUMBERS.get(word, 1))


def _period(kind: str, m: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:
    today = _day(now)
    if kind == "ago":
        n, unit = _count(m.group(1)), UNIT_DAYS[m.group(2)]
        centre = now - timedelta(days=n * unit)
        half = timedelta(days=max(unit / 2, n * unit / 4))
        return centre - half, centre + half
    if kind == "past_n":
        return now - timedelta(days=_count(m.group(1)) * UNIT_DAYS[m.group(2)]), now
    if kind == "yesterday":
        return today - DAY, today
    if kind == "past_unit":
        return now - timedelta(days=UNIT_DAYS[m.group(1)]), now
    if kind in ("last_unit", "this_unit"):
        period = m.group(1)
        if period in ("week", "weekend"):
            monday = today - timedelta(days=today.weekday())
            if kind == "this_unit":
                return monday, now
            if period == "week":
                return monday - 7 * DAY, monday
            saturday = monday - 2 * DAY if today.weekday() < 5 else monday - 2 * DAY - 7 * DAY
            return saturday, saturday + 2 * DAY
        if period == "month":
            start = _month_start(now.year, now.month, now)
            return (start, now) if kind == "this_unit" else (_month_start(now.year, now.month - 1, now), start)
        start = _month_start(now.year, 1, now)
        return (start, now) if kind == "this_unit" else (_month_start(now.year - 1, 1, now), start)
    if kind == "last_weekday":
        back = (today.weekday() - WEEKDAYS[m.group(1)]) % 7 or 7
        return today - back * DAY, today - (back - 1) * DAY
    if kind == "last_season":
        first = SEASONS[m.group(1)]
        year = now.year
        while True:  # the most recent season of that name that has ended
            start = _month_start(year, first, now)
            end = _month_start(year, first + 3, now)
            if end <= now:
                return start, end
            year -= 1
    if kind in ("month", "month_year"):
        month = MONTHS[m.group(1)]
        year = int(m.group(2)) if m.group(2) else (now.year if month <= now.month else now.year - 1)
        start = _month_start(year, month, now)
        return start, (now if m.group(0).startswith("since") else _month_start(year, month + 1, now))
    if kind == "year":
        year = int(m.group(1))
        return _month_start(year, 1, now), _month_start(year + 1, 1, now)
    return None


def named_day(query: str, now: datetime) -> TimeIntent | None:
    """The day the query names by its date, anywhere in a query of at most
    ``MAX_QUERY_CHARS``: [its midnight, the next midnight) in ``now``'s time
    zone, of the given year or else the latest such day not after ``now``."""
    if len(query) > MAX_QUERY_CHARS:
        return None
    m = _NAMED_DAY.search(query.lower().replace("\u2019", "'"))
    if m is None:
        return None
    on, month_first, day_first, ordinal, day_after, month_after, year = m.groups()
    if month_first == "may" and not (on or ordinal or year):
        return None  # "I may 2 ..." is the verb; "on May 2", "May 2nd", "May 2, 2023" are days
    month, day = MONTHS[month_first or month_after], int(day_first or day_after)
    try:
        start = _day(now).replace(year=int(year) if year else now.year, month=month, day=day)
        if not year and start > now:
            start = start.replace(year=start.year - 1)
        end = start + DAY
    except (ValueError, OverflowError):  # "April 31st", February 29th of a common year, year 0, 31 December 9999
        return None
    return TimeIntent(start=start, end=end, phrase=m.group(0))


def parse(query: str, now: datetime) -> TimeIntent | None:
    """The day the query names by its date, else the first time expression of
    the query's question (a period before an order), or None."""
    day = named_day(query, now) if _ANY_MONTH.search(query.lower()) else None
    if day is not None:
        return day
    text = question_text(query)
    if not text or not _ANY.search(text):
        return None
    orders: dict[str, str] = {}
    for kind, pattern in _PATTERNS:
        m = pattern.search(text)
        if m is None:
            continue
        if kind in ORDERS:
            orders[kind] = m.group(0)
            continue
        try:
            period = _period(kind, m, now)
        except (ValueError, OverflowError):
            # A period the calendar cannot hold ("in may 0000", "december 9999"
            # ends in year 10000, "999 years ago" before year 1): no preference.
            continue
        if period is not None and period[0] < period[1]:
            return TimeIntent(start=period[0], end=period[1], phrase=m.group(0))
    if len(orders) == 1:  # "from earliest to latest" asks for an order, not a side of it
        ((kind, phrase),) = orders.items()
        if kind in PREFER_ORDERS:
            return TimeIntent(prefer=kind, phrase=phrase)
    return None


def annotate(hits: dict[uuid.UUID, ChannelHit], query_text: str | None, now: datetime) -> dict[uuid.UUID, ChannelHit]:
    """The hits with ``time_fit`` set when the query has a time expression
    (one extra read of the candidates' times); unchanged otherwise."""
    intent = parse(query_text, now) if query_text and hits else None
    if intent is None:
        return hits
    from django.db import connection

    # The candidates came from the tenant-filtered channel statement. One text
    # array parameter costs the client less than the ORM's one parameter per id.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, occurred_at FROM memory_memory WHERE id = ANY(%s::uuid[])",
            ["{" + ",".join(str(pk) for pk in hits) + "}"],
        )
        times = dict(cursor.fetchall())
    if not times:
        return hits
    oldest, newest = min(times.values()), max(times.values())
    return {
        pk: replace(hit, time_fit=intent.fit(times[pk], oldest, newest)) if pk in times else hit
        for pk, hit in hits.items()
    }
