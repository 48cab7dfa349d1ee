"""MemoryBank (English), bench/data/memorybank (MIT; evidence labels added by
hand, see its README): 15 users' ten days of chat with an AI companion, one
episode per turn, one tenant per user; the 100 probing questions asked the day
after the last session, scored on the labelled evidence turns.

``load(said=True)`` derives a two-speaker variant in the form conversation logs
are often stored in: each turn as ``<speaker> said, "<turn>"`` and each question
put in the third person with the speakers' names ("What did you recommend to
me?" -> "What did the AI companion recommend to Frank?", ``third_person``), so
that questions name a person and every turn carries its speaker's name.
``load(said=True, wrong_person=True)`` asks the same questions with the two
people swapped ("What did Frank recommend to the AI companion?"), about the
same evidence turns: the questions of conversation benchmarks that name the
wrong speaker of what was said, where the name pulls the vector channel
towards the other side of the conversation."""

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
# How a question of the derived variant names the companion.
COMPANION_IN_QUESTION = "the AI companion"
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


def third_person(question: str, name: str, wrong_person: bool = False) -> str:
    """The question with its first- and second-person words replaced by the
    speakers' names (I / me -> the user's name, you -> the companion; swapped
    with ``wrong_person``; "do" and "have" after a name agree with it). A
    mechanical rewrite: some sentences stay awkward ("Do the AI companion
    remember ..."), which the channels' analysers (stop words, stemming) and
    the embedder take in their stride."""
    comp = COMPANION_IN_QUESTION
    if wrong_person:
        name, comp = comp, name
    words = {
        "i": name, "me": name, "myself": name, "my": f"{name}'s", "mine": f"{name}'s",
        "i'm": f"{name} is", "i've": f"{name} has", "am": "is",
        "you": comp, "your": f"{comp}'s", "yours": f"{comp}'s", "yourself": comp,
        "we": f"{name} and {comp}", "us": f"{name} and {comp}", "our": f"{name} and {comp}'s",
    }  # fmt: skip

    def swap(m: re.Match[str]) -> str:
        out = words[m.group(0).lower()]
        return out[0].upper() + out[1:] if m.start() == 0 else out

    text = re.sub(
        r"\b(?:i'm|i've|i|me|myself|my|mine|am|you|your|yours|yourself|we|us|our)\b", swap, question.strip(), flags=re.I
    )
    text = re.sub(
        rf"\b(do|have)( {re.escape(name)}| {comp})\b",
        lambda m: {"do": "does", "have": "has"}[m.group(1)] + m.group(2),
        text,
    )
    text = re.sub(
        rf"^({re.escape(name)}) (don't|have)\b",
        lambda m: m.group(1) + {"don't": " doesn't", "have": " has"}[m.group(2)],
        text,
    )
    return text.strip('"')


def load(data_dir: Path = DEFAULT_DATA, said: bool = False, wrong_person: bool = False) -> list[User]:
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
                    content = exchange[field].strip()
                    if said:
                        content = f'{speaker} said, "{content}"'
                    turns.append(Turn(len(turns), date, speaker, content, when, False))
        assert last is not None
        questions = tuple(
            (
                third_person(item["question"].strip().strip('"'), name, wrong_person) if said else item["question"],
                frozenset(index[label] for label in item["evidence"]),
                question_type(item["question"], item["evidence"]),
            )
            for item in evidence[name]
        )
        users.append(User(name, tuple(turns), questions, last + timedelta(days=1)))
    return users


def one_tenant(users: list[User]) -> User:
    """Every user's turns in one haystack, one user after another (each keeps
    its dates): indexes renumbered, each day a session per user, the questions'
    evidence moved with its turns, all asked the day after the last session."""
    ordered = [(turn, user, number) for number, user in enumerate(users) for turn in user.turns]
    new_index = {(number, turn.index): position for position, (turn, _, number) in enumerate(ordered)}
    turns = tuple(
        Turn(position, f"{user.name}-{turn.session_id}", turn.role, turn.content, turn.when, False)
        for position, (turn, user, _) in enumerate(ordered)
    )
    questions = tuple(
        (question, frozenset(new_index[(number, index)] for index in evidence), qtype)
        for number, user in enumerate(users)
        for question, evidence, qtype in user.questions
    )
    return User("all users", turns, questions, max(user.asked_at for user in users))
