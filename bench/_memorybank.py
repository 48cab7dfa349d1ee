"""MemoryBank (English), bench/data/memorybank (MIT; evidence labels added by
hand, see its README): 15 users' ten days of chat with an AI companion, one
episode per turn, one tenant per user; the 100 probing questions asked the day
after the last session, scored on the labelled evidence turns."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import _common
from _longmemeval import Turn

DEFAULT_DATA = _common.BASE_DIR / "bench" / "data" / "memorybank"
COMPANION = "AI companion"
_DATED = re.compile(r"\b(January|February|March|April|May|June|July|August|September|October|November|December) \d")


@dataclass(frozen=True)
class User:
    name: str
    turns: tuple[Turn, ...]  # Turn.role is the speaker's name
    questions: tuple[tuple[str, frozenset[int], str], ...]  # (question, evidence turn indexes, type)
    asked_at: datetime


def question_type(question: str, evidence: list[str]) -> str:
    """dated: the question names a day; companion: every evidence turn is the
    companion's reply ("what did you recommend"); user: the user's own turns."""
    if _DATED.search(question):
        return "dated"
    if evidence and all(label.endswith("r") for label in evidence):
        return "companion"
    return "user"


def load(data_dir: Path = DEFAULT_DATA) -> list[User]:
    bank = json.loads((data_dir / "memory_bank_en.json").read_text(encoding="utf-8"))
    evidence = json.loads((data_dir / "evidence.json").read_text(encoding="utf-8"))
    users = []
    for key, record in bank.items():
        name = key.strip()
        turns: list[Turn] = []
        index: dict[str, int] = {}
        last = None
        for date, exchanges in record["history"].items():
            day = datetime.fromisoformat(date).replace(tzinfo=UTC, hour=20)
            last = day
            for i, exchange in enumerate(exchanges):
                for part, speaker, field in (("q", name, "query"), ("r", COMPANION, "response")):
                    index[f"{date[5:]}.{i}{part}"] = len(turns)
                    # A second per turn keeps the session's order in created_at.
                    when = day + timedelta(seconds=len(turns))
                    turns.append(Turn(len(turns), date, speaker, exchange[field].strip(), when, False))
        assert last is not None
        questions = tuple(
            (
                item["question"],
                frozenset(index[label] for label in item["evidence"]),
                question_type(item["question"], item["evidence"]),
            )
            for item in evidence[name]
        )
        users.append(User(name, tuple(turns), questions, last + timedelta(days=1)))
    return users
