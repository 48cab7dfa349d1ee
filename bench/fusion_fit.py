"""Fit the hybrid fusion across development sets, never on one: leave-one-set-out.

    nice -n 10 .venv/bin/python bench/fusion_fit.py                 # MADial, LongMemEval (embedded), MemoryBank
    nice -n 10 .venv/bin/python bench/fusion_fit.py --lme-per-type 3 --trials 3000

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
    return p.parse_args(argv)


def candidates(args: argparse.Namespace) -> dict[str, tuple[quality.DataSet, quality.Wide]]:
    """Per set: the queries and their candidates at the service's channel depths."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"wide-lme{args.lme_per_type}.pickle"
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
    from memory.scoring import has_evidence

    params = retrieval_params(madial.queries[0].caller)
    out = {}
    for ds in sets:
        wide = quality.wide_candidates(ds, params)
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


if __name__ == "__main__":
    raise SystemExit(main())
