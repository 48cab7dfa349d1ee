"""Fit the hybrid fusion across development sets, never on one: leave-one-set-out.

    nice -n 10 .venv/bin/python bench/fusion_fit.py                 # MADial, LongMemEval (embedded), MemoryBank x3
    nice -n 10 .venv/bin/python bench/fusion_fit.py --lme-per-type 3 --trials 3000
    nice -n 10 .venv/bin/python bench/fusion_fit.py --lme-per-type 6 --levers [--vector-query 0.3]

``--levers``: instead of the fit, the retrieval levers of bench/_levers.py (the
conf gain, the adaptive fusion, the neighbouring-turn pass over a grid of
(top, decay), with the grid point chosen leaving one set out) against the fusion
without the neighbour pass, per set. The vector channel embeds what the service
embeds (``retrieval.vector_query_text``); ``--vector-query SHARE`` reads the
candidates as ``vector_query_common_share`` = SHARE would (0: the question as
asked; ``SHAREnames``: capitalised words only, an experiment).

Each set's candidates are read once through the real channels (``channel_hits``,
both channels at the service's depths) and re-ranked offline for every
candidate fusion, as ``memory_search`` orders them (score, then created_at, id).
A fusion is scored per set against the better single channel at R@1, R@5 and
R@10 ("never loses"); the fit maximises the summed margins with losses weighed
ten times, on all sets but one, and reports the held-out set. The channels'
own runs and the fused one are the same candidates, so a margin is the fusion's
doing alone. Prints, per held-out set, the fitted weights and the margins with
paired-bootstrap intervals.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
import _embcache  # noqa: E402
import quality  # noqa: E402

KS = (1, 5, 10)
CACHE = _common.VAR_BENCH / "fusion_fit"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lme-per-type", type=int, default=3)
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument(
        "--features",
        default="bias,coverage,vec_gap,txt_gap,agree,vec_top",
        help="the features the fit may weigh (the others keep weight 0)",
    )
    p.add_argument("--fresh", action="store_true", help="read the candidates again (else the pickled ones)")
    p.add_argument(
        "--vector-query",
        default="",
        help="the vector channel embeds the question without the words in more than this share of the"
        " tenant's memories (bench/_levers.py without_common_words; 0: the question as asked; '0.25names': only"
        " capitalised words; empty: as the service embeds it)",
    )
    p.add_argument(
        "--levers",
        action="store_true",
        help="instead of the fit: the retrieval levers of bench/_levers.py against the default fusion, per set",
    )
    return p.parse_args(argv)


def candidates(args: argparse.Namespace) -> dict[str, tuple[quality.DataSet, quality.Wide]]:
    """Per set: the queries and their candidates at the service's channel depths."""
    CACHE.mkdir(parents=True, exist_ok=True)
    suffix = f"-common{args.vector_query}" if args.vector_query else ""
    share, names_only = float(args.vector_query.removesuffix("names") or 0), args.vector_query.endswith("names")
    path = CACHE / f"wide-v3-lme{args.lme_per_type}{suffix}.pickle"
    if path.exists() and not args.fresh:
        with open(path, "rb") as handle:
            return pickle.load(handle)
    from memory import embedtext
    from memory.selectors.memories import retrieval_params

    embedder = _embcache.install()
    version = embedtext.text_version()
    madial, _ = quality.madial_dataset(quality.DEFAULT_DATA, 0)
    sets = [madial]
    _, lme = quality.lme_dataset(quality._longmemeval.DEFAULT_DATA, args.lme_per_type, embedder, version)
    if lme.queries:
        sets.append(lme)
    sets.append(quality.memorybank_dataset(quality._memorybank.DEFAULT_DATA, embedder, version))
    sets.append(quality.memorybank_dataset(quality._memorybank.DEFAULT_DATA, embedder, version, said=True))
    sets.append(
        quality.memorybank_dataset(quality._memorybank.DEFAULT_DATA, embedder, version, said=True, wrong_person=True)
    )
    from memory.scoring import has_evidence

    params = retrieval_params(madial.queries[0].caller)
    out = {}
    for ds in sets:
        import _levers

        wide = quality.wide_candidates(
            ds,
            params,
            (lambda q: _levers.without_common_words(q.caller, q.text, share, names_only))
            if args.vector_query
            else None,
        )
        # At the service's channel depths; plain values only (the pickle must load without a database).
        for i, (cands, q) in enumerate(wide):
            capped = [(pk, quality.capped(h, params.k_vec, params.k_txt), c) for pk, h, c in cands]
            q.caller = None
            wide[i] = ([item for item in capped if has_evidence(item[1], params.vector_floor)], q)
        out[ds.name] = (ds, wide)
    with open(path, "wb") as handle:
        pickle.dump(out, handle)
    return out


# --------------------------------------------------------------------------- fusion


@dataclass
class Prepared:
    """One query's candidates as arrays: what every trial re-ranks."""

    features: np.ndarray  # fusion_features
    only: float | None  # the vector weight when a single channel returned anything
    vec: np.ndarray  # min-max spread vector score per candidate
    txt: np.ndarray
    time_fit: np.ndarray | None
    order_key: np.ndarray  # rank of (created_at DESC, id ASC): the service's tie-breakers
    gold: np.ndarray  # bool per candidate
    n_gold: int


def prepare(wide, params, scoring) -> list[Prepared]:  # type: ignore[no-untyped-def]
    out = []
    for cands, q in wide:
        if not q.gold:
            continue
        hits = {pk: h for pk, h, _ in cands}
        keys = list(hits)
        spread = scoring.spread_channels(hits, "minmax", (params.k_vec, params.k_txt))
        has_txt = any(h.text_rank_value is not None for h in hits.values())
        has_vec = any(h.vector_similarity is not None for h in hits.values())
        created = {pk: c for pk, _, c in cands}
        ties = sorted(keys, key=lambda pk: (-created[pk].timestamp(), str(pk)))
        tie_rank = {pk: i for i, pk in enumerate(ties)}
        fits = [hits[k].time_fit for k in keys]
        out.append(
            Prepared(
                features=np.array(scoring.fusion_features(hits) if hits else [0.0] * len(scoring.FUSION_FEATURES)),
                only=None if (has_txt and has_vec) else (1.0 if has_vec else 0.0),
                vec=np.array([spread[k][0] for k in keys]),
                txt=np.array([spread[k][1] for k in keys]),
                time_fit=None if all(f is None for f in fits) else np.array([f or 0.0 for f in fits]),
                order_key=np.array([tie_rank[k] for k in keys]),
                gold=np.array([q.id_map[k] in q.gold for k in keys]),
                n_gold=len(q.gold),
            )
        )
    return out


def recalls(prepared: list[Prepared], alphas: np.ndarray, boost: float) -> np.ndarray:
    """Per query, recall at each of KS of the fused order."""
    out = np.zeros((len(prepared), len(KS)))
    for i, item in enumerate(prepared):
        if not len(item.vec):
            continue
        a = alphas[i] if item.only is None else item.only
        fused = a * item.vec + (1.0 - a) * item.txt
        if item.time_fit is not None and boost > 0:
            fused = (1.0 - boost) * fused + boost * item.time_fit
        order = np.lexsort((item.order_key, -np.round(fused, 12)))
        hits = item.gold[order]
        for j, k in enumerate(KS):
            out[i, j] = hits[:k].sum() / item.n_gold
    return out


def channel_recalls(ds, runs) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.array(
        [[quality.recall_at(q.gold, r, k) for k in KS] for q, r in zip(ds.queries, runs, strict=True) if q.gold]
    )


def alphas_for(prepared: list[Prepared], weights: np.ndarray) -> np.ndarray:
    z = np.array([p.features for p in prepared]) @ weights
    return 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))


def margin_of(mine: np.ndarray, best_channel: np.ndarray) -> np.ndarray:
    """Mean recall difference at each of KS against the better channel (per k)."""
    return mine.mean(axis=0) - best_channel


def objective(all_margins: Sequence[np.ndarray]) -> float:
    return float(sum((m + 10.0 * np.minimum(0.0, m)).sum() for m in all_margins))


def interval(mine: np.ndarray, theirs: np.ndarray) -> str:
    parts = []
    for j, k in enumerate(KS):
        low, mean, high = quality.paired_bootstrap(list(mine[:, j]), list(theirs[:, j]))
        parts.append(f"R@{k} {mean:+.3f} ({low:+.3f} .. {high:+.3f})")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.setup_django(db_name="memproj_bench_quality")
    from memory import scoring
    from memory.scoring import RetrievalParams

    sets = candidates(args)
    params = RetrievalParams.resolve({"alpha": 0.65, "k_vec": 96, "k_txt": 48})
    channel_runs = {
        name: {mode: quality.rerank(ds, wide, params, mode) for mode in ("keyword", "semantic", "hybrid")}
        for name, (ds, wide) in sets.items()
    }
    prepared = {name: prepare(wide, params, scoring) for name, (ds, wide) in sets.items()}
    per_channel = {
        name: {mode: channel_recalls(ds, runs) for mode, runs in channel_runs[name].items()}
        for name, (ds, _) in sets.items()
    }
    # The better single channel per set and k (what "never loses" compares against).
    best_channel = {
        name: np.maximum(per_channel[name]["keyword"].mean(axis=0), per_channel[name]["semantic"].mean(axis=0))
        for name in sets
    }
    better = {
        name: np.where(
            per_channel[name]["keyword"].mean(axis=0) >= per_channel[name]["semantic"].mean(axis=0),
            "keyword",
            "semantic",
        )
        for name in sets
    }
    if args.levers:
        print(levers(sets, params, per_channel, better))
        return 0
    rng = np.random.default_rng(26)
    low = np.array([-3.0, -8.0, -10.0, -6.0, -3.0, -8.0])
    high = np.array([3.0, 4.0, 10.0, 6.0, 3.0, 8.0])
    trials = np.vstack([np.zeros(len(low)), rng.uniform(low, high, size=(args.trials, len(low)))])
    used = np.array([f in args.features.split(",") for f in scoring.FUSION_FEATURES])
    trials = trials * used
    print(f"{len(trials)} weightings of {', '.join(scoring.FUSION_FEATURES)}; sets: {', '.join(sets)}", file=sys.stderr)
    table: list[dict[str, np.ndarray]] = []
    for i, weights in enumerate(trials):
        table.append(
            {
                name: margin_of(recalls(prep, alphas_for(prep, weights), params.time_boost), best_channel[name])
                for name, prep in prepared.items()
            }
        )
        if i % 500 == 0:
            print(f"  {i}/{len(trials)}", file=sys.stderr, flush=True)

    def show(w: np.ndarray) -> str:
        return ", ".join(f"{f}={v:+.2f}" for f, v in zip(scoring.FUSION_FEATURES, w, strict=True))

    def versus(name: str, mine: np.ndarray) -> str:
        theirs = np.column_stack([per_channel[name][better[name][j]][:, j] for j in range(len(KS))])
        return interval(mine, theirs)

    out = ["Margins over the better single channel per k (mean recall difference, 95% paired-bootstrap interval)"]
    out.append(
        "",
    )
    out.append("The fusion before issue 26 (conf):")
    for name in sets:
        out.append(f"  {name}: {versus(name, per_channel[name]['hybrid'])}")
    out += ["", "Leave one set out (weights fitted on the other sets):"]
    for held in sets:
        train = [n for n in sets if n != held]
        best = max(range(len(trials)), key=lambda i: objective([table[i][n] for n in train]))
        prep = prepared[held]
        mine = recalls(prep, alphas_for(prep, trials[best]), params.time_boost)
        out.append(f"  held out {held}: {versus(held, mine)}")
        out.append(f"    weights {show(trials[best])}")
    best = max(range(len(trials)), key=lambda i: objective(list(table[i].values())))
    out += ["", f"Fitted on all sets: {show(trials[best])}"]
    for name, prep in prepared.items():
        mine = recalls(prep, alphas_for(prep, trials[best]), params.time_boost)
        out.append(f"  {name}: {versus(name, mine)}")
    out.append(f"ADAPTIVE_WEIGHTS = ({', '.join(f'{v:.2f}' for v in trials[best])})")
    print("\n".join(out))
    return 0


def lever_variants(params):  # type: ignore[no-untyped-def]
    """(name, fusion, neighbours (top, decay, max chars) or None)."""
    import _levers

    conf = _levers.service_fusion(params.with_(fusion="conf"))
    out: list[tuple[str, Any, tuple[int, float, int] | None]] = [("conf, no neighbour pass", conf, None)]
    for gain in (3.0, 4.0):
        out.append((f"conf gain {gain:g}", _levers.service_fusion(params.with_(fusion="conf", conf_gain=gain)), None))
    out.append(("adaptive", _levers.service_fusion(params.with_(fusion="adaptive")), None))
    for top, decay, chars in NEIGHBOUR_GRID:
        short = f" turns <= {chars} chars" if chars > 0 else " hits only" if chars < 0 else ""
        out.append((f"conf + neighbours top {top} x{decay:g}{short}", conf, (top, decay, chars)))
    return out


NEIGHBOUR_GRID = [(top, decay, chars) for top in (1, 3) for decay in (0.5, 0.6, 0.7, 0.8) for chars in (0, -1)]


def item_lengths(wide) -> list[dict]:  # type: ignore[no-untyped-def]
    """Per query, the content length of every memory of its tenant, by item id."""
    from django.db.models.functions import Length

    from memory.models import Memory

    by_map: dict[int, dict] = {}
    out = []
    for _, q in wide:
        key = id(q.id_map)
        if key not in by_map:
            rows = Memory.objects.filter(pk__in=list(q.id_map)).annotate(n=Length("content")).values_list("id", "n")
            by_map[key] = {q.id_map[pk]: n for pk, n in rows}
        out.append(by_map[key])
    return out


def levers(sets, params, per_channel, better) -> str:  # type: ignore[no-untyped-def]
    """Per set and variant: R@1/5/10 and nDCG@10, the margin over the better
    single channel per k, and nDCG@10 against the default fusion (95% interval)."""
    import _levers

    rows = []
    recall_of: dict[tuple[str, str], np.ndarray] = {}  # (set, variant) -> mean R@1/5/10
    for name, (ds, wide) in sets.items():
        base_ndcg: list[float] = []
        lengths = item_lengths(wide)
        for label, fuse, neighbours in lever_variants(params):
            runs = _levers.ranked(wide, fuse, depth=ds.depth, neighbours=neighbours, lengths=lengths)
            queries = [q for _, q in wide]
            mine = np.array(
                [[quality.recall_at(q.gold, r, k) for k in KS] for q, r in zip(queries, runs, strict=True) if q.gold]
            )
            ndcg = [quality.ndcg_at(q.gold, r, 10) for q, r in zip(queries, runs, strict=True) if q.gold]
            if not base_ndcg:
                base_ndcg = ndcg
            margins = mine.mean(axis=0) - np.array(
                [per_channel[name][better[name][j]][:, j].mean() for j in range(len(KS))]
            )
            recall_of[name, label] = mine.mean(axis=0)
            low, mean, high = quality.paired_bootstrap(ndcg, base_ndcg)
            rows.append(
                [name[:24], label]
                + [f"{v:.3f}" for v in mine.mean(axis=0)]
                + [f"{np.mean(ndcg):.3f}"]
                + [" / ".join(f"{m:+.3f}" for m in margins)]
                + [f"{mean:+.3f} ({low:+.3f} .. {high:+.3f})"]
            )
    out = [
        _common.table(
            [
                "set",
                "variant",
                "R@1",
                "R@5",
                "R@10",
                "nDCG@10",
                "R@1/5/10 - better channel",
                "nDCG@10 - no neighbour pass (95%)",
            ],
            rows,
        )
    ]
    # The neighbour pass's (top, decay) chosen on all sets but one, scored on that one:
    # summed recall gains over the default, losses weighed ten times (as the fit's objective).
    labels = [label for label, _, neighbours in lever_variants(params) if neighbours is not None]
    default = "conf, no neighbour pass"
    out += ["", "Neighbour pass chosen leaving one set out (R@1/5/10 against no neighbour pass on the held-out set):"]
    for held in sets:
        train = [n for n in sets if n != held]
        best = max(labels, key=lambda lb: objective([recall_of[n, lb] - recall_of[n, default] for n in train]))
        delta = recall_of[held, best] - recall_of[held, default]
        out.append(f"  held out {held}: {best}: " + " / ".join(f"{d:+.3f}" for d in delta))
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
