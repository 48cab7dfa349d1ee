"""LongMemEval-S development subset (../shared/bench-data/longmemeval-s-dev, MIT):
120 questions, each with its own haystack of ~48 sessions / ~490 turns.

Every turn becomes one episode (butler "lme", session_id = the haystack
session id, created_at = the session's date) in a tenant of its own per
question, so a question only ever searches its own haystack, as the upstream
retrieval evaluation ranks only the question's haystack. Evidence is marked per
session (``answer_session_ids``) and per turn (``has_answer``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import _common

DEFAULT_DATA = _common.BASE_DIR.parent / "shared" / "bench-data" / "longmemeval-s-dev"
# episode_store refuses content over MEMPROJ_MAX_CONTENT_CHARS (16,000); 11 of 59k turns are longer
# and are cut there (none of them carries evidence).
MAX_CHARS = 16_000
TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
)


@dataclass(frozen=True)
class Turn:
    index: int  # position in the haystack (0-based, across sessions)
    session_id: str
    role: str
    content: str
    when: datetime
    has_answer: bool


@dataclass(frozen=True)
class Question:
    question_id: str
    question_type: str
    question: str
    question_date: datetime
    turns: tuple[Turn, ...]
    answer_sessions: frozenset[str]

    @property
    def answer_turns(self) -> frozenset[int]:
        return frozenset(t.index for t in self.turns if t.has_answer)


def parse_date(text: str) -> datetime:
    """'2023/05/20 (Sat) 07:29' -> aware datetime (UTC: the data carries no zone)."""
    day, _, clock = text.partition(") ")
    return datetime.strptime(day.split(" (")[0] + " " + clock, "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def load(data_dir: Path = DEFAULT_DATA, limit: int = 0) -> list[Question]:
    """Questions in a stable order (by type, then id); with ``limit`` the first
    ``limit`` of each type, so a small run still covers every type."""
    by_type: dict[str, list[Question]] = {t: [] for t in TYPES}
    for path in sorted((data_dir / "s").glob("*.json")):
        raw = json.loads(path.read_text(encoding="utf-8"))
        turns: list[Turn] = []
        for session_id, date, session in zip(
            raw["haystack_session_ids"], raw["haystack_dates"], raw["haystack_sessions"], strict=True
        ):
            when = parse_date(date)
            first = len(turns)
            for turn in session:
                if not turn["content"].strip():
                    continue
                turns.append(
                    Turn(
                        len(turns),
                        session_id,
                        turn["role"],
                        turn["content"][:MAX_CHARS].strip(),
                        # A second per turn keeps the session's order in created_at, as a
                        # store of the turns one after another would (the session's neighbours).
                        when + timedelta(seconds=len(turns) - first),
                        bool(turn.get("has_answer")),
                    )
                )
        by_type[raw["question_type"]].append(
            Question(
                question_id=raw["question_id"],
                question_type=raw["question_type"],
                question=raw["question"],
                question_date=parse_date(raw["question_date"]),
                turns=tuple(turns),
                answer_sessions=frozenset(raw["answer_session_ids"]),
            )
        )
    out: list[Question] = []
    for qtype in TYPES:
        items = sorted(by_type[qtype], key=lambda q: q.question_id)
        out.extend(items[:limit] if limit else items)
    return out
