"""Reading py-spy's collapsed stacks (``py-spy record --format raw``): where the
web process's CPU goes, by library and by memproj function.

py-spy samples only threads the OS shows as running, which on a loaded machine
includes threads ready to run but waiting for a core: a thread just woken from
a socket read is then sampled in its wait (psycopg's ``Connection.wait``,
``selectors``). Shares are of such samples, not exactly of CPU time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

# py-spy names a file by its path under the directory it was imported from.
OWN_CODE = ("(memory/", "(policy/", "(mcp_server/", "(memproj/", "/memory/", "/policy/", "/mcp_server/", "/memproj/")
# (category, markers in a frame's "function (file:line)"), tried from the leaf
# frame up: a sample belongs to the innermost frame that matches.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("embedding (ONNX Runtime, tokenizer)", ("onnxruntime", "tokenizers", "memory/embeddings.py", "numpy")),
    ("psycopg (driver, sending, decoding rows)", ("psycopg/", "psycopg_c", "psycopg_binary")),
    ("Django ORM (query building, model rows)", ("django/db/models",)),
    ("Django db backend (cursor, connection checks)", ("django/db/backends", "django/db/utils", "django/db/__init__")),
    ("jsonschema (argument validation)", ("jsonschema", "referencing/", "rpds")),
    ("pydantic (models, serialisation)", ("pydantic",)),
    ("MCP SDK", ("(mcp/", "/mcp/", "mcp_types")),
    ("HTTP server (uvicorn, starlette, h11)", ("uvicorn", "starlette", "h11", "httptools", "sse_starlette")),
    ("redis client", ("redis/",)),
    (
        "threads and event loop (asyncio, anyio, asgiref)",
        ("asyncio", "anyio", "asgiref", "concurrent/futures", "threading.py", "selectors.py", "queue.py"),
    ),
    ("json", ("json/",)),
    ("logging", ("logging/",)),
    ("memproj's own code", OWN_CODE),
)


def read_stacks(path: Path) -> Counter[tuple[str, ...]]:
    """Collapsed stacks: each root-to-leaf tuple of frames with its sample count."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        frames, _, count = line.rpartition(" ")
        if frames and count.isdigit():
            stacks[tuple(frames.split(";"))] += int(count)
    return stacks


def by_category(stacks: Counter[tuple[str, ...]]) -> list[tuple[str, int, float]]:
    """(category, samples, share) of every sample by its innermost known frame."""
    counts: Counter[str] = Counter()
    for frames, n in stacks.items():
        category = "other"
        for frame in reversed(frames):
            found = next((name for name, markers in CATEGORIES if any(m in frame for m in markers)), None)
            if found is not None:
                category = found
                break
        counts[category] += n
    total = max(1, sum(counts.values()))
    return [(name, n, n / total) for name, n in counts.most_common()]


def own_functions(stacks: Counter[tuple[str, ...]], top: int = 25) -> list[tuple[str, int, float]]:
    """memproj's functions by inclusive samples (each counted once per sample)."""
    counts: Counter[str] = Counter()
    for frames, n in stacks.items():
        seen = {_short(f) for f in frames if any(m in f for m in OWN_CODE)}
        for name in seen:
            counts[name] += n
    total = max(1, sum(stacks.values()))
    return [(name, n, n / total) for name, n in counts.most_common(top)]


def leaf_functions(stacks: Counter[tuple[str, ...]], top: int = 25) -> list[tuple[str, int, float]]:
    """Functions by self samples (the leaf frame)."""
    counts: Counter[str] = Counter()
    for frames, n in stacks.items():
        if frames:
            counts[_short(frames[-1])] += n
    total = max(1, sum(stacks.values()))
    return [(name, n, n / total) for name, n in counts.most_common(top)]


def _short(frame: str) -> str:
    """``function (path/to/file.py:12)`` -> ``function (file.py)``; our modules keep their package path."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rstrip(')').rsplit(':', 1)[0]})"
