"""Retrieval quality on four conversational-memory sets (MADial, LongMemEval,
MemoryBank and its two-speaker variant: bench/_memorybank.py), through the real
``memory_search``: Recall@k and nDCG@k of keyword-only, vector-only and hybrid
retrieval, per question type where the data has them, plus sweeps of the
keyword scorer, the fusion and the channel depths over the same candidates.

    .venv/bin/python bench/quality.py                  # both sets, full (MADial 160 dialogues, LongMemEval 120 q.)
    .venv/bin/python bench/quality.py --dataset lme --lme-per-type 5
    .venv/bin/python bench/quality.py --params fusion=alpha keyword_scorer=cover_density   # another setting
    .venv/bin/python bench/quality.py --tiny           # smoke test (20 dialogues, 1 question per type)

MADial-Bench (../shared/bench-data/madial, MIT, or MEMPROJ_MADIAL_DIR): each of
the two users' archives (76 and 84 memories) in its own tenant through
``episode_store``; the query is the dialogue up to its test turn (the authors'
formulation). The authors' published top-20 lists are scored the same way.

LongMemEval-S dev (../shared/bench-data/longmemeval-s-dev, MIT, or
MEMPROJ_LME_DIR; bench/_longmemeval.py): 120 questions, 20 per type, each with
its own haystack stored turn by turn (one episode per turn, session id and
session date kept) in a tenant of its own; the question is sent verbatim.
Turn-level evidence is ``has_answer``; session-level evidence is
``answer_session_ids``, with the ranked turns mapped to their sessions (first
occurrence). Abstention questions without turn evidence count only at session level.

Dialect tables: MADial's archives, and the haystacks of LongMemEval's first
``--dialects-lme-per-type`` questions of each type, stored through each
dialect's own write and searched through its search tool's ranking (memory,
memento, langmem, roampal, pce), today's settings against those of when issue
14 began, with a paired bootstrap of the nDCG@10 difference: "no dialect's
search gets worse", measured on each dialect's own path.

Metrics: Recall@k = |top-k & gold| / |gold|; nDCG@k with binary gains and the
ideal DCG of min(|gold|, k) hits.

Chosen defaults (issue 14) and why: fusion ``conf`` (memory/scoring.py
confidence_alpha, gain 2.0) with the policy's alpha 0.65 kept. Both channels
are min-max spread over their own candidates, and the keyword channel's weight
moves with its best hit's coverage of the query's IDF mass: short questions
whose rare words a turn holds lean on BM25, long dialogue queries (MADial) on
the vector channel. Measured against ``norm`` (the fusion before) on both sets:
MADial nDCG@10 0.655 -> 0.662, LongMemEval (18 embedded q.) 0.661 -> 0.689, and
hybrid is then at or above the better single channel on both (it was below the
vector channel's nDCG@10 on LongMemEval). Plain episode text stays the default:
``--embed-text ctx1`` (the previous turn in the embedding) lowered LongMemEval's
vector nDCG@10 0.679 -> 0.625.

Time-aware ranking (issue 14, memory/temporal.py): ``time_boost`` 0.2. Each
question is asked at its own date (LongMemEval's question_date, MADial's
dialogue time); a period the question names ("two weeks ago", "last Friday",
"in March", "in the last two months") moves (1 - 0.2) * relevance + 0.2 * fit
towards memories of that period. Measured on the 32 LongMemEval questions
embedded here (18 = 3 per type, plus the 15 whose question has a time word;
9 name a period): hybrid R@5 0.677 -> 0.708, nDCG@10 0.618 -> 0.621, R@10
0.808 unchanged; on the 9 period questions R@5 0.426 -> 0.537, nDCG@10 0.511
-> 0.524; temporal-reasoning R@5 0.433 -> 0.633. With 6 per type warmed (47
questions): R@5 0.656 -> 0.678, nDCG@10 0.588 -> 0.591. MADial unchanged (nDCG@10
0.662; its dialogues are contexts: only question sentences of at most 400
characters are read). 0.3 scored a little higher (nDCG@10 0.624), 0.5 lost
session recall; 0.2 keeps a margin for a misread period. Orders ("currently",
"the latest" -> newer) are off: they lowered knowledge-update R@10 0.833 -> 0.750.

Embeddings of both corpora are cached on disk (bench/_embcache.py, keyed by
model + text) so repeated runs only embed what is new.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
import _embcache  # noqa: E402
import _fusions  # noqa: E402
import _longmemeval  # noqa: E402
import _memorybank  # noqa: E402
import _models  # noqa: E402

if TYPE_CHECKING:
    from memory.scoring import ChannelHit

KS = (1, 5, 10, 20)
LME_KS = (1, 5, 10, 20, 50)
DATA_VERSION = "v1"
LME_VERSION = "v1"
DEFAULT_DATA = _common.BASE_DIR.parent / "shared" / "bench-data" / "madial"
AUTHORS = {
    "bge-m3": "bge_m3_top_20.json",
    "gte": "gte_top_20.json",
    "jina": "jina_top_20.json",
    "openai": "openai_top_20_bottom.json",
}
DIALOGUE_TIME = datetime(2024, 6, 16, tzinfo=UTC)  # the '<Time>' the authors put on every dialogue
MODES = ("keyword", "semantic", "hybrid")
MODE_LABEL = {
    "keyword": "keyword-only",
    "semantic": "vector-only",
    "hybrid": "hybrid",
    "hybrid-before": "hybrid with the fusion before issue 26 (conf)",
    "hybrid-no-time": "hybrid without the time boost",
}
# The shipped fusion before this work (with the policy's alpha 0.65), run beside the
# current defaults so every report shows before / after on the same tenants.
BEFORE = {"fusion": "conf"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path(os.environ.get("MEMPROJ_MADIAL_DIR", DEFAULT_DATA)))
    p.add_argument("--lme-data", type=Path, default=Path(os.environ.get("MEMPROJ_LME_DIR", _longmemeval.DEFAULT_DATA)))
    p.add_argument(
        "--dataset",
        choices=("all", "both", "madial", "lme", "memorybank", "mbsaid", "mbwrong", "mbsaid1"),
        default="all",
        help="all: the five sets; both: MADial and LongMemEval; mbsaid: MemoryBank's two-speaker variant"
        " (turns stored as '<name> said, \"...\"', questions in the third person); mbwrong: the same turns, each"
        " question naming the wrong person (the two speakers swapped); mbsaid1: mbsaid with every user in one tenant",
    )
    p.add_argument("--mb-data", type=Path, default=Path(os.environ.get("MEMPROJ_MB_DIR", _memorybank.DEFAULT_DATA)))
    p.add_argument("--limit", type=int, default=0, help="MADial: only the first N dialogues (0 = all)")
    p.add_argument("--mb-users", type=int, default=0, help="MemoryBank: only the first N users (0 = all 15)")
    p.add_argument("--lme-per-type", type=int, default=0, help="LongMemEval: first N questions of each type (0 = all)")
    p.add_argument("--params", nargs="*", default=[], help="RetrievalParams overrides, name=value")
    p.add_argument("--no-sweep", action="store_true", help="skip the scorer, fusion and depth sweeps")
    p.add_argument(
        "--embed-text",
        choices=("plain", "ctx1", "ctx1short", "speaker"),
        default=None,
        help="what is embedded for an episode (memory/embedtext.py; default: the MEMPROJ_EMBED_TEXT setting);"
        " speaker (benchmark only): '<speaker> (<session date>): <turn>'",
    )
    p.add_argument(
        "--warm-only",
        action="store_true",
        help="only fill the embedding cache (LongMemEval's 55k turns: an hour or more on a busy 2-core machine)",
    )
    p.add_argument(
        "--dialects-lme-per-type",
        type=int,
        default=3,
        help="LongMemEval questions per type stored through every dialect's write (0 = MADial only)",
    )
    p.add_argument("--floor", action="store_true", help="only the vector evidence floor table of each set")
    p.add_argument(
        "--latency-ab",
        nargs="*",
        default=None,
        metavar="NAME=VALUE",
        help="only an interleaved A/B of memory_search's time per question: the parameters against them with"
        " these overrides (e.g. context_top=0), 3 rounds, median and p95",
    )
    p.add_argument(
        "--model",
        nargs="+",
        default=None,
        choices=_models.CANDIDATES,
        help="only a comparison of embedding models (bench/_models.py) against the stored MiniLM vectors:"
        " each model's vector channel (exact cosine over the tenant) in place of the stored one, vector-only and"
        " hybrid re-ranked as memory_search ranks, with paired-bootstrap intervals",
    )
    p.add_argument(
        "--model-cost",
        nargs="*",
        default=None,
        metavar="MODEL",
        help="only the CPU cost per query and per document text of these models (default: all candidates)",
    )
    p.add_argument(
        "--model-cost-turns",
        choices=("mixed", "lme"),
        default="mixed",
        help="--model-cost samples its 64 turns from MemoryBank and LongMemEval (mixed) or LongMemEval only",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the figures, and each question's, as JSON here")
    p.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("A.json", "B.json"),
        default=None,
        help="only compare two runs' --json files: per set and mode, B - A at R@1/5/10 and nDCG@10 with a 95%%"
        " paired-bootstrap interval over the questions both scored",
    )
    p.add_argument("--tiny", action="store_true", help="smoke-test size")
    args = p.parse_args(argv)
    if args.tiny:
        args.limit = args.limit or 20
        args.lme_per_type = args.lme_per_type or 1
        args.dialects_lme_per_type = min(args.dialects_lme_per_type, 1)
        args.mb_users = args.mb_users or 2
    return args


def parse_overrides(items: Sequence[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        name, _, raw = item.partition("=")
        value: object = raw
        for cast in (int, float):
            try:
                value = cast(raw)
                break
            except ValueError:
                continue
        out[name] = value
    return out


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# --------------------------------------------------------------------------- metrics


def recall_at(gold: set, ranked: Sequence, k: int) -> float:
    return len(gold & set(ranked[:k])) / len(gold) if gold else 0.0


def ndcg_at(gold: set, ranked: Sequence, k: int) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, item in enumerate(ranked[:k]) if item in gold)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(gold), k)))
    return dcg / ideal if ideal else 0.0


def score_run(golds: Sequence[set], runs: Sequence[Sequence], ks: Sequence[int] = KS) -> dict[str, float]:
    pairs = [(g, r) for g, r in zip(golds, runs, strict=True) if g]
    out = {}
    for k in ks:
        out[f"R@{k}"] = sum(recall_at(g, r, k) for g, r in pairs) / max(1, len(pairs))
    for k in ks:
        out[f"nDCG@{k}"] = sum(ndcg_at(g, r, k) for g, r in pairs) / max(1, len(pairs))
    return out


def paired_bootstrap(a: Sequence[float], b: Sequence[float], rounds: int = 2000) -> tuple[float, float, float]:
    """2.5th percentile, mean and 97.5th percentile of mean(a - b) over resampled queries."""
    rng = random.Random(5)
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(rounds))
    return means[int(0.025 * rounds)], sum(diffs) / n, means[int(0.975 * rounds) - 1]


def metric_cols(ks: Sequence[int]) -> list[str]:
    return [f"R@{k}" for k in ks] + [f"nDCG@{k}" for k in ks]


def metric_table(rows: list[tuple[str, dict[str, float]]], first: str = "system", ks: Sequence[int] = KS) -> str:
    cols = metric_cols(ks)
    return _common.table([first] + cols, [[name] + [f"{m[c]:.3f}" for c in cols] for name, m in rows])


# --------------------------------------------------------------------------- data sets


@dataclass
class Query:
    caller: Any  # policy.caller.Caller (imported after Django is set up)
    text: str
    gold: set  # item ids (MADial memory ids; LongMemEval turn indexes)
    category: str = "all"
    id_map: dict = field(default_factory=dict)  # memory uuid -> item id
    session_of: dict = field(default_factory=dict)  # item id -> session (LongMemEval, MemoryBank)
    gold_sessions: set = field(default_factory=set)
    now: datetime | None = None  # the time the question is asked (relative time expressions)


@dataclass
class DataSet:
    name: str
    queries: list[Query]
    ks: Sequence[int]
    depth: int  # results asked of memory_search
    sessions: bool = False  # also score at session level
    modes: Sequence[str] = ("keyword", "semantic", "hybrid")


def tenant_caller(slug: str):  # type: ignore[no-untyped-def]
    from policy.services.tokens import token_authenticate, token_issue

    caller = token_authenticate(token_issue(tenant_slug=slug, principal_name="bench").token)
    assert caller is not None
    return caller


def backdate(tenant_id: uuid.UUID, key_sql: str, key_type: str, keys: Sequence, dates: Sequence[datetime]) -> None:
    """Set created_at (auto_now_add on insert) and occurred_at (when it happened,
    which the time-aware ranking reads) to each memory's own date, in one
    statement: the memories of the tenant whose ``key_sql`` (an expression of
    alias m) equals a key get that key's date. Cheap to repeat: rows already
    dated are left alone."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE memory_memory m SET created_at = x.at, updated_at = x.at, occurred_at = x.at
            FROM unnest(%s::{key_type}[], %s::timestamptz[]) AS x(k, at)
            WHERE m.tenant_id = %s AND {key_sql} = x.k AND (m.created_at <> x.at OR m.occurred_at <> x.at)
            """,
            [list(keys), list(dates), tenant_id],
        )


def fill_tenant(caller, items: list[tuple[str, dict, datetime, str]]) -> None:  # type: ignore[no-untyped-def]
    """Store (content, metadata, when, session) episodes through the real store
    service, created_at set to the item's own date so recency means something.
    Reused across runs when already complete."""
    from memory.models import Memory
    from memory.services.memories import episode_store

    if Memory.objects.filter(tenant_id=caller.tenant_id, validity="active").count() == len(items):
        return
    Memory.objects.filter(tenant_id=caller.tenant_id).delete()
    stored = [
        episode_store(
            caller=caller,
            content=content,
            butler="bench",
            session_id=session or None,
            ttl=timedelta(days=36500),
            metadata=metadata,
        ).pk
        for content, metadata, _, session in items
    ]
    backdate(caller.tenant_id, "m.id", "uuid", stored, [when for _, _, when, _ in items])


def item_ids(caller, key: str) -> dict[uuid.UUID, int]:  # type: ignore[no-untyped-def]
    from memory.models import Memory

    rows = Memory.objects.filter(tenant_id=caller.tenant_id, validity="active").values_list("id", "metadata")
    return {pk: int(meta[key]) for pk, meta in rows}


def load_madial(data_dir: Path) -> tuple[dict[int, list[dict]], list[dict]]:
    """Memories per user (lines 1-76 are Bart's, the rest Lisa's, as in the
    authors' scripts) and the dialogues."""
    memories: dict[int, list[dict]] = {1: [], 2: []}
    for line_no, record in enumerate(read_jsonl(data_dir / "data_en" / "MADial-Bench-en-memory.json")):
        ((key, value),) = record.items()
        memories[1 if line_no < 76 else 2].append(dict(value, id=int(key)))
    dialogues = read_jsonl(data_dir / "data_en" / "MADial-Bench-en-dialogue.json")
    return memories, dialogues


def madial_time(item: dict) -> datetime:
    return datetime.fromisoformat(item["time"]).replace(tzinfo=UTC)


def madial_texts(data_dir: Path) -> list[str]:
    memories, dialogues = load_madial(data_dir)
    return [m["event"].strip() for ms in memories.values() for m in ms] + [
        "".join(d["dialogue"][: d["test-turn"][0]]).strip() for d in dialogues
    ]


def madial_dataset(data_dir: Path, limit: int) -> tuple[DataSet, list[dict]]:
    from memory import embedtext

    memories, dialogues = load_madial(data_dir)
    if limit:
        dialogues = dialogues[:limit]
    callers = {}
    for user, items in memories.items():
        caller = tenant_caller(f"bench-madial-{DATA_VERSION}-{embedtext.text_version()}-user{user}")
        fill_tenant(
            caller,
            [
                (
                    item["event"],
                    {"madial_id": item["id"], "scene": item["scene"], "emotion": item["emotion"]},
                    madial_time(item),
                    "",
                )
                for item in items
            ],
        )
        callers[user] = (caller, item_ids(caller, "madial_id"))
    queries = [
        Query(
            caller=callers[d["user-id"]][0],
            text="".join(d["dialogue"][: d["test-turn"][0]]),
            gold=set(d["relevant-id"]),
            id_map=callers[d["user-id"]][1],
            now=DIALOGUE_TIME,
        )
        for d in dialogues
    ]
    return DataSet("MADial-Bench (en)", queries, KS, 20), dialogues


def lme_embedding_texts(q: _longmemeval.Question, version: str) -> list[str]:
    """Each turn's text to embed, through the one mechanism (memory.embedtext):
    the previous turn is the one before it in the same session, as the store
    path's previous-turn lookup finds it when turns are stored in order."""
    from memory.embedtext import embedding_text

    if version == "speaker":
        return [f"{t.role} ({t.when:%Y-%m-%d}): {t.content}" for t in q.turns]
    out = []
    for i, t in enumerate(q.turns):
        prev = q.turns[i - 1] if i and q.turns[i - 1].session_id == t.session_id else None
        out.append(embedding_text(t.content, kind="episode", previous=prev.content if prev else None, version=version))
    return out


def fill_lme_tenant(caller, q: _longmemeval.Question, embedder: _embcache.CachedEmbedder, version: str) -> bool:  # type: ignore[no-untyped-def]
    """One episode per turn, written as ``episode_store`` writes it (same
    fields, hash, search vector, term statistics) but in one bulk INSERT: 59k
    single store calls would cost more than the benchmark itself. Vectors come
    from the embedding cache only; turns not embedded yet stay pending (NULL)
    and are filled on a later run. Returns whether every turn has its vector."""
    from django.db import connection

    from memory import validation
    from memory.models import EmbeddingStatus, Kind, Memory

    rows = Memory.objects.filter(tenant_id=caller.tenant_id)
    if rows.filter(validity="active").count() != len(q.turns):
        rows.delete()
        far = datetime(2100, 1, 1, tzinfo=UTC)
        Memory.objects.bulk_create(
            [
                Memory(
                    tenant_id=caller.tenant_id,
                    principal_id=caller.principal_id,
                    kind=Kind.EPISODE,
                    content=t.content,
                    content_hash=validation.content_hash(t.content),
                    butler="bench",
                    session_id=t.session_id[:200],
                    metadata={"turn": t.index, "role": t.role},
                    expires_at=far,
                    created_at=t.when,
                    updated_at=t.when,
                    embedding_status=EmbeddingStatus.PENDING,
                )
                for t in q.turns
            ],
            batch_size=1000,
        )
    # The session dates, again on every run (cheap, and repairs an interrupted fill).
    backdate(
        caller.tenant_id, "(m.metadata ->> 'turn')::int", "int", [t.index for t in q.turns], [t.when for t in q.turns]
    )
    pending = list(rows.filter(embedding__isnull=True).values_list("id", "metadata"))
    if not pending:
        return True
    from memory.embedtext import embedding_identity
    from memory.retrieval import vector_literal

    # Every turn of these sets belongs to a session (a LongMemEval session, a MemoryBank day).
    texts = lme_embedding_texts(q, version)
    wanted = {pk: texts[meta["turn"]] for pk, meta in pending}
    cached = embedder.cache.get_many(list(wanted.values()))
    ready = [(pk, vector_literal(cached[text])) for pk, text in wanted.items() if text in cached]
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE memory_memory m SET embedding = x.v::vector, embedding_status = 'ready', embedding_model = %s
            FROM unnest(%s::uuid[], %s::text[]) AS x(id, v) WHERE m.id = x.id
            """,
            [
                embedding_identity(embedder.model_name, in_session=True, version=version),
                [pk for pk, _ in ready],
                [v for _, v in ready],
            ],
        )
    return len(ready) == len(pending)


def lme_dataset(
    data_dir: Path, per_type: int, embedder: _embcache.CachedEmbedder, version: str
) -> tuple[DataSet, DataSet]:
    """All questions (for the keyword channel) and those whose haystack is fully embedded."""
    queries, embedded = [], []
    for q in _longmemeval.load(data_dir, per_type):
        caller = tenant_caller(f"bench-lme-{LME_VERSION}-{version}-{q.question_id}")
        complete = fill_lme_tenant(caller, q, embedder, version)
        query = Query(
            caller=caller,
            text=q.question,
            gold=set(q.answer_turns),
            category=q.question_type,
            id_map=item_ids(caller, "turn"),
            session_of={t.index: t.session_id for t in q.turns},
            gold_sessions=set(q.answer_sessions),
            now=q.question_date,
        )
        queries.append(query)
        if complete and embedder.cache.get_many([q.question]):
            embedded.append(query)
    return (
        DataSet("LongMemEval-S dev (all haystacks, keyword)", queries, LME_KS, 50, sessions=True, modes=("keyword",)),
        DataSet("LongMemEval-S dev (embedded haystacks)", embedded, LME_KS, max(LME_KS), sessions=True),
    )


def lme_texts(data_dir: Path, per_type: int, version: str) -> list[str]:
    qs = _longmemeval.load(data_dir, per_type)
    return [q.question for q in qs] + [text for q in qs for text in lme_embedding_texts(q, version)]


MB_VERSION = "v1"
MBSAID_NAME = 'MemoryBank two speakers ("<name> said, ...", third-person questions)'
MBSAID1_NAME = "MemoryBank two speakers, every user in one tenant"
MBWRONG_NAME = "MemoryBank two speakers, questions naming the wrong person"


def memorybank_texts(
    data_dir: Path, version: str, users_wanted: int = 0, said: bool = False, wrong_person: bool = False
) -> list[str]:
    users = _memorybank.load(data_dir, said, wrong_person)[: users_wanted or None]
    return [q for u in users for q, _, _ in u.questions] + [
        text
        for u in users
        for text in lme_embedding_texts(u, version)  # type: ignore[arg-type]
    ]


def memorybank_dataset(
    data_dir: Path,
    embedder: _embcache.CachedEmbedder,
    version: str,
    users_wanted: int = 0,
    said: bool = False,
    one_tenant: bool = False,
    wrong_person: bool = False,
) -> DataSet:
    """One tenant per user (``one_tenant``: one for all users,
    ``_memorybank.one_tenant``), one episode per turn (speaker in the metadata,
    session = the day), stored as the LongMemEval haystacks are. ``wrong_person``
    asks the two-speaker questions with the speakers swapped, on the same tenants."""
    queries = []
    users = _memorybank.load(data_dir, said, wrong_person)[: users_wanted or None]
    if one_tenant:
        users = [_memorybank.one_tenant(users)]
    for user in users:
        slug = re.sub(r"\W+", "-", user.name.lower())
        caller = tenant_caller(f"bench-mb{'said' if said else ''}-{MB_VERSION}-{version}-{slug}")
        fill_lme_tenant(caller, user, embedder, version)  # type: ignore[arg-type]
        id_map = item_ids(caller, "turn")
        session_of = {t.index: t.session_id for t in user.turns}
        for question, evidence, qtype in user.questions:
            queries.append(
                Query(
                    caller=caller,
                    text=question,
                    gold=set(evidence),
                    category=qtype,
                    id_map=id_map,
                    session_of=session_of,
                    now=user.asked_at,
                )
            )
    if said:
        name = MBSAID1_NAME if one_tenant else MBWRONG_NAME if wrong_person else MBSAID_NAME
        return DataSet(name, queries, KS, 20)
    return DataSet("MemoryBank (en, labelled evidence)", queries, KS, 20)


def sessions_ranked(query: Query, ranked: Sequence[int]) -> list[str]:
    return list(dict.fromkeys(query.session_of[i] for i in ranked))


# --------------------------------------------------------------------------- evaluation


def search_runs(ds: DataSet, mode: str, params) -> list[list[int]]:  # type: ignore[no-untyped-def]
    from memory.selectors import memories as selectors

    runs = []
    for q in ds.queries:
        with asked_at(q.now):
            found = selectors.memory_search(
                caller=q.caller,
                query=selectors.SearchQuery(q.text, mode=mode, limit=ds.depth, types=["episode"], params=params),
            )
        runs.append([q.id_map[item.memory.id] for item in found])
    return runs


def asked_at(now: datetime | None):  # type: ignore[no-untyped-def]
    """The request time of a read set to the question's own date (LongMemEval's
    question_date, MADial's dialogue time), so that "last week" means what it
    meant when the question was asked."""
    from unittest import mock

    if now is None:
        return contextlib.nullcontext()
    return mock.patch("django.utils.timezone.now", return_value=now)


def score_ds(ds: DataSet, runs: Sequence[Sequence[int]], queries: Sequence[Query] | None = None) -> dict[str, float]:
    queries = ds.queries if queries is None else queries
    out = score_run([q.gold for q in queries], runs, ds.ks)
    if ds.sessions:
        sess = score_run(
            [q.gold_sessions for q in queries],
            [sessions_ranked(q, r) for q, r in zip(queries, runs, strict=True)],
            ds.ks,
        )
        out.update({f"S-{k}": v for k, v in sess.items()})
    return out


def ds_table(ds: DataSet, rows: list[tuple[str, dict[str, float]]], first: str = "system") -> str:
    """Turn-level (or memory-level) figures, then session-level for LongMemEval."""
    cols = metric_cols(ds.ks)
    if ds.sessions:
        cols = [c for c in cols if c in ("R@1", "R@5", "R@10", "R@50", "nDCG@10")] + ["S-R@5", "S-R@10", "S-nDCG@10"]
    return _common.table([first] + cols, [[name] + [f"{m[c]:.3f}" for c in cols] for name, m in rows])


def never_below(ds: DataSet, runs: dict, hyb: dict, figs: dict, rows: list) -> list[str]:  # type: ignore[type-arg]
    """Hybrid against the better single channel at R@1 (or the set's first k),
    R@5, R@10 and nDCG@10, with a 95% paired-bootstrap interval of the
    per-question difference."""
    out = []
    metrics = [f"R@{k}" for k in ds.ks if k <= 10] + ["nDCG@10"]
    for metric in metrics:
        keyword, semantic = figs[rows[0][0]][metric], figs[rows[1][0]][metric]
        better = "keyword" if keyword >= semantic else "semantic"
        best_single = max(keyword, semantic)
        k = int(metric.split("@")[1])
        score = ndcg_at if metric.startswith("nDCG") else recall_at
        mine = [score(q.gold, r, k) for q, r in zip(ds.queries, runs["hybrid"], strict=True) if q.gold]
        theirs = [score(q.gold, r, k) for q, r in zip(ds.queries, runs[better], strict=True) if q.gold]
        low, mean, high = paired_bootstrap(mine, theirs)
        verdict = "ok" if hyb[metric] >= best_single - 1e-9 else "BELOW"
        out.append(
            f"hybrid {metric} {hyb[metric]:.3f} vs better single channel ({better}) {best_single:.3f}: {verdict}"
            f" (difference {mean:+.3f}, 95% interval {low:+.3f} .. {high:+.3f})"
        )
    return out


def category_table(ds: DataSet, runs: dict[str, list[list[int]]]) -> str:
    cats = sorted({q.category for q in ds.queries})
    cols = ["R@5", "R@10", "nDCG@10"] + (["S-R@10"] if ds.sessions else [])
    rows = []
    for cat in cats:
        idx = [i for i, q in enumerate(ds.queries) if q.category == cat]
        for mode in [m for m in (*ds.modes, "hybrid-before", "hybrid-no-time") if m in runs]:
            m = score_ds(ds, [runs[mode][i] for i in idx], [ds.queries[i] for i in idx])
            rows.append([cat, MODE_LABEL[mode], len(idx)] + [f"{m[c]:.3f}" for c in cols])
    return _common.table(["type", "channel", "n"] + cols, rows)


def time_table(ds: DataSet, runs: dict[str, list[list[int]]]) -> list[str]:
    """The questions whose text names a period or an order (memory/temporal.py),
    hybrid with and without the time boost: the only ones it can change."""
    from memory import temporal

    idx = [i for i, q in enumerate(ds.queries) if q.now is not None and temporal.parse(q.text, q.now)]
    if not idx:
        return ["", f"{ds.name}: no question names a period or an order (the time boost changes nothing)"]
    cols = ["R@5", "R@10", "nDCG@10"] + (["S-R@10"] if ds.sessions else [])
    rows = []
    for mode in ("hybrid", "hybrid-no-time"):
        m = score_ds(ds, [runs[mode][i] for i in idx], [ds.queries[i] for i in idx])
        rows.append([MODE_LABEL[mode], len(idx)] + [f"{m[c]:.3f}" for c in cols])
    return ["", f"{ds.name}: questions with a time expression", _common.table(["channel", "n"] + cols, rows)]


# --------------------------------------------------------------------------- dialects

# The retrieval settings when issue 14 began: the raw alpha blend (with the
# policy's alpha) of cosine and squashed cover density, no time boost. What the
# dialect table compares against, so "no dialect's search gets worse" is measured
# on each dialect's own write and read path, not inferred from memory_search.
ISSUE_START_SETTINGS = {"FUSION": "conf"}
LANGMEM_BENCH_NAMESPACE = ("user", "bench")


@dataclass
class DialectRead:
    name: str  # "<dialect>: <tool>"
    store: Callable[[Any, str, datetime], None]  # (caller, content, date): the dialect's own write service
    search: Callable[[Any, str, int], list[uuid.UUID]]  # (caller, query, limit): memory ids, best first


def dialect_reads() -> list[DialectRead]:
    """Each dialect's write and its search tool's ranking, as its MCP tool calls
    them (mcp_server/toolsets/*), with the tools' defaults. The reads are the
    rankings without the tools' bookkeeping (memory_recall's reference bump,
    memento's and langmem's accessed_at), so that a run does not change the next."""
    from memory import api
    from memory.selectors.memories import memory_recall_candidates

    def episode(caller, content, when):  # type: ignore[no-untyped-def]
        api.episode_store(caller=caller, content=content, butler="bench", ttl=timedelta(days=36500))

    def keyed_fact(caller, content, when):  # type: ignore[no-untyped-def]
        # memory_store_fact: one subject, a predicate per memory (no supersession between them)
        predicate = f"event-{uuid.uuid5(uuid.NAMESPACE_URL, content).hex[:12]}"
        api.fact_store(caller=caller, subject="user", predicate=predicate, content=content)

    def fact(caller, content, when):  # type: ignore[no-untyped-def]
        api.fact_store(caller=caller, subject=None, predicate=None, content=content, confidence=1.0)

    def langmem_item(caller, content, when):  # type: ignore[no-untyped-def]
        key = str(uuid.uuid5(uuid.NAMESPACE_URL, content))
        api.fact_store(caller=caller, subject=key, predicate=None, namespace=LANGMEM_BENCH_NAMESPACE, content=content)

    def memory_bank(caller, content, when):  # type: ignore[no-untyped-def]
        api.memory_bank_store(caller=caller, content=content)

    def claim(caller, content, when):  # type: ignore[no-untyped-def]
        api.claim_upsert(caller=caller, text=content, provenance={"at": when.isoformat()}, kind="fact", scope="project")

    return [
        DialectRead(
            "memory: memory_search",
            episode,
            lambda c, q, k: [
                i.memory.id for i in api.memory_search(caller=c, query=api.SearchQuery(q, types=["episode"], limit=k))
            ],
        ),
        DialectRead(
            "memory: memory_recall",
            keyed_fact,
            lambda c, q, k: [i.memory.id for i in memory_recall_candidates(caller=c, topic=q, limit=k)],
        ),
        DialectRead(
            "memento: search_memories",
            fact,
            lambda c, q, k: [
                i.memory.id for i in api.memory_search(caller=c, query=api.SearchQuery(q, types=["fact"], limit=k))
            ],
        ),
        DialectRead(
            "langmem: search_memory",
            langmem_item,
            lambda c, q, k: [
                i.memory.id
                for i in api.memory_search(
                    caller=c,
                    query=api.SearchQuery(q, types=["fact"], limit=k, namespace_prefix=LANGMEM_BENCH_NAMESPACE),
                )
            ],
        ),
        DialectRead(
            "roampal: search_memory",
            memory_bank,
            lambda c, q, k: [h.memory.id for h in api.collection_search(caller=c, query=q, limit=k)],
        ),
        DialectRead(
            "pce: activate",
            claim,
            lambda c, q, k: [r.memory.id for r in api.claims_activate(caller=c, query=q, top_k=k).items],
        ),
    ]


@dataclass
class DialectCorpus:
    """What the dialect table stores and asks: per tenant, (item id, content,
    date) items; per query, its tenant, text, gold item ids and request time."""

    name: str
    tenants: dict[str, list[tuple[int, str, datetime]]]
    queries: list[tuple[str, str, set, datetime]]


def madial_corpus(data_dir: Path, dialogues: list[dict]) -> DialectCorpus:
    memories, _ = load_madial(data_dir)
    return DialectCorpus(
        f"MADial-Bench, {len(dialogues)} queries",
        {f"user{u}": [(i["id"], i["event"], madial_time(i)) for i in items] for u, items in memories.items()},
        [
            (f"user{d['user-id']}", "".join(d["dialogue"][: d["test-turn"][0]]), set(d["relevant-id"]), DIALOGUE_TIME)
            for d in dialogues
        ],
    )


def memorybank_corpus(data_dir: Path, users_wanted: int = 0) -> DialectCorpus:
    users = _memorybank.load(data_dir)[: users_wanted or None]
    return DialectCorpus(
        f"MemoryBank (en), {sum(len(u.questions) for u in users)} questions",
        {u.name: [(t.index, t.content, t.when) for t in u.turns] for u in users},
        [(u.name, q, set(evidence), u.asked_at) for u in users for q, evidence, _ in u.questions],
    )


def lme_corpus(data_dir: Path, per_type: int) -> DialectCorpus:
    questions = _longmemeval.load(data_dir, per_type)
    return DialectCorpus(
        f"LongMemEval-S dev, {len(questions)} questions ({per_type} per type)",
        {q.question_id: [(t.index, t.content, t.when) for t in q.turns] for q in questions},
        [(q.question_id, q.question, set(q.answer_turns), q.question_date) for q in questions],
    )


def dialect_table(corpus: DialectCorpus, k: int) -> list[str]:
    """The corpus stored through every dialect's own write (a tenant per dialect
    and corpus tenant) and each query sent to its search tool, with today's
    settings and with those of when issue 14 began. Items of equal content are
    one memory (a write of the same text returns the stored one): each counts as
    its first item, in the gold sets too."""
    from django.conf import settings
    from django.test import override_settings

    from memory import validation
    from memory.models import Memory

    def storable(text: str) -> bool:
        try:
            validation.present(text, field="content")
        except validation.InvalidArgument:
            return False  # blank or invisible characters alone: no dialect's write takes it
        return True

    tenant_items = {
        key: [(i, text, when) for i, text, when in items if storable(text)] for key, items in corpus.tenants.items()
    }
    # Per corpus tenant, each content's first item (what its memory stands for).
    distinct: dict[str, dict[str, tuple[int, str, datetime]]] = {}
    for key, items in tenant_items.items():
        distinct[key] = {}
        for i, text, when in items:
            distinct[key].setdefault(validation.content_hash(text), (i, text, when))
    first_of = {
        key: {i: distinct[key][validation.content_hash(text)][0] for i, text, _ in items}
        for key, items in tenant_items.items()
    }
    rows = []
    for read in dialect_reads():
        slug = re.sub(r"\W+", "-", read.name)
        tenants = {}
        for key, firsts in distinct.items():
            caller = tenant_caller(f"bench-dialect-{DATA_VERSION}-{LME_VERSION}-{slug}-{key}")
            active = Memory.objects.filter(tenant_id=caller.tenant_id, validity="active")
            if active.count() != len(firsts):
                Memory.objects.filter(tenant_id=caller.tenant_id).delete()
                for _, text, when in firsts.values():
                    read.store(caller, text, when)
                backdate(caller.tenant_id, "m.content_hash", "text", list(firsts), [w for _, _, w in firsts.values()])
            tenants[key] = (caller, {pk: firsts[h][0] for pk, h in active.values_list("id", "content_hash")})
        golds = [{first_of[key][i] for i in gold if i in first_of[key]} for key, _, gold, _ in corpus.queries]
        runs_by_setting = []
        for conf in ({}, ISSUE_START_SETTINGS):
            runs = []
            with override_settings(MEMPROJ={**settings.MEMPROJ, **conf}):
                for key, text, _, now in corpus.queries:
                    caller, id_map = tenants[key]
                    with asked_at(now):
                        runs.append([id_map[pk] for pk in read.search(caller, text, k)])
            runs_by_setting.append(runs)
        now_fig, start_fig = (score_run(golds, runs, (5, 10, k)) for runs in runs_by_setting)
        now_ndcg, start_ndcg = (
            [ndcg_at(g, r, 10) for g, r in zip(golds, runs, strict=True) if g] for runs in runs_by_setting
        )
        low, mean, high = paired_bootstrap(now_ndcg, start_ndcg)
        verdict = "worse" if high < 0 else "better" if low > 0 else "no significant change"
        rows.append(
            [read.name]
            + [f"{now_fig[c]:.3f}" for c in ("R@5", "R@10", f"R@{k}", "nDCG@10")]
            + [f"{start_fig[c]:.3f}" for c in ("R@10", "nDCG@10")]
            + [f"{mean:+.3f} ({low:+.3f} .. {high:+.3f})", verdict]
        )
    return [
        "",
        f"{corpus.name}, through each dialect's own write and search tool "
        "(now, and with the fusion before issue 26: conf)",
        _common.table(
            [
                "dialect: tool",
                "R@5",
                "R@10",
                f"R@{k}",
                "nDCG@10",
                "start R@10",
                "start nDCG@10",
                "nDCG@10 now - start (95% CI)",
                "verdict",
            ],
            rows,
        ),
    ]


# --------------------------------------------------------------------------- sweeps


Wide = list[tuple[list[tuple[uuid.UUID, "ChannelHit", datetime]], Query]]


def wide_candidates(ds: DataSet, params, vector_text: Callable[[Query], str] | None = None) -> Wide:  # type: ignore[no-untyped-def]
    """Every candidate of both channels (depth 500), once per query, to re-rank
    offline; ``vector_text``: what the vector channel embeds for a query (default
    what the service embeds, ``retrieval.vector_query_text``)."""
    from django.utils import timezone

    from memory.embeddings import embed_one
    from memory.models import Memory
    from memory.retrieval import RetrievalFilter, channel_hits, vector_query_text

    wide: Wide = []
    deep = params.with_(k_vec=500, k_txt=500)
    for q in ds.queries:
        flt = RetrievalFilter(kinds=["episode"], now=q.now or timezone.now())
        vector = None
        if "semantic" in ds.modes:
            vector = embed_one(vector_text(q) if vector_text else vector_query_text(q.caller, q.text, params))
        hits = channel_hits(caller=q.caller, flt=flt, query_text=q.text, query_vector=vector, params=deep)
        created = dict(Memory.objects.filter(pk__in=list(hits)).values_list("id", "created_at"))
        wide.append(([(pk, hit, created[pk]) for pk, hit in hits.items()], q))
    return wide


def capped(hit, k_vec: int, k_txt: int):  # type: ignore[no-untyped-def]
    """The hit as it would be with LIMIT k_vec / k_txt per channel (same ordering)."""
    from memory.scoring import ChannelHit

    vec_ok = hit.vector_rank is not None and hit.vector_rank <= k_vec
    txt_ok = hit.text_rank is not None and hit.text_rank <= k_txt
    return ChannelHit(
        vector_similarity=hit.vector_similarity if vec_ok else None,
        vector_rank=hit.vector_rank if vec_ok else None,
        text_rank_value=hit.text_rank_value if txt_ok else None,
        text_rank=hit.text_rank if txt_ok else None,
        text_coverage=hit.text_coverage if txt_ok else None,
        time_fit=hit.time_fit,
    )


def rerank(ds: DataSet, wide: Wide, params, mode: str = "hybrid", fusion: str | None = None) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """Order as memory_search does (score DESC, created_at DESC, id ASC), with the
    channel depths of ``params`` applied to the wide candidates; ``fusion`` may
    name an experiment-only fusion (bench/_fusions.py)."""
    from memory.scoring import channel_relevance, with_evidence

    runs = []
    for cands, q in wide:
        hits = with_evidence({pk: capped(h, params.k_vec, params.k_txt) for pk, h, _ in cands}, params.vector_floor)
        if mode == "keyword":
            hits = {pk: h for pk, h in hits.items() if h.text_rank is not None}
        elif mode == "semantic":
            hits = {pk: h for pk, h in hits.items() if h.vector_rank is not None}
        else:
            hits = {pk: h for pk, h in hits.items() if h.vector_rank is not None or h.text_rank is not None}
        rel = _fusions.fuse(hits, params, fusion) if mode == "hybrid" else channel_relevance(hits, mode, params)
        created = {pk: c for pk, _, c in cands}
        ordered = sorted(hits, key=lambda pk: (-round(rel[pk], 12), -created[pk].timestamp(), str(pk)))
        runs.append([q.id_map[pk] for pk in ordered][: ds.depth])
    return runs


# --------------------------------------------------------------------------- evidence floor

FLOORS = (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4)


def floor_table(ds: DataSet, params) -> list[str]:  # type: ignore[no-untyped-def]
    """What a vector-similarity floor (scoring.has_evidence) costs and removes.
    Per floor: the labelled evidence items the vector channel ranks in its top
    10 without a keyword match that the floor would drop, the share of the
    other vector-only candidates (top k_vec) it drops, and hybrid / vector-only
    recall with it applied."""
    wide = wide_candidates(ds, params.with_(vector_floor=-1.0))
    rows = []
    for floor in FLOORS:
        lost = at_risk = dropped = others = 0
        for cands, q in wide:
            for pk, hit, _ in cands:
                if hit.vector_rank is None or (hit.text_rank is not None and hit.text_rank <= params.k_txt):
                    continue
                below = (hit.vector_similarity or 0.0) < floor
                if q.id_map.get(pk) in q.gold:
                    if hit.vector_rank <= 10:
                        at_risk += 1
                        lost += below
                elif hit.vector_rank <= params.k_vec:
                    others += 1
                    dropped += below
        p = params.with_(vector_floor=floor)
        hyb, sem = score_ds(ds, rerank(ds, wide, p)), score_ds(ds, rerank(ds, wide, p, "semantic"))
        rows.append(
            [f"{floor:.2f}", f"{lost}/{at_risk}", f"{dropped / max(1, others):.1%}"]
            + [f"{m[c]:.3f}" for m in (hyb, sem) for c in ("R@5", "R@10")]
        )
    return [
        "",
        f"{ds.name}: vector evidence floor (a memory without a keyword match needs this cosine similarity)",
        _common.table(
            [
                "floor",
                "evidence in vector top 10 dropped",
                "other vector-only candidates dropped",
                "hybrid R@5",
                "hybrid R@10",
                "vector R@5",
                "vector R@10",
            ],
            rows,
        ),
    ]


# --------------------------------------------------------------------------- embedding models


def model_cost(args: argparse.Namespace) -> list[str]:
    """Questions and turns of MemoryBank and of the first LongMemEval question of each type."""
    names = args.model_cost or [n for n in _models.CANDIDATES]
    users = _memorybank.load(args.mb_data)
    lme = _longmemeval.load(args.lme_data, 1)
    queries = [q for u in users for q, _, _ in u.questions][:60] + [q.question for q in lme]
    rng = random.Random(7)
    turns = [t.content for q in lme for t in q.turns]
    if args.model_cost_turns == "mixed":
        turns = [t.content for u in users for t in u.turns] + turns
    docs = rng.sample(turns, 64)
    out = _models.cost_table(names, queries, docs)
    if any(_models.Candidate.splits(n) for n in names):
        vectors = [1 + len(_models.split_sentences(d)) for d in docs]
        out.append(f"(the sampled turns: {statistics.mean(vectors):.2f} vectors per turn with their sentences)")
    return out


def model_wide(wide: Wide, embedder: _embcache.CachedEmbedder, sentences: bool = False) -> Wide:
    """The wide candidates with the vector channel recomputed by ``embedder``:
    exact cosine of the query's vector with every active episode of the tenant,
    top 500 kept (ranks 1-based), keyword fields and dates as stored, time fit
    annotated as memory_search annotates it. ``sentences``: an episode's
    similarity is the best of its whole text's and its sentences'
    (_models.split_sentences)."""
    import numpy as np

    from memory import temporal
    from memory.models import Memory
    from memory.scoring import ChannelHit

    tenants: dict[uuid.UUID, tuple[list, Any, dict]] = {}
    out: Wide = []
    for cands, q in wide:
        if q.caller.tenant_id not in tenants:
            rows = list(
                Memory.objects.filter(tenant_id=q.caller.tenant_id, validity="active", kind="episode").values_list(
                    "id", "content", "created_at"
                )
            )
            matrix = np.asarray(embedder.embed([c for _, c, _ in rows]), dtype=np.float32)
            split = [_models.split_sentences(c) if sentences else [] for _, c, _ in rows]
            pieces = [(i, p) for i, ps in enumerate(split) for p in ps]
            owner = np.asarray([i for i, _ in pieces], dtype=np.int64)
            parts = np.asarray(embedder.embed([p for _, p in pieces]), dtype=np.float32)
            parts = parts.reshape(len(pieces), matrix.shape[1])
            vectors = (matrix, owner, parts)
            tenants[q.caller.tenant_id] = ([pk for pk, _, _ in rows], vectors, {pk: c for pk, _, c in rows})
        pks, (matrix, owner, parts), created = tenants[q.caller.tenant_id]
        qv = np.asarray(embedder.embed([q.text])[0], dtype=np.float32)
        sims = matrix @ qv
        if len(owner):
            np.maximum.at(sims, owner, parts @ qv)
        top = np.argsort(-sims, kind="stable")[:500]
        old = {pk: h for pk, h, _ in cands}
        hits = {}
        for rank, i in enumerate(top, start=1):
            h = old.get(pks[i], ChannelHit())
            hits[pks[i]] = ChannelHit(
                vector_similarity=float(sims[i]),
                vector_rank=rank,
                text_rank_value=h.text_rank_value,
                text_rank=h.text_rank,
                text_coverage=h.text_coverage,
            )
        for pk, h in old.items():
            if pk not in hits and h.text_rank is not None:
                hits[pk] = ChannelHit(
                    text_rank_value=h.text_rank_value, text_rank=h.text_rank, text_coverage=h.text_coverage
                )
        hits = temporal.annotate(hits, q.text, q.now or datetime.now(UTC))
        out.append(([(pk, h, created[pk]) for pk, h in hits.items()], q))
    return out


def model_table(ds: DataSet, params, names: Sequence[str]) -> list[str]:  # type: ignore[no-untyped-def]
    """Vector-only and hybrid recall per embedding model, against the stored
    MiniLM vectors (the service's HNSW read) on the same candidates. Each model
    gets its own evidence floor (memory.scoring.vector_floor_for)."""
    from memory.scoring import vector_floor_for

    wide = wide_candidates(ds, params)
    ks = (1, 5, 10)

    def per_query(runs: list[list[int]]) -> list[float]:
        return [recall_at(q.gold, r, 10) for q, r in zip(ds.queries, runs, strict=True) if q.gold]

    base = {m: rerank(ds, wide, params, m) for m in ("semantic", "hybrid")}
    notes: list[str] = []
    rows = [
        ["all-MiniLM-L6-v2 (stored vectors, as served)"]
        + [f"{score_run([q.gold for q in ds.queries], base[m], ks)[f'R@{k}']:.3f}" for m in base for k in ks]
        + ["", ""]
    ]
    for name in names:
        cand = _models.Candidate(name)
        embedder = _embcache.CachedEmbedder(cand, _embcache.EmbeddingCache(cand.model_name))
        texts = {q.text for _, q in wide}
        from memory.models import Memory

        tenants = {q.caller.tenant_id for q in ds.queries}
        contents = list(
            Memory.objects.filter(tenant_id__in=tenants, validity="active", kind="episode").values_list(
                "content", flat=True
            )
        )
        texts |= set(contents)
        if cand.sentences:
            split = [_models.split_sentences(t) for t in contents]
            vectors = [1 + len(v) for v in split]
            chars = [len(t) for t in contents]
            notes.append(
                f"{cand.label}: {statistics.mean(vectors):.2f} vectors per episode"
                f" ({sum(v > 1 for v in vectors) / len(vectors):.0%} split, at most {max(vectors)});"
                f" episode length median {statistics.median(chars):.0f} characters, p95"
                f" {_common.percentile(chars, 95):.0f}"
            )
            texts |= {piece for v in split for piece in v}
        _embcache.warm(embedder, texts, batch=64)
        p = params.with_(vector_floor=vector_floor_for(cand.model_name))
        mw = model_wide(wide, embedder, cand.sentences)
        runs = {m: rerank(ds, mw, p, m) for m in ("semantic", "hybrid")}
        cis = []
        for m in ("semantic", "hybrid"):
            low, mean, high = paired_bootstrap(per_query(runs[m]), per_query(base[m]))
            cis.append(f"{mean:+.3f} ({low:+.3f} .. {high:+.3f})")
        best = ", best of turn and sentences" if cand.sentences else ""
        rows.append(
            [f"{cand.model_name} (exact cosine{best}, floor {p.vector_floor:.2f})"]
            + [f"{score_run([q.gold for q in ds.queries], runs[m], ks)[f'R@{k}']:.3f}" for m in runs for k in ks]
            + cis
        )
    return [
        "",
        f"{ds.name} - {len(ds.queries)} queries - embedding models (turn-level recall; differences: R@10 against"
        " the first row, paired bootstrap 95% CI)",
        _common.table(
            ["model"]
            + [f"vector R@{k}" for k in ks]
            + [f"hybrid R@{k}" for k in ks]
            + ["vector R@10 diff (95% CI)", "hybrid R@10 diff (95% CI)"],
            rows,
        ),
        *notes,
    ]


# --------------------------------------------------------------------------- main


PER_QUESTION_METRICS = ("R@1", "R@5", "R@10", "nDCG@10")


def per_question(ds: DataSet, run: Sequence[Sequence[int]]) -> dict[str, list[float]]:
    """Each scored question's figures, keyed by its text (for --compare)."""
    out = {}
    for q, ranked in zip(ds.queries, run, strict=True):
        if q.gold:
            out[q.text] = [recall_at(q.gold, ranked, k) for k in (1, 5, 10)] + [ndcg_at(q.gold, ranked, 10)]
    return out


def compare(a_path: Path, b_path: Path) -> list[str]:
    """B - A per set, mode and metric over the questions both runs scored."""
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    rows = []
    for name in a:
        for mode, a_questions in a[name].get("per_question", {}).items():
            b_questions = b.get(name, {}).get("per_question", {}).get(mode)
            if not b_questions:
                continue
            shared = [text for text in a_questions if text in b_questions]
            cells = []
            for i, _metric in enumerate(PER_QUESTION_METRICS):
                mine = [b_questions[text][i] for text in shared]
                theirs = [a_questions[text][i] for text in shared]
                low, mean, high = paired_bootstrap(mine, theirs)
                cells.append(
                    f"{sum(theirs) / len(shared):.3f} -> {sum(mine) / len(shared):.3f} ({low:+.3f}..{high:+.3f})"
                )
            rows.append([name, mode, str(len(shared)), *cells])
    return [
        f"B = {b_path}, A = {a_path}: A -> B (95% paired-bootstrap interval of B - A)",
        _common.table(["set", "mode", "questions", *PER_QUESTION_METRICS], rows),
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compare:
        print("\n".join(compare(*args.compare)))
        return 0
    want_madial = args.dataset in ("all", "both", "madial")
    want_lme = args.dataset in ("all", "both", "lme")
    want_mb = args.dataset in ("all", "memorybank")
    want_mbsaid = args.dataset in ("all", "mbsaid")
    want_mbsaid1 = args.dataset == "mbsaid1"
    want_mbwrong = args.dataset in ("all", "mbwrong")
    if want_madial and not (args.data / "data_en").is_dir():
        print(f"MADial-Bench data not found in {args.data} (set --data or MEMPROJ_MADIAL_DIR)", file=sys.stderr)
        return 2
    if want_lme and not (args.lme_data / "s").is_dir():
        print(f"LongMemEval data not found in {args.lme_data}; skipping it", file=sys.stderr)
        want_lme = False
    _common.setup_django(db_name="memproj_bench_quality")
    if args.model_cost is not None:
        print("\n".join(model_cost(args)))
        return 0
    from django.conf import settings

    from memory import embedtext, scoring
    from memory.scoring import RetrievalParams

    if args.embed_text in embedtext.TEXT_VERSIONS:
        settings.MEMPROJ["EMBED_TEXT"] = args.embed_text
    version = args.embed_text if args.embed_text == "speaker" else embedtext.text_version()
    embedder = _embcache.install()
    # MADial is small: embed what is missing now. LongMemEval's haystacks are
    # embedded by --warm-only (slow); until then its vector rows cover the
    # questions whose haystack is in the cache, and keyword rows cover all.
    _embcache.warm(embedder, madial_texts(args.data) if want_madial else [])
    _embcache.warm(embedder, memorybank_texts(args.mb_data, version, args.mb_users) if want_mb else [])
    _embcache.warm(
        embedder, memorybank_texts(args.mb_data, version, args.mb_users, True) if want_mbsaid or want_mbsaid1 else []
    )
    _embcache.warm(embedder, memorybank_texts(args.mb_data, version, args.mb_users, True, True) if want_mbwrong else [])
    if args.warm_only:
        if want_lme:
            # Smallest subsets first, so a long warm-up is usable early; only the
            # asked subset with --lme-per-type.
            for per_type in [args.lme_per_type] if args.lme_per_type else [3, 6, 10, 20]:
                _embcache.warm(embedder, lme_texts(args.lme_data, per_type, version))
        return 0

    t0 = time.perf_counter()
    datasets: list[DataSet] = []
    dialogues: list[dict] = []
    if want_madial:
        madial, dialogues = madial_dataset(args.data, args.limit)
        datasets.append(madial)
    if want_lme:
        datasets.extend(d for d in lme_dataset(args.lme_data, args.lme_per_type, embedder, version) if d.queries)
    if want_mb:
        datasets.append(memorybank_dataset(args.mb_data, embedder, version, args.mb_users))
    if want_mbsaid:
        datasets.append(memorybank_dataset(args.mb_data, embedder, version, args.mb_users, said=True))
    if want_mbwrong:
        datasets.append(
            memorybank_dataset(args.mb_data, embedder, version, args.mb_users, said=True, wrong_person=True)
        )
    if want_mbsaid1:
        datasets.append(memorybank_dataset(args.mb_data, embedder, version, args.mb_users, said=True, one_tenant=True))
    print(f"  tenants ready in {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    # What a tenant's read gets (settings, then the tenant's policy: every bench
    # tenant has the default policy), then the command line's overrides.
    from memory.selectors.memories import retrieval_params

    first = datasets[0].queries[0].caller if datasets and datasets[0].queries else None
    base = retrieval_params(first) if first is not None else RetrievalParams.resolve()
    params = base.with_(**parse_overrides(args.params))

    label = f"RRF k={params.rrf_k}" if params.fusion == "rrf" else f"{params.fusion} alpha={params.alpha}"
    out = [
        f"memproj retrieval quality - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"parameters: fusion {label}, keyword scorer {params.keyword_scorer}"
        + (f" (k1={params.bm25_k1}, b={params.bm25_b})" if params.keyword_scorer == "bm25" else "")
        + f", k_vec={params.k_vec}, k_txt={params.k_txt}, embedding text {version}"
        + " (settings + the default tenant policy"
        + (f" + {' '.join(args.params)})" if args.params else ")"),
    ]
    figures: dict[str, object] = {"params": {k: str(v) for k, v in vars(params).items()}}
    if args.latency_ab is not None:
        other = params.with_(**parse_overrides(args.latency_ab))
        for ds in datasets:
            if "hybrid" in ds.modes:
                out += latency_ab(ds, params, other, " ".join(args.latency_ab))
        print("\n".join(out))
        return 0
    if args.model:
        if version != "plain":
            raise SystemExit("--model compares models on the plain episode text only: add --embed-text plain")
        for ds in datasets:
            if "semantic" in ds.modes:
                out += model_table(ds, params, args.model)
        print("\n".join(out))
        return 0
    if args.floor:
        for ds in datasets:
            if "semantic" in ds.modes:
                out += floor_table(ds, params)
        print("\n".join(out))
        return 0
    for ds in datasets:
        runs = {mode: search_runs(ds, mode, params) for mode in ds.modes}
        rows = [
            (f"memproj {MODE_LABEL[m]}" + (f" ({label})" if m == "hybrid" else ""), score_ds(ds, runs[m]))
            for m in ds.modes
        ]
        before = params.with_(**BEFORE)
        if "hybrid" in ds.modes and before != params:
            runs["hybrid-before"] = search_runs(ds, "hybrid", before)
            rows.append((f"memproj {MODE_LABEL['hybrid-before']}", score_ds(ds, runs["hybrid-before"])))
        if "hybrid" in ds.modes and params.time_boost > 0:
            runs["hybrid-no-time"] = search_runs(ds, "hybrid", params.with_(time_boost=0.0))
            rows.append((f"memproj {MODE_LABEL['hybrid-no-time']}", score_ds(ds, runs["hybrid-no-time"])))
        if ds.name.startswith("MADial"):
            from memory.selectors import memories as selectors

            recall_run = []
            for q in ds.queries:
                found = selectors.memory_recall_candidates(
                    caller=q.caller, topic=q.text, limit=20, kinds=("episode",), params=params
                )
                recall_run.append([q.id_map[item.memory.id] for item in found])
            rows.append(("memproj recall (composite)", score_ds(ds, recall_run)))
            for name, filename in AUTHORS.items():
                path = args.data / "authors_retrieval_outputs_en" / filename
                if not path.exists():
                    continue
                lists = read_jsonl(path)[: len(dialogues)]
                for d, entry in zip(dialogues, lists, strict=True):
                    if sorted(entry["relevant-id"]) != sorted(d["relevant-id"]):
                        raise SystemExit(f"{filename}: line order differs from the dialogue file")
                rows.append((f"authors: {name}", score_ds(ds, [e["top-20-ids"] for e in lists])))
        out += ["", f"{ds.name} - {len(ds.queries)} queries - Recall@k and nDCG@k", ds_table(ds, rows)]
        if ds.name.startswith("MADial"):
            out += dialect_table(madial_corpus(args.data, dialogues), 20)
        elif ds.name.startswith("MemoryBank (en"):
            out += dialect_table(memorybank_corpus(args.mb_data, args.mb_users), 20)
        elif "embedded" in ds.name and args.dialects_lme_per_type:
            out += dialect_table(lme_corpus(args.lme_data, args.dialects_lme_per_type), 20)
        if ds.sessions:
            out.append("(R/nDCG: turn level; S-: session level, ranked turns mapped to their sessions)")
        if "hybrid" in ds.modes:
            figs = dict(rows)
            hyb = figs[rows[2][0]]
            out += never_below(ds, runs, hyb, figs, rows)
        if len({q.category for q in ds.queries}) > 1:
            out += ["", f"{ds.name} per question type", category_table(ds, runs)]
        if "hybrid-no-time" in runs:
            out += time_table(ds, runs)
        figures[ds.name] = {
            "main": dict(rows),
            "per_question": {mode: per_question(ds, run) for mode, run in runs.items()},
        }
        if args.no_sweep:
            continue
        out += sweeps(ds, params, scoring, figures, tiny=args.tiny)

    print("\n".join(out))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


def latency_ab(ds: DataSet, params, other, label: str, rounds: int = 3) -> list[str]:  # type: ignore[no-untyped-def]
    """memory_search's wall time per question (hybrid, the set's depth) with
    ``params`` and with ``other``, interleaved (each round alternates which
    goes first), so the shared machine's load falls on both alike."""
    from memory.selectors import memories as selectors

    times: dict[str, list[float]] = {"A": [], "B": []}
    for round_no in range(rounds):
        for q in ds.queries:
            pair = [("A", params), ("B", other)]
            for name, p in pair if round_no % 2 == 0 else pair[::-1]:
                with asked_at(q.now):
                    start = time.perf_counter()
                    selectors.memory_search(
                        caller=q.caller,
                        query=selectors.SearchQuery(q.text, limit=ds.depth, types=["episode"], params=p),
                    )
                    times[name].append((time.perf_counter() - start) * 1000)
    rows = [
        [name, len(v), f"{_common.percentile(v, 50):.2f}", f"{_common.percentile(v, 95):.2f}"]
        for name, v in (("A: the parameters", times["A"]), (f"B: with {label}", times["B"]))
    ]
    ratio = _common.percentile(times["A"], 50) / max(1e-9, _common.percentile(times["B"], 50))
    return [
        "",
        f"{ds.name}: memory_search time per question, interleaved A/B, {rounds} rounds (median A / B = {ratio:.2f})",
        _common.table(["run", "searches", "median ms", "p95 ms"], rows),
    ]


def sweeps(ds: DataSet, params, scoring, figures: dict, tiny: bool = False) -> list[str]:  # type: ignore[no-untyped-def]
    out: list[str] = []
    scorers = [("cover_density", params.with_(keyword_scorer="cover_density"))]
    for k1, b in ((1.2, 0.75),) if tiny else ((0.9, 0.4), (1.2, 0.75), (1.5, 0.75), (1.2, 0.3), (2.0, 0.75)):
        scorers.append((f"bm25 k1={k1} b={b}", params.with_(keyword_scorer="bm25", bm25_k1=k1, bm25_b=b)))
    scorer_rows = []
    wides: dict[str, Wide] = {}
    for name, p in scorers:
        wide = wide_candidates(ds, p)
        wides[name] = wide
        scorer_rows.append((f"keyword {name}", score_ds(ds, rerank(ds, wide, p, "keyword"))))
    any_wide = next(iter(wides.values()))
    if "semantic" in ds.modes:
        scorer_rows.append(("vector", score_ds(ds, rerank(ds, any_wide, params, "semantic"))))
    out += ["", f"{ds.name}: keyword scorer (k_txt={params.k_txt})", ds_table(ds, scorer_rows, "channel")]
    figures[ds.name].update(scorer=dict(scorer_rows))
    if "hybrid" not in ds.modes:
        return out

    fusions: list[tuple[str, Any, str]] = []
    for a in (0.5, 0.65, 0.7):
        fusions.append((f"alpha={a}", params.with_(alpha=a), "alpha"))
    for a in (0.3, 0.5, 0.65, 0.8):
        fusions.append((f"norm alpha={a}", params.with_(alpha=a), "norm"))
    for how in ("minmax", "dbsf"):
        for a in (0.3, 0.5, 0.7):
            fusions.append((f"{how} alpha={a}", params.with_(alpha=a), how))
    for gain in (1.0, 2.0, 4.0):
        fusions.append((f"conf alpha={params.alpha} gain={gain}", params.with_(conf_gain=gain), "conf"))
    for k in (10, 60):
        fusions.append((f"RRF k={k}", params.with_(rrf_k=k), "rrf"))
    fusions.append(("adaptive", params, "adaptive"))
    fusion_rows = []
    per_query: dict[str, list[float]] = {}
    for scorer_name in ("cover_density", "bm25 k1=1.2 b=0.75"):
        wide = wides[scorer_name]
        base = dict(scorers)[scorer_name]
        for name, p, fusion in fusions:
            if scorer_name == "cover_density" and not name.startswith(("alpha=0.65", "norm alpha=0.65")):
                continue  # the scorer before BM25: only its old fusions, for the record
            fp = p.with_(keyword_scorer=base.keyword_scorer, bm25_k1=base.bm25_k1, bm25_b=base.bm25_b)
            run = rerank(ds, wide, fp, fusion=fusion)
            key = f"{scorer_name} + {name}"
            fusion_rows.append((key, score_ds(ds, run)))
            per_query[key] = [ndcg_at(q.gold, r, 10) for q, r in zip(ds.queries, run, strict=True) if q.gold]
    out += ["", f"{ds.name}: fusion x keyword scorer (k_vec={params.k_vec}, k_txt={params.k_txt})"]
    out.append(ds_table(ds, fusion_rows, "fusion"))
    before = f"bm25 k1=1.2 b=0.75 + conf alpha={params.alpha} gain=2.0"  # the shipped default before issue 26
    best = max(fusion_rows, key=lambda r: r[1]["nDCG@10"])[0]
    if best != before and before in per_query:
        low, mean, high = paired_bootstrap(per_query[best], per_query[before])
        out.append(
            f"best ({best}) minus the fusion before issue 26 ({before}), nDCG@10: {mean:+.3f} "
            f"(95% paired-bootstrap interval {low:+.3f} .. {high:+.3f}, {len(per_query[before])} queries)"
        )

    cap_rows = []
    wide = wides["bm25 k1=1.2 b=0.75" if params.keyword_scorer == "bm25" else "cover_density"]
    for k_vec, k_txt in ((48, 48), (96, 48), (20, 20), (48, 96), (96, 96)):
        cap_rows.append(
            (f"k_vec={k_vec} k_txt={k_txt}", score_ds(ds, rerank(ds, wide, params.with_(k_vec=k_vec, k_txt=k_txt))))
        )
    out += ["", f"{ds.name}: channel depth ({params.fusion})", ds_table(ds, cap_rows, "k_vec/k_txt")]
    figures[ds.name].update(scorer=dict(scorer_rows), fusion=dict(fusion_rows), depth=dict(cap_rows))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
