"""When two memories say the same thing: the one rule automatic merges follow
(the conflict check's duplicates, consolidation's duplicate episodes).

Embedding similarity cannot tell "same" from "differs in one number, date,
name or identifier" ("rotated on 2026-11-02" and "... on 2026-11-09" are
nearly one vector), and no normalisation of words is safe either: case is a
password's ("Xk9pQzT" is not "xk9pqzt"), compatibility forms are numbers
("10³" is not "103"), a separator is a decimal point ("1,500" is not
"1.500"), a letter may be a grade ("an A in chemistry"), and "Deploy X
finished?" asks what "Deploy X finished" states. So a merge asks for the same
text, setting aside only what cannot change a meaning: the Unicode encoding of
the same characters (canonical equivalence, NFC), the width of spacing, and a
final full stop. Nor may a merge hide the text: the copies must be found by
the same reads (``same_reach``), and none may outlive the one kept
(``outlives``). Anything less is left for review."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

_SPACING = re.compile(r"\s+")
# For a reviewer's summary of what differs: words, and every other sign on its own.
_WORD = re.compile(r"\w+|[^\w\s]")


def statement_text(text: str) -> str:
    """The text two memories must share to be the same statement."""
    canonical = _SPACING.sub(" ", unicodedata.normalize("NFC", text)).strip()
    return canonical[:-1].rstrip() if canonical.endswith(".") and not canonical.endswith("..") else canonical


def same_statement(a: str, b: str) -> bool:
    return statement_text(a) == statement_text(b)


def same_reach(a: Any, b: Any) -> bool:
    """Whether every read that finds one memory finds the other: merged into
    a copy of another boundary class, collection, butler, source, tags or
    metadata, the text would be hidden from a reader, a filter or a
    collection that found it before. A rule's maturity too: a context shows
    an anti-pattern as "AVOID (proven harmful)", so a restated anti-pattern
    merged into its fresh candidate copy would turn the warning into advice
    (and a proven rule would lose its record)."""
    return (
        a.boundary_class == b.boundary_class
        and (a.maturity or "") == (b.maturity or "")
        and a.collection == b.collection
        and a.butler == b.butler
        and a.source == b.source
        and sorted(a.tags) == sorted(b.tags)
        and a.metadata == b.metadata
    )


def outlives(memory: Any, keeper: Any) -> bool:
    """Whether ``memory`` would be found after ``keeper`` expires: merged
    into it, a copy kept for ever would vanish with a newer one's TTL."""
    return keeper.expires_at is not None and (memory.expires_at is None or memory.expires_at > keeper.expires_at)


def mergeable_into(memory: Any, keeper: Any) -> bool:
    """The one test of an automatic merge of ``memory`` into ``keeper``."""
    return (
        same_statement(memory.content, keeper.content) and same_reach(memory, keeper) and not outlives(memory, keeper)
    )


def differing_words(a: str, b: str, limit: int = 6) -> str:
    """What a reviewer should look at: the words (and signs) only one side has."""
    words_a = _WORD.findall(unicodedata.normalize("NFC", a))
    words_b = _WORD.findall(unicodedata.normalize("NFC", b))
    only_a = [w for w in dict.fromkeys(words_a) if w not in words_b][:limit]
    only_b = [w for w in dict.fromkeys(words_b) if w not in words_a][:limit]
    if not only_a and not only_b:
        return "the same words in another order or number"
    return f"{' '.join(only_a) or '-'} / {' '.join(only_b) or '-'}"
