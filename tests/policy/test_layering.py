"""``policy`` sits below ``memory`` (DESIGN §5, issue 8): no module of the policy
app imports the memory app, so the policy engine can be used (and tested) by
every dialect without pulling memory in, and memory can read caller.policy."""

from __future__ import annotations

import ast
from pathlib import Path

import policy

POLICY_DIR = Path(policy.__file__).resolve().parent


def _memory_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "memory" or a.name.startswith("memory.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "memory":
            found.append(str(node.module))
    return found


def test_policy_imports_nothing_from_memory():
    offenders = {}
    for path in sorted(POLICY_DIR.rglob("*.py")):
        relative = path.relative_to(POLICY_DIR).as_posix()
        imports = _memory_imports(path)
        if imports:
            offenders[relative] = imports
    assert offenders == {}, f"policy must not import memory: {offenders}"


def test_the_check_would_see_an_import(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text("import os\nfrom memory.models import Memory\nimport memory.errors as e\n")
    assert _memory_imports(sample) == ["memory.models", "memory.errors"]
