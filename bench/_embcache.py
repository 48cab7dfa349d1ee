"""A disk cache of embeddings for the benchmark corpora, keyed by model + text.

The real MiniLM on two shared cores needs tens of minutes for the ~55k distinct
LongMemEval turns; tuning runs re-embed the same texts, so the quality
benchmark wraps the process-wide embedder (through ``memory.embeddings``'
``set_embedder`` seam) with this cache. Vectors are exactly the model's output
(float32), so a cached run scores as an uncached one.

Storage: one SQLite file per model under var/bench/embcache/ (stdlib, safe to
write from one warming process while another reads).
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import sys
import time
from array import array
from collections.abc import Iterable
from pathlib import Path

import _common

CACHE_DIR = _common.VAR_BENCH / "embcache"


def _key(model: str, text: str) -> bytes:
    return hashlib.sha256(model.encode() + b"\0" + text.encode()).digest()


class EmbeddingCache:
    def __init__(self, model: str, directory: Path = CACHE_DIR) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.model = model
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model)
        self._db = sqlite3.connect(directory / f"{safe}.sqlite", timeout=60, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vec (k BLOB PRIMARY KEY, v BLOB NOT NULL)")

    def get_many(self, texts: list[str]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        keys = {_key(self.model, t): t for t in texts}
        items = list(keys.items())
        for start in range(0, len(items), 500):
            chunk = items[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for k, blob in self._db.execute(f"SELECT k, v FROM vec WHERE k IN ({marks})", [k for k, _ in chunk]):
                out[keys[k]] = array("f", blob).tolist()
        return out

    def put_many(self, pairs: Iterable[tuple[str, list[float]]]) -> None:
        rows = [(_key(self.model, t), array("f", v).tobytes()) for t, v in pairs]
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO vec (k, v) VALUES (?, ?)", rows)

    def missing(self, texts: Iterable[str]) -> list[str]:
        unique = list(dict.fromkeys(texts))
        have = self.get_many(unique)
        return [t for t in unique if t not in have]


class CachedEmbedder:
    """Wraps an embedder: cached texts are served from disk, the rest embedded and stored."""

    def __init__(self, inner, cache: EmbeddingCache) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.cache = cache
        self.model_name = inner.model_name
        self.dimensions = inner.dimensions

    def embed(self, texts: list[str]) -> list[list[float]]:
        have = self.cache.get_many(texts)
        todo = [t for t in dict.fromkeys(texts) if t not in have]
        if todo:
            fresh = self.inner.embed(todo)
            self.cache.put_many(zip(todo, fresh, strict=True))
            have.update(zip(todo, fresh, strict=True))
        return [have[t] for t in texts]


def install() -> CachedEmbedder:
    """Make the process-wide embedder the cached one (after Django is set up)."""
    from memory.embeddings import get_embedder, set_embedder

    inner = get_embedder()
    if isinstance(inner, CachedEmbedder):
        return inner
    cached = CachedEmbedder(inner, EmbeddingCache(inner.model_name))
    set_embedder(cached)
    return cached


def warm(embedder: CachedEmbedder, texts: Iterable[str], batch: int = 256) -> None:
    """Embed every text not cached yet, shortest first (less padding per batch), with progress."""
    todo = sorted(embedder.cache.missing(texts), key=len)
    total = len(todo)
    t0 = time.perf_counter()
    for start in range(0, total, batch):
        chunk = todo[start : start + batch]
        embedder.cache.put_many(zip(chunk, embedder.inner.embed(chunk), strict=True))
        done = start + len(chunk)
        rate = done / max(1e-9, time.perf_counter() - t0)
        print(f"  embedded {done}/{total} ({rate:.0f}/s)", file=sys.stderr, flush=True)
