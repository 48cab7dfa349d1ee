"""Extract the SQL of the butlers memory module's schema migration
(``src/butlers/modules/memory/migrations/001_memory_schema.py`` in
https://github.com/tzeusy-org/butlers, MIT licence) into
tests/importers/fixtures/butlers/001_memory_schema.sql, which
tests/importers/test_butlers.py runs to create the tables it fills.

The butlers memory module is not published on a package registry; its
migration is an Alembic revision whose ``upgrade()`` is a list of
``op.execute(sql)`` calls. This script runs that ``upgrade()`` with a stand-in
``alembic.op`` that records each statement, so the fixture is the migration's
own SQL, statement for statement, in its order.

Left out, and listed in the fixture as comments: the statements on
``public.entities``, a table of the butlers core schema that the memory
module's migration alters but does not create (an import reads none of it).

    python tests/importers/upstream/butlers_schema_extract.py \\
        /path/to/butlers/src/butlers/modules/memory/migrations/001_memory_schema.py \\
        --commit <the butlers commit the file is from>
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import types
from pathlib import Path

OUTPUT = Path(__file__).resolve().parents[1] / "fixtures" / "butlers" / "001_memory_schema.sql"
UPSTREAM = "https://github.com/tzeusy-org/butlers"
UPSTREAM_PATH = "src/butlers/modules/memory/migrations/001_memory_schema.py"
NOTICE = "Copyright (c) 2026 Tzeusy. MIT License (the butlers repository's LICENSE)."


def recorded_statements(migration: Path) -> list[str]:
    statements: list[str] = []
    op = types.ModuleType("alembic.op")
    op.execute = lambda sql, *args, **kwargs: statements.append(str(sql))  # type: ignore[attr-defined]
    alembic = types.ModuleType("alembic")
    alembic.op = op  # type: ignore[attr-defined]
    sys.modules["alembic"], sys.modules["alembic.op"] = alembic, op
    spec = importlib.util.spec_from_file_location("butlers_memory_001", migration)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.upgrade()
    return statements


def dedent(sql: str) -> str:
    lines = sql.strip("\n").splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines).strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("migration", type=Path, help=f"{UPSTREAM_PATH} of a butlers checkout")
    parser.add_argument("--commit", required=True, help="the butlers commit the file is from")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    kept: list[str] = []
    left_out: list[str] = []
    for statement in recorded_statements(args.migration):
        sql = dedent(statement)
        (left_out if "public.entities" in sql and "to_regclass('public.entities')" not in sql else kept).append(sql)
    header = [
        "-- The butlers memory module's schema, as its migration creates it.",
        f"-- Upstream: {UPSTREAM} at commit {args.commit}, {UPSTREAM_PATH} (revision mem_001).",
        f"-- {NOTICE}",
        "-- Extracted by tests/importers/upstream/butlers_schema_extract.py: each op.execute() of upgrade(), in order.",
        "-- Left out (they alter public.entities, a table of the butlers core schema the migration does not create):",
        *(f"--   {sql.splitlines()[0]} ... {sql.splitlines()[-1].strip()}" for sql in left_out),
        "",
    ]
    body = [sql if sql.endswith(";") else sql + ";" for sql in kept]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(header) + "\n" + "\n\n".join(body) + "\n", encoding="utf-8")
    print(f"{len(kept)} statements written to {args.output} ({len(left_out)} left out)")


if __name__ == "__main__":
    main()
