"""Layers point one way (issue 8), and nothing goes round in circles (issue 24).

- ``policy`` imports nothing from ``memory`` (so the policy engine can sit below
  memory and travel with the caller), and there is no import cycle between
  ``memory``, ``policy``, ``workers`` and ``mcp_server``;
- inside each of those apps no module imports itself back through others;
- selectors (reads) never import services (writes);
- a dialect package (``mcp_server/dialects/<name>/``) imports only the seam
  (``mcp_server.dialect``), the core's surface (``memory.api``) and its own
  package, besides the standard library and third-party packages.

A static check over the source files with ``ast``: every ``import`` counts,
including the late ones inside functions and under ``TYPE_CHECKING``, because a
late import closes the same cycle at run time, only later, and a type-only
import still couples the two modules."""

from __future__ import annotations

import ast
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("memory", "policy", "workers", "mcp_server")
# (importer, imported): dependencies between apps that must not exist at all.
FORBIDDEN = {("policy", "memory")}
# The repository's own top-level packages and scripts (everything else a module
# imports is the standard library or a third-party package).
FIRST_PARTY = {*PACKAGES, "memproj", "bench", "tests", "manage"}
DIALECTS = ROOT / "mcp_server" / "dialects"
# What a dialect may import from the repository besides its own package.
DIALECT_SEAM = ("mcp_server.dialect", "memory.api")

# Imports that break a rule below, each with the reason it is tolerated for now:
# (importing file, imported module) -> why. Every rule reads it, and
# test_allowed_violations_still_exist fails for an entry that is no longer
# needed, so the list cannot go stale. It is empty: keep it so.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    path: str  # the importing file, relative to the repository root
    line: int
    importer: str  # the importing module, e.g. "memory.services.memories"
    imported: str  # the imported module as found in the repository, else as written

    @property
    def importer_app(self) -> str:
        return self.importer.split(".")[0]

    @property
    def imported_app(self) -> str:
        return self.imported.split(".")[0]

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.imported}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of the four apps (migrations aside), by dotted name."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.relative_to(ROOT).parts:
                found[module_name(path)] = path
    return found


def resolve(name: str, known: Container[str]) -> str:
    """The longest prefix of ``name`` that is a known module (``memory.api.Caller``
    is ``memory.api``); ``name`` itself when none is (a third-party module)."""
    candidate = name
    while candidate:
        if candidate in known:
            return candidate
        candidate = candidate.rpartition(".")[0]
    return name


def imported_names(tree: ast.AST, importer: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of everything a module imports, anywhere in it.
    ``from a import b`` yields ``a.b`` (a submodule, or a name in ``a`` that
    ``resolve`` cuts back to ``a``); relative imports are made absolute."""
    package = importer if is_package else importer.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                yield node.lineno, f"{source}.{alias.name}" if alias.name != "*" else source


@cache
def imports() -> tuple[Import, ...]:
    """Every import in the apps' modules, resolved to the repository's modules."""
    known = modules()
    found = []
    for importer, path in known.items():
        relative = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), filename=relative)
        for line, name in imported_names(tree, importer, path.name == "__init__.py"):
            imported = resolve(name, known)
            if imported != importer:
                found.append(Import(relative, line, importer, imported))
    return tuple(dict.fromkeys(found))  # "from a import (b, c)" is one import of a


def unexplained(found: Iterable[Import]) -> list[Import]:
    return [i for i in found if (i.path, i.imported) not in KNOWN_VIOLATIONS]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle in a directed graph as [a, b, ..., a], or None."""
    state: dict[str, str] = {}  # "open" while on the DFS stack, "done" after

    def visit(node: str, stack: list[str]) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for following in sorted(graph.get(node, ())):
            if state.get(following) == "open":
                return stack[stack.index(following) :] + [following]
            if following not in state and (cycle := visit(following, stack)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [])):
            return cycle
    return None


def cycle_of(found: list[Import], node: Callable[[Import], tuple[str, str]]) -> str | None:
    """A cycle in the graph of ``node(import) = (importer, imported)``, each step
    shown with one import that makes it; None when there is none."""
    graph: dict[str, set[str]] = {}
    for i in found:
        importer, imported = node(i)
        graph.setdefault(importer, set()).add(imported)
    cycle = find_cycle(graph)
    if cycle is None:
        return None
    steps = []
    for importer, imported in zip(cycle, cycle[1:], strict=False):
        example = next(i for i in found if node(i) == (importer, imported))
        steps.append(f"{importer} -> {imported} ({example})")
    return "\n".join(steps)


def is_selector(module: str) -> bool:
    return "selectors" in module.split(".")


def is_service(module: str) -> bool:
    return "services" in module.split(".")


def dialect_of(module: str) -> str | None:
    """The dialect package a module belongs to ("mcp_server.dialects.pce"), or None."""
    parts = module.split(".")
    if parts[:2] == ["mcp_server", "dialects"] and len(parts) >= 3:
        return ".".join(parts[:3])
    return None


def dialect_may_import(dialect: str, imported: str) -> bool:
    top = imported.split(".")[0]
    if top not in FIRST_PARTY:
        return True  # the standard library or a third-party package
    return imported in DIALECT_SEAM or imported == dialect or imported.startswith(dialect + ".")


# --- the checker itself ---------------------------------------------------------------------


def test_the_checker_sees_every_import():
    source = (
        "import workers.tasks\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from memory.services.sweeps import SweepResult\n"
        "def f():\n"
        "    from policy.caller import Caller\n"
        "    from . import conflicts\n"
        "    from ..selectors.memories import memory_search\n"
    )
    names = sorted(n for _, n in imported_names(ast.parse(source), "memory.services.followups", False))
    assert names == [
        "memory.selectors.memories.memory_search",
        "memory.services.conflicts",
        "memory.services.sweeps.SweepResult",
        "policy.caller.Caller",
        "typing.TYPE_CHECKING",
        "workers.tasks",
    ]
    known = {"memory", "memory.api", "memory.services", "memory.services.sweeps"}
    assert resolve("memory.services.sweeps.SweepResult", known) == "memory.services.sweeps"
    assert resolve("memory.api.Caller", known) == "memory.api"
    assert resolve("memory.Kind", known) == "memory"  # "from memory import Kind": a name, not a module
    assert resolve("httpx.AsyncClient", known) == "httpx.AsyncClient"


def test_the_checker_finds_cycles():
    assert find_cycle({"memory": {"policy"}, "policy": {"workers"}, "workers": {"memory"}}) == [
        "memory",
        "policy",
        "workers",
        "memory",
    ]
    assert find_cycle({"mcp_server": {"memory", "policy"}, "memory": {"policy"}}) is None


def test_the_checker_knows_the_dialect_rule():
    pce = "mcp_server.dialects.pce"
    allowed = ["mcp_server.dialect", "memory.api", "mcp_server.dialects.pce.schemas", "json", "pydantic", "django.urls"]
    refused = ["memory.models", "mcp_server.http", "mcp_server.dialects.roampal.texts", "policy.caller", "memproj.urls"]
    assert all(dialect_may_import(pce, m) for m in allowed)
    assert not any(dialect_may_import(pce, m) for m in refused)
    assert dialect_of("mcp_server.dialects.pce.tools") == pce
    assert dialect_of("mcp_server.dialects") is None
    assert dialect_of("mcp_server.dialect") is None


def test_the_checker_reads_the_repository():
    """Not vacuous: the rules below see the modules and imports they judge."""
    found = imports()
    assert {"memory.services.memories", "memory.selectors.memories", "workers.tasks"} <= set(modules())
    assert any(i.importer == "memory.services.memories" and i.imported == "memory.models" for i in found)
    assert any(is_selector(i.importer) for i in found)
    assert {m for m in modules() if dialect_of(m)}, "no dialect package under mcp_server/dialects/"


# --- the rules ------------------------------------------------------------------------------


def test_policy_imports_nothing_from_memory():
    bad = [i for i in unexplained(imports()) if (i.importer_app, i.imported_app) in FORBIDDEN]
    assert not bad, "policy sits below memory and must not import it:\n" + "\n".join(map(str, bad))


def test_no_import_cycle_between_the_layers():
    found = [i for i in unexplained(imports()) if i.imported_app in PACKAGES and i.imported_app != i.importer_app]
    cycle = cycle_of(found, lambda i: (i.importer_app, i.imported_app))
    assert cycle is None, "import cycle between the layers:\n" + cycle


def test_no_import_cycle_inside_an_app():
    """A cycle of modules hides behind a late import (inside a function) and
    breaks as soon as someone moves it to the top; split the modules instead
    (memory/services/followups.py records what memory/services/pipeline.py runs)."""
    found = [i for i in unexplained(imports()) if i.imported in modules() and i.imported_app == i.importer_app]
    cycle = cycle_of(found, lambda i: (i.importer, i.imported))
    assert cycle is None, "import cycle inside an app:\n" + cycle


def test_selectors_import_no_services():
    """Reads never reach for writes: a selector that needs a service's helper
    means the helper is not a write (move it to the domain module or a selector)."""
    bad = [i for i in unexplained(imports()) if is_selector(i.importer) and is_service(i.imported)]
    assert not bad, "a selector imports a service:\n" + "\n".join(map(str, bad))


def test_dialects_import_only_the_seam_and_their_own_package():
    """A dialect translates; every rule lives in the core behind memory.api, and
    everything a dialect shares with the others comes through mcp_server.dialect."""
    bad = [
        i
        for i in unexplained(imports())
        if (dialect := dialect_of(i.importer)) is not None and not dialect_may_import(dialect, i.imported)
    ]
    assert not bad, f"a dialect may import only {', '.join(DIALECT_SEAM)} and its own package:\n" + "\n".join(
        map(str, bad)
    )


def test_only_the_registry_imports_the_dialects():
    """The registry is where dialects are listed: urls.py, asgi.py and the rest of
    the service find a dialect's tools and routes through it, so adding a
    dialect touches its own package and one line of the registry."""
    known = modules()
    project = []  # memproj (settings, urls, asgi) sits above the apps: read it for this rule only
    for path in sorted((ROOT / "memproj").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), filename=relative)
        for line, name in imported_names(tree, module_name(path), path.name == "__init__.py"):
            project.append(Import(relative, line, module_name(path), resolve(name, known)))
    bad = [
        i
        for i in unexplained([*imports(), *project])
        if dialect_of(i.imported) is not None and dialect_of(i.importer) is None and i.importer != "mcp_server.registry"
    ]
    assert not bad, "only mcp_server/registry.py imports a dialect package:\n" + "\n".join(map(str, bad))


def test_known_violations_still_exist():
    present = {(i.path, i.imported) for i in imports()}
    stale = [f"{path} -> {module}" for path, module in KNOWN_VIOLATIONS if (path, module) not in present]
    assert not stale, "fixed: remove these entries from KNOWN_VIOLATIONS in tests/test_layers.py:\n" + "\n".join(stale)
