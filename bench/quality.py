"""Retrieval quality on MADial-Bench (memory recall, English): Recall@k and
nDCG@k of keyword-only, vector-only and hybrid retrieval through the real
``memory_search``, the authors' published top-20 lists scored the same way,
and sweeps of the fusion and composite-weight constants.

    .venv/bin/python bench/quality.py            # full run (160 dialogues)
    .venv/bin/python bench/quality.py --tiny     # smoke test (20 dialogues, short sweeps)

Data: ../shared/bench-data/madial (MIT), or MEMPROJ_MADIAL_DIR. Each of the two
users' memory archives (76 and 84 memories) goes into its own tenant through
``episode_store``; the query for a dialogue is the dialogue up to its test turn
(the authors' formulation), answered inside that user's tenant only, as the
authors restricted candidates to the user's own archive.

Metrics: Recall@k = |top-k & gold| / |gold|; nDCG@k with binary gains and the
ideal DCG of min(|gold|, k) hits (the standard definition; the authors' script
normalises by the hits it retrieved, which reads higher).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

KS = (1, 5, 10, 20)
DATA_VERSION = "v1"
DEFAULT_DATA = _common.BASE_DIR.parent / "shared" / "bench-data" / "madial"
AUTHORS = {
    "bge-m3": "bge_m3_top_20.json",
    "gte": "gte_top_20.json",
    "jina": "jina_top_20.json",
    "openai": "openai_top_20_bottom.json",
}
DIALOGUE_TIME = datetime(2024, 6, 16, tzinfo=UTC)  # the '<Time>' the authors put on every dialogue


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path(os.environ.get("MEMPROJ_MADIAL_DIR", DEFAULT_DATA)))
    p.add_argument("--limit", type=int, default=0, help="only the first N dialogues (0 = all)")
    p.add_argument("--no-sweep", action="store_true", help="skip the fusion and weight sweeps")
    p.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    p.add_argument("--tiny", action="store_true", help="smoke-test size")
    args = p.parse_args(argv)
    if args.tiny:
        args.limit = args.limit or 20
    return args


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# --------------------------------------------------------------------------- metrics


def recall_at(gold: set[int], ranked: Sequence[int], k: int) -> float:
    return len(gold & set(ranked[:k])) / len(gold) if gold else 0.0


def ndcg_at(gold: set[int], ranked: Sequence[int], k: int) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, item in enumerate(ranked[:k]) if item in gold)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(gold), k)))
    return dcg / ideal if ideal else 0.0


def score_run(golds: Sequence[set[int]], runs: Sequence[Sequence[int]]) -> dict[str, float]:
    out = {}
    for k in KS:
        out[f"R@{k}"] = sum(recall_at(g, r, k) for g, r in zip(golds, runs, strict=True)) / len(golds)
    for k in KS:
        out[f"nDCG@{k}"] = sum(ndcg_at(g, r, k) for g, r in zip(golds, runs, strict=True)) / len(golds)
    return out


def paired_bootstrap(a: Sequence[float], b: Sequence[float], rounds: int = 2000) -> tuple[float, float, float]:
    """2.5th percentile, mean and 97.5th percentile of mean(a - b) over resampled queries."""
    import random

    rng = random.Random(5)
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(rounds))
    return means[int(0.025 * rounds)], sum(diffs) / n, means[int(0.975 * rounds) - 1]


METRIC_COLS = [f"R@{k}" for k in KS] + [f"nDCG@{k}" for k in KS]


def metric_table(rows: list[tuple[str, dict[str, float]]], first: str = "system") -> str:
    return _common.table([first] + METRIC_COLS, [[name] + [f"{m[c]:.3f}" for c in METRIC_COLS] for name, m in rows])


# --------------------------------------------------------------------------- data


def load_madial(data_dir: Path) -> tuple[dict[int, list[dict]], list[dict]]:
    """Memories per user (lines 1-76 are Bart's, the rest Lisa's, as in the
    authors' scripts) and the dialogues."""
    memories: dict[int, list[dict]] = {1: [], 2: []}
    for line_no, record in enumerate(read_jsonl(data_dir / "data_en" / "MADial-Bench-en-memory.json")):
        ((key, value),) = record.items()
        memories[1 if line_no < 76 else 2].append(dict(value, id=int(key)))
    dialogues = read_jsonl(data_dir / "data_en" / "MADial-Bench-en-dialogue.json")
    return memories, dialogues


def ensure_tenants(memories: dict[int, list[dict]]) -> dict[int, object]:
    """One tenant per MADial user, filled through the real store service (sync
    embedding). created_at is set to the memory's own date so recency means
    something. Reused across runs when already complete."""
    from memory.models import Memory
    from memory.services.memories import episode_store
    from policy.services.tokens import token_authenticate, token_issue

    callers = {}
    for user, items in memories.items():
        issued = token_issue(tenant_slug=f"bench-madial-{DATA_VERSION}-user{user}", principal_name="bench")
        caller = token_authenticate(issued.token)
        assert caller is not None
        have = Memory.objects.filter(tenant_id=caller.tenant_id, validity="active").count()
        if have != len(items):
            Memory.objects.filter(tenant_id=caller.tenant_id).update(validity="retracted")
            for item in items:
                memory = episode_store(
                    caller=caller,
                    content=item["event"],
                    butler="madial",
                    ttl=timedelta(days=36500),
                    metadata={"madial_id": item["id"], "scene": item["scene"], "emotion": item["emotion"]},
                )
                when = datetime.fromisoformat(item["time"]).replace(tzinfo=UTC)
                Memory.objects.filter(pk=memory.pk).update(created_at=when, updated_at=when)
        callers[user] = caller
    return callers


def madial_ids(caller) -> dict[uuid.UUID, int]:  # type: ignore[no-untyped-def]
    from memory.models import Memory

    rows = Memory.objects.filter(tenant_id=caller.tenant_id, validity="active").values_list("id", "metadata")
    return {pk: int(meta["madial_id"]) for pk, meta in rows}


# --------------------------------------------------------------------------- sweeps


def ranked_by(
    candidates: list[tuple[uuid.UUID, object, datetime]], key: Callable[[object], float], id_map: dict[uuid.UUID, int]
) -> list[int]:
    """Order as memory_search does: score DESC, created_at DESC, id ASC."""
    ordered = sorted(candidates, key=lambda c: (-round(key(c[1]), 12), -c[2].timestamp(), str(c[0])))
    return [id_map[pk] for pk, _, _ in ordered][:20]


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
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not (args.data / "data_en").is_dir():
        print(f"MADial-Bench data not found in {args.data} (set --data or MEMPROJ_MADIAL_DIR)", file=sys.stderr)
        return 2
    _common.setup_django(db_name="memproj_bench_quality")
    from django.conf import settings
    from django.utils import timezone

    from memory import scoring
    from memory.embeddings import embed_one
    from memory.models import Memory
    from memory.retrieval import RetrievalFilter, channel_hits
    from memory.selectors import memories as selectors

    FUSION_LABEL = (  # noqa: N806 - a label, computed once scoring is importable
        f"alpha={settings.MEMPROJ['FUSION_ALPHA']}"
        if settings.MEMPROJ["FUSION"] == "alpha"
        else f"RRF k={scoring.RRF_K}"
    )

    embed_one("warm up")
    memories, dialogues = load_madial(args.data)
    if args.limit:
        dialogues = dialogues[: args.limit]
    t0 = time.perf_counter()
    callers = ensure_tenants(memories)
    id_maps = {user: madial_ids(c) for user, c in callers.items()}
    print(f"  tenants ready in {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)

    queries = [("".join(d["dialogue"][: d["test-turn"][0]]), d["user-id"], set(d["relevant-id"])) for d in dialogues]
    golds = [g for _, _, g in queries]

    # 1. The real read path: memory_search in each mode.
    main_rows: list[tuple[str, dict[str, float]]] = []
    runs: dict[str, list[list[int]]] = {}
    for mode in ("keyword", "semantic", "hybrid"):
        run = []
        for text, user, _ in queries:
            found = selectors.memory_search(caller=callers[user], query=text, mode=mode, limit=20, types=["episode"])
            run.append([id_maps[user][item.memory.id] for item in found])
        runs[mode] = run
        label = {
            "keyword": "memproj keyword-only (tsvector)",
            "semantic": "memproj vector-only (MiniLM-L6)",
            "hybrid": f"memproj hybrid ({FUSION_LABEL})",
        }[mode]
        main_rows.append((label, score_run(golds, run)))
    # Recall path (composite score), episodes only since MADial memories are episodes.
    run = []
    for text, user, _ in queries:
        found = selectors.memory_recall_candidates(caller=callers[user], topic=text, limit=20, kinds=("episode",))
        run.append([id_maps[user][item.memory.id] for item in found])
    main_rows.append(("memproj recall (composite)", score_run(golds, run)))

    # 2. The authors' top-20 lists, scored identically (same dialogues, same gold).
    ref_rows = []
    for name, filename in AUTHORS.items():
        path = args.data / "authors_retrieval_outputs_en" / filename
        if not path.exists():
            continue
        lists = read_jsonl(path)[: len(dialogues)]
        for d, entry in zip(dialogues, lists, strict=True):
            if sorted(entry["relevant-id"]) != sorted(d["relevant-id"]):
                raise SystemExit(f"{filename}: line order differs from the dialogue file")
        ref_rows.append((f"authors: {name}", score_run(golds, [e["top-20-ids"] for e in lists])))

    out = [
        f"memproj retrieval quality - MADial-Bench (en) memory recall - {len(queries)} dialogues - "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
    ]
    out.append("Recall@k and nDCG@k")
    out.append(metric_table(main_rows + ref_rows))

    figures: dict[str, object] = {"main": dict(main_rows + ref_rows)}
    if not args.no_sweep:
        # 3. Sweeps over the same candidates: one wide query per channel, then
        # each fusion variant re-ranks offline with memory.scoring's formulas.
        wide = []
        for text, user, _ in queries:
            caller = callers[user]
            flt = RetrievalFilter(kinds=["episode"], now=timezone.now())
            hits = channel_hits(
                caller=caller, flt=flt, query_text=text, query_vector=embed_one(text), k_vec=500, k_txt=500
            )
            created = dict(Memory.objects.filter(pk__in=list(hits)).values_list("id", "created_at"))
            wide.append(([(pk, hit, created[pk]) for pk, hit in hits.items()], id_maps[user]))

        def sweep(key_for: Callable[[object], float], cap: tuple[int, int] | None = None) -> dict[str, float]:
            run = []
            for cands, id_map in wide:
                if cap:
                    cands = [(pk, capped(h, *cap), c) for pk, h, c in cands]
                    cands = [x for x in cands if x[1].vector_rank is not None or x[1].text_rank is not None]
                run.append(ranked_by(cands, key_for, id_map))
            last_run[:] = run
            return score_run(golds, run)

        last_run: list[list[int]] = []

        fusion_rows = []
        check = sweep(scoring.fuse, (selectors.DEFAULT_K_VEC, selectors.DEFAULT_K_TXT))
        if abs(check["nDCG@10"] - dict(main_rows)[f"memproj hybrid ({FUSION_LABEL})"]["nDCG@10"]) > 1e-9:
            print("  note: offline RRF does not reproduce memory_search exactly", file=sys.stderr)
        for k in (1, 10, 30, 60, 100):
            fusion_rows.append((f"RRF k={k}", sweep(lambda h, k=k: scoring.fuse_rrf(h, k))))
        for alpha in (0.3, 0.5, 0.7, 0.8, 0.9, 1.0):
            fusion_rows.append((f"alpha={alpha}", sweep(lambda h, a=alpha: scoring.fuse_alpha(h, a))))
        out += ["", "Fusion (same candidates, k_vec=k_txt=all)", metric_table(fusion_rows, "fusion")]
        # Is the best alpha blend's gain over RRF more than noise? Paired bootstrap over dialogues.
        best = max((r for r in fusion_rows if r[0].startswith("alpha")), key=lambda r: r[1]["nDCG@10"])
        alpha_best = float(best[0].split("=")[1])
        sweep(lambda h: scoring.fuse_alpha(h, alpha_best))
        per_alpha = [ndcg_at(g, r, 10) for g, r in zip(golds, last_run, strict=True)]
        sweep(lambda h: scoring.fuse_rrf(h, scoring.RRF_K))
        per_rrf = [ndcg_at(g, r, 10) for g, r in zip(golds, last_run, strict=True)]
        low, mean, high = paired_bootstrap(per_alpha, per_rrf)
        out.append(
            f"{best[0]} minus RRF k={scoring.RRF_K}, nDCG@10: {mean:+.3f} "
            f"(95% paired-bootstrap interval {low:+.3f} .. {high:+.3f}, {len(golds)} dialogues)"
        )

        cap_rows = []
        for cap in (
            (selectors.DEFAULT_K_VEC, selectors.DEFAULT_K_TXT),
            (96, 48),
            (10, 10),
            (20, 20),
            (40, 20),
            (20, 40),
            (40, 40),
            (20, 5),
            (5, 20),
        ):
            cap_rows.append((f"k_vec={cap[0]} k_txt={cap[1]}", sweep(scoring.fuse, cap)))
        out += [
            "",
            f"Channel depth ({FUSION_LABEL}; a tenant here holds 76 or 84 memories)",
            metric_table(cap_rows, "k_vec/k_txt"),
        ]

        # Composite weights (recall). MADial memories carry no importance or
        # confidence signal (all equal), so only relevance vs recency moves the
        # order; "now" is the dialogues' own date so recency is meaningful.
        weight_rows = []
        weight_sets = {
            "default " + "/".join(f"{v:g}" for v in scoring.RECALL_WEIGHTS.values()): dict(scoring.RECALL_WEIGHTS),
            "relevance only 1/0/0/0": {"relevance": 1.0, "importance": 0.0, "recency": 0.0, "confidence": 0.0},
            "before issue 5 0.5/0.15/0.15/0.2": {
                "relevance": 0.5,
                "importance": 0.15,
                "recency": 0.15,
                "confidence": 0.2,
            },
            "0.7/0.1/0.05/0.15": {"relevance": 0.7, "importance": 0.1, "recency": 0.05, "confidence": 0.15},
            "0.4/0.15/0.25/0.2": {"relevance": 0.4, "importance": 0.15, "recency": 0.25, "confidence": 0.2},
        }
        for label, weights in weight_sets.items():

            def composite(h, when, w=weights) -> float:  # type: ignore[no-untyped-def]
                return (
                    w["relevance"] * scoring.fuse(h)
                    + w["importance"] * 0.5
                    + w["recency"] * scoring.recency(when, DIALOGUE_TIME)
                    + w["confidence"] * 1.0
                )

            run = []
            for cands, id_map in wide:
                scored = [(pk, composite(h, c), c) for pk, h, c in cands]
                run.append(ranked_by([(pk, s, c) for pk, s, c in scored], lambda s: s, id_map))
            weight_rows.append((label, score_run(golds, run)))
        out += [
            "",
            "Recall composite weights relevance/importance/recency/confidence (now = dialogue date)",
            metric_table(weight_rows, "weights"),
        ]
        figures.update(fusion=dict(fusion_rows), depth=dict(cap_rows), weights=dict(weight_rows))

    out += [
        "",
        "Other public conversational-memory retrieval sets: none available offline with a permissive "
        "license (LoCoMo is CC BY-NC; LongMemEval is MIT but only downloadable from a hub at run time).",
    ]
    print("\n".join(out))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
