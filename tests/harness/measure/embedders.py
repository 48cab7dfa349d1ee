"""The two local embedder backends of the same model, side by side."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from tests.harness.generators import synthetic
from tests.harness.measure.timing import summary, timed
from tests.harness.reports.tables import markdown_table


def bench_embedders(repeat: int) -> str:
    """The two local backends of the same model, raw (no guard, no batcher): one
    query, a batch of 64 texts, and how far apart their vectors are."""
    import numpy as np

    from memory.embeddings import LocalEmbedder

    texts = [synthetic.memory_spec(i)["content"] for i in range(64)]
    queries = synthetic.queries(repeat + 4, seed=5)
    rows, vectors = [], {}
    for backend in ("onnx", "torch"):
        embedder = LocalEmbedder(backend=backend)
        t0 = time.perf_counter()
        embedder.embed(["load"])
        load_s = time.perf_counter() - t0
        qi = iter(range(10**9))

        def embed_one(e: LocalEmbedder = embedder, it: Iterator[int] = qi) -> object:
            return e.embed([queries[next(it) % len(queries)]])

        def embed_batch(e: LocalEmbedder = embedder) -> object:
            return e.embed(texts)

        one = timed(embed_one, repeat)
        batch = timed(embed_batch, 5, warmup=1)
        vectors[backend] = np.asarray(embedder.embed(texts + queries))
        p50, p95, _ = summary(one)
        rows.append([embedder.backend, load_s, p50, p95, 64_000.0 / statistics.median(batch)])
    a, b = vectors["onnx"], vectors["torch"]
    cosines = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    out = [
        f"Embedder backends, all-MiniLM-L6-v2 from the packaged weights - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - "
        f"{os.cpu_count()} cores - load average {os.getloadavg()[0]:.1f}",
        markdown_table(["backend", "load_s", "one_query_p50_ms", "one_query_p95_ms", "batch64_texts_per_s"], rows),
        f"cosine(ONNX, PyTorch) over {len(cosines)} texts: min {cosines.min():.6f}, mean {cosines.mean():.6f}",
    ]
    return "\n".join(out)


def bench_onnx_threads(repeat: int) -> str:
    """ONNX passes of a few texts on the calling thread against passes split
    over one stream per core: CPU per text (this process's) and wall time per pass, medians
    over ``repeat`` passes per size; what ``OnnxBackend.SMALL_PASS`` rests on."""
    from memory.embeddings import OnnxBackend, _model_dir, onnx_model_path

    model_dir = _model_dir()
    path = onnx_model_path(model_dir)
    queries = synthetic.queries(512, seed=11)
    sessions = {"1": OnnxBackend(path, model_dir, threads=1), "default": OnnxBackend(path, model_dir, threads=0)}
    for backend in sessions.values():
        backend.SMALL_PASS = 0  # every pass on the session the threads name
    rows = []
    for size in (1, 2, 4, 8):
        for threads, backend in sessions.items():
            backend.embed(queries[:size])
            cpu, wall = [], []
            for n in range(repeat):
                texts = [f"{queries[(n * size + i) % len(queries)]} {n}" for i in range(size)]
                c0, w0 = time.process_time(), time.perf_counter()
                backend.embed(texts)
                cpu.append((time.process_time() - c0) * 1000.0 / size)
                wall.append((time.perf_counter() - w0) * 1000.0)
            rows.append([size, threads, statistics.median(cpu), statistics.median(wall)])
    return "\n".join(
        [
            f"ONNX passes by threads - {os.cpu_count()} cores - load average {os.getloadavg()[0]:.1f}",
            markdown_table(["texts_per_pass", "threads", "cpu_ms_per_text_p50", "wall_ms_per_pass_p50"], rows),
        ]
    )
