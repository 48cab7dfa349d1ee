"""Layers point one way (issue 8): ``policy`` imports nothing from ``memory``
(so the policy engine can sit below memory and travel with the caller), and
there is no import cycle between ``memory``, ``policy``, ``workers`` and
``mcp_server``.

A static check over the source files with ``ast``: every ``import`` counts,
including the late ones inside functions and under ``TYPE_CHECKING``, because a
late import closes the same cycle at run time, only later."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("memory", "policy", "workers", "mcp_server")
# (importer, imported): dependencies that must not exist at all.
FORBIDDEN = {("policy", "memory")}

# Known violations, each being removed by a change in flight for issue 8. Empty
# this list as those changes land; test_known_violations_still_exist fails for an
# entry that is no longer needed, so the list cannot go stale.
# Follow-ups now travel through the outbox registry (workers/apps.py), so memory imports nothing from workers.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Edge:
    path: str  # relative to the repository root
    line: int
    importer: str  # top-level package of the importing file
    imported: str  # top-level package of the imported module
    module: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.module}"


def source_files() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.relative_to(ROOT).parts:
                yield path


def imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from memory import services`` names the package; that is enough for layers.
            yield node.lineno, node.module


def edges() -> list[Edge]:
    found = []
    for path in source_files():
        relative = path.relative_to(ROOT).as_posix()
        importer = relative.split("/")[0]
        for line, module in imported_modules(ast.parse(path.read_text(), filename=relative)):
            imported = module.split(".")[0]
            if imported in PACKAGES and imported != importer:
                found.append(Edge(relative, line, importer, imported, module))
    return found


def unexplained(all_edges: list[Edge]) -> list[Edge]:
    return [e for e in all_edges if (e.path, e.imported) not in KNOWN_VIOLATIONS]


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


def test_the_checker_sees_imports_and_cycles():
    tree = ast.parse("import workers.tasks\ndef f():\n    from policy.caller import Caller\n")
    assert sorted(m for _, m in imported_modules(tree)) == ["policy.caller", "workers.tasks"]
    assert find_cycle({"memory": {"policy"}, "policy": {"workers"}, "workers": {"memory"}}) == [
        "memory",
        "policy",
        "workers",
        "memory",
    ]
    assert find_cycle({"mcp_server": {"memory", "policy"}, "memory": {"policy"}}) is None


def test_policy_imports_nothing_from_memory():
    bad = [e for e in unexplained(edges()) if (e.importer, e.imported) in FORBIDDEN]
    assert not bad, "policy sits below memory and must not import it:\n" + "\n".join(map(str, bad))


def test_no_import_cycle_between_the_layers():
    all_edges = unexplained(edges())
    graph: dict[str, set[str]] = {}
    for e in all_edges:
        graph.setdefault(e.importer, set()).add(e.imported)
    cycle = find_cycle(graph)
    if cycle:
        steps = []
        for importer, imported in zip(cycle, cycle[1:], strict=False):
            example = next(e for e in all_edges if (e.importer, e.imported) == (importer, imported))
            steps.append(f"{importer} -> {imported} (e.g. {example})")
        raise AssertionError("import cycle between the layers:\n" + "\n".join(steps))


def test_known_violations_still_exist():
    present = {(e.path, e.imported) for e in edges()}
    stale = [f"{path} -> {package}" for path, package in KNOWN_VIOLATIONS if (path, package) not in present]
    assert not stale, "fixed: remove these entries from KNOWN_VIOLATIONS in tests/test_layers.py:\n" + "\n".join(stale)
