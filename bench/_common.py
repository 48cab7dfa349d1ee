"""Shared set-up for the benchmark scripts: a separate database (never the dev
database ``memproj`` nor a test database), Django, and small helpers.

The database is ``MEMPROJ_BENCH_DB`` if set (a full PostgreSQL URL), else a
``memproj_bench`` database created on the embedded server next to ``memproj``.
The quality benchmark uses ``memproj_bench_quality`` beside it (same server), so
its small tenants never share an HNSW graph with the 100k-row speed dataset.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
BENCH_DB_NAME = "memproj_bench"
VAR_BENCH = BASE_DIR / "var" / "bench"


def _bench_database_url(db_name: str = BENCH_DB_NAME) -> str:
    explicit = os.environ.get("MEMPROJ_BENCH_DB", "")
    if explicit:
        if db_name == BENCH_DB_NAME:
            return explicit
        base, _, query = explicit.partition("?")
        return base.rsplit("/", 1)[0] + "/" + db_name + ("?" + query if query else "")
    sys.path.insert(0, str(BASE_DIR))
    from memproj import embedded

    dev_url = embedded.ensure_postgres()  # starts (or finds) the embedded server

    with embedded._start_lock("postgres"):
        exists = embedded.superuser_psql(f"SELECT 1 FROM pg_database WHERE datname = '{db_name}';")
        # Like the dev database: owned by the schema owner (migrations), used as the app role.
        if "(1 row)" not in exists:
            embedded.superuser_psql(f"CREATE DATABASE {db_name} OWNER {embedded.OWNER_ROLE};")
        else:
            embedded.superuser_psql(f"ALTER DATABASE {db_name} OWNER TO {embedded.OWNER_ROLE};")
    owner_url = embedded.postgres_url(embedded.OWNER_ROLE)
    os.environ.setdefault("DATABASE_OWNER_URL", owner_url.replace(f"/{embedded.DATABASE_NAME}?", f"/{db_name}?", 1))
    return dev_url.replace(f"/{embedded.DATABASE_NAME}?", f"/{db_name}?", 1)


def setup_django(*, db_name: str = BENCH_DB_NAME, embed_mode: str = "sync") -> str:
    """Point Django at a bench database, set it up and migrate. Returns the URL."""
    url = _bench_database_url(db_name)
    if "/memproj?" in url or url.rstrip("/").endswith("/memproj") or "test_memproj" in url:
        raise SystemExit(f"refusing to benchmark against the dev or test database: {url}")
    os.environ["DATABASE_URL"] = url
    os.environ["MEMPROJ_EMBED_MODE"] = embed_mode
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    # The benchmarks measure the model, never the resilience guard: waits long enough
    # that a loaded machine cannot silently turn a hybrid search into a keyword one.
    for name in ("MEMPROJ_EMBED_QUERY_TIMEOUT", "MEMPROJ_EMBED_STORE_TIMEOUT", "MEMPROJ_EMBED_LOCAL_TIMEOUT"):
        os.environ.setdefault(name, "300")
    sys.path.insert(0, str(BASE_DIR))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    return url


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(round(q / 100.0 * len(ordered) + 0.5))))
    return ordered[rank - 1]


def timed(fn: Callable[[], object], repeat: int, warmup: int = 2) -> list[float]:
    """Milliseconds per call."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def summary(samples_ms: Sequence[float]) -> tuple[float, float, float]:
    return statistics.median(samples_ms), percentile(samples_ms, 95), max(samples_ms)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table (what docs/benchmarks.md carries)."""

    def cell(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"
        return str(value)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells]
    return "\n".join(lines)
