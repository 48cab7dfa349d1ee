"""The documentation holds: the MkDocs site builds with --strict (a broken link
or anchor fails), the configuration page is the one generated from the settings
table and every variable the code reads has a description there, the README's
Python client is a complete script that works against a live server, and the
repository speaks of itself (no references to documents it does not contain,
no narration of who worked when)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from memproj.settings.environment import SETTINGS, all_settings
from tests.mcp_server.test_transports import http_server  # noqa: F401  (the live server fixture)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# The service's code: every environment variable it reads must be in the table.
SERVICE_PACKAGES = ("memproj", "memory", "policy", "workers", "mcp_server")


# --- the site -------------------------------------------------------------------------------------


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in ("index", "configuration", "dialects/memory", "architecture", "benchmarks"):
        assert (tmp_path / "site" / page / "index.html").exists() or (tmp_path / "site" / f"{page}.html").exists()


def test_every_page_of_docs_is_in_the_navigation() -> None:
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]

    def pages(entries: list) -> Iterator[str]:
        for entry in entries:
            for value in entry.values() if isinstance(entry, dict) else [entry]:
                yield from pages(value) if isinstance(value, list) else [value]

    listed = set(pages(nav))
    present = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert present - listed == set(), "pages missing from mkdocs.yml's nav"


def test_readme_and_benchmarks_stay_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250
    assert len((DOCS / "benchmarks.md").read_text(encoding="utf-8").splitlines()) <= 300


def test_readme_links_point_at_files_that_exist() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert missing == []


# --- configuration --------------------------------------------------------------------------------


def test_the_configuration_page_is_generated_from_the_settings_table() -> None:
    proc = subprocess.run(
        [sys.executable, "scripts/settings_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


_READERS = {
    "read",
    "os.environ.get",
    "os.getenv",
    "environ.get",
    "env",
    *(f"env.{k}" for k in ("str", "int", "float", "bool", "list", "db", "url", "json")),
}


def environment_reads() -> Iterator[tuple[str, str]]:
    """(variable, "path:line") of every read of a named environment variable in
    the service's code: the table's ``read``, ``os.environ.get`` / ``[...]``,
    ``os.getenv`` and django-environ's ``env.*``. The beat cadences are read by
    name from the beat table, one place for all of them."""
    for package in SERVICE_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            where = f"{path.relative_to(ROOT)}"
            for node in ast.walk(tree):
                key: ast.expr | None = None
                if isinstance(node, ast.Call) and ast.unparse(node.func) in _READERS and node.args:
                    key = node.args[0]
                elif (
                    isinstance(node, ast.Subscript)
                    and isinstance(node.ctx, ast.Load)
                    and ast.unparse(node.value) == "os.environ"
                ):
                    key = node.slice
                if (
                    isinstance(key, ast.Constant)
                    and isinstance(key.value, str)
                    and re.fullmatch(r"[A-Z][A-Z0-9_]+", key.value)
                ):
                    yield key.value, f"{where}:{key.lineno}"
    from workers.schedule import SCHEDULE

    for entry in SCHEDULE:
        yield entry.env_var, "workers/schedule.py (the beat table)"


def test_the_scanner_sees_every_kind_of_read(tmp_path: Path) -> None:
    tree = ast.parse(
        'read("A_X")\nos.environ.get("B_X", "1")\nos.environ["C_X"]\nenv.int("D_X", default=1)\nos.getenv("E_X")\n'
    )
    seen = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in _READERS:
            seen.add(node.args[0].value)  # type: ignore[attr-defined]
        elif isinstance(node, ast.Subscript):
            seen.add(node.slice.value)  # type: ignore[attr-defined]
    assert seen == {"A_X", "B_X", "C_X", "D_X", "E_X"}
    assert len(list(environment_reads())) > 90


def test_every_variable_the_code_reads_has_a_description() -> None:
    documented = {s.name: s for s in all_settings()}
    undocumented = sorted({f"{name} ({where})" for name, where in environment_reads() if name not in documented})
    assert undocumented == [], "add these to memproj/settings/environment.py"
    blank = [s.name for s in documented.values() if len(s.description.strip()) < 10]
    assert blank == []


def test_every_documented_variable_is_read() -> None:
    read = {name for name, _ in environment_reads()}
    assert sorted(s.name for s in SETTINGS if s.name not in read) == []


def test_each_variable_is_read_in_one_place() -> None:
    places = Counter(name for name, _ in environment_reads())
    twice = {name: [w for n, w in environment_reads() if n == name] for name, count in places.items() if count > 1}
    assert twice == {}


# --- the README's client script -----------------------------------------------------------------


def client_script(path: Path) -> str:
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)
    scripts = [b for b in blocks if "streamable_http_client" in b]
    assert len(scripts) == 1, f"{path.name}: expected one MCP SDK client script"
    return scripts[0]


def test_the_readme_client_is_a_complete_script() -> None:
    script = client_script(README)
    # compile() as a module: a top-level `await` or `async with` is a SyntaxError here.
    compile(script, "README.md", "exec")
    tree = ast.parse(script)
    assert any(isinstance(n, ast.AsyncFunctionDef) and n.name == "main" for n in tree.body)
    last = tree.body[-1]
    assert isinstance(last, ast.Expr) and ast.unparse(last) == "asyncio.run(main())"
    assert client_script(DOCS / "connecting.md") == script, "docs/connecting.md shows the same script"


def test_the_readme_client_runs_against_a_live_server(http_server: str, member) -> None:  # noqa: F811
    from memory.models import Memory

    script = client_script(README)
    assert 'URL = "http://127.0.0.1:8000/mcp/memory/"' in script and 'TOKEN = "mp_..."' in script
    script = script.replace("http://127.0.0.1:8000", http_server).replace('"mp_..."', repr(member.token))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Austin"
    fact = Memory.objects.get(tenant_id=member.caller.tenant_id, subject="user", predicate="city")
    assert fact.content == "Austin"


# --- the repository speaks of itself ----------------------------------------------------------------

# Documents outside the repository (the brief a project was started from) and
# narration of who worked when. Name the public upstream version or describe
# the behaviour instead.
FOREIGN_REFERENCES = re.compile(
    r"\bseeds?\s+0\d\d\b"
    r"|\bDESIGN(?:\.md|\s*§)"
    r"|\bCONVENTIONS(?:\.md|\s+\d)"
    r"|\bUPSTREAM\.md"
    r"|\bthis session\b"
    r"|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth)\s+session(?:'s)?\b",
    re.I,
)
SELF_TREES = (
    "memproj",
    "memory",
    "policy",
    "workers",
    "mcp_server",
    "bench",
    "tests",
    "scripts",
    "bin",
    "templates",
    "docs",
)
SELF_SUFFIXES = {".py", ".md", ".sh", ".html", ".txt", ".yml", ".yaml", ".toml", ""}


def repository_texts() -> Iterator[Path]:
    yield README
    yield ROOT / "Makefile"
    yield ROOT / "mkdocs.yml"
    for tree in SELF_TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            own = path == Path(__file__).resolve()
            if path.is_file() and path.suffix in SELF_SUFFIXES and "__pycache__" not in path.parts and not own:
                yield path


def test_the_pattern_catches_what_it_should() -> None:
    for text in (
        "seed 004's envelope",
        "Seeds 001 and 002",
        "see DESIGN.md",
        "DESIGN §3",
        "CONVENTIONS 5",
        "the fifth session's machine",
        "measured this session",
        "UPSTREAM.md",
    ):
        assert FOREIGN_REFERENCES.search(text), text
    for text in ("a session's episodes", "roampal v0.3.5", "pce-memory v0.14.0", "the design"):
        assert not FOREIGN_REFERENCES.search(text), text


def test_the_repository_speaks_of_itself() -> None:
    found = []
    for path in repository_texts():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            match = FOREIGN_REFERENCES.search(line)
            if match:
                found.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)}")
    assert found == [], f"{len(found)} references to documents outside the repository or to sessions:\n" + "\n".join(
        found
    )
