"""When two memories say the same thing: the one rule automatic merges follow
(the conflict check's duplicates, consolidation's duplicate episodes).

Embedding similarity cannot tell "same" from "differs in one number, date,
name or identifier" ("rotated on 2026-11-02" and "... on 2026-11-09" are
nearly one vector), so a merge asks for the same words: case, sentence
punctuation and articles aside, in order ("Alice paid Bob" is not "Bob paid
Alice"). Anything less is left for review."""

from __future__ import annotations

import re
import unicodedata

# Sentence punctuation and quotes say nothing about the fact; signs, currency,
# percent, slashes, '@' and '#' do ("-5" is not "5", "$5" is not "€5").
_WORD = re.compile(r"\w+|[^\w\s]")
_IGNORED = frozenset(".,;:!?\"'`()[]{}…«»“”‘’") | {"a", "an", "the"}


def statement_words(text: str) -> tuple[str, ...]:
    """The words a duplicate must share, in order: NFKC, case-folded, without
    sentence punctuation and articles."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return tuple(word for word in _WORD.findall(folded) if word not in _IGNORED)


def same_statement(a: str, b: str) -> bool:
    return statement_words(a) == statement_words(b)


def differing_words(a: str, b: str, limit: int = 6) -> str:
    """What a reviewer should look at: the words only one side has."""
    words_a, words_b = statement_words(a), statement_words(b)
    only_a = [w for w in dict.fromkeys(words_a) if w not in words_b][:limit]
    only_b = [w for w in dict.fromkeys(words_b) if w not in words_a][:limit]
    if not only_a and not only_b:
        return "the same words in another order"
    return f"{' '.join(only_a) or '-'} / {' '.join(only_b) or '-'}"
