"""Runs LangGraph's own stores on the same items and filters as
test_langmem_nested_filter: InMemoryStore (langgraph-checkpoint, in .venv) and
PostgresStore (langgraph-checkpoint-postgres, in .venv-import), the latter in a
schema of its own that it drops again. Reads ``{"conninfo", "schema", "items":
[[key, value], ...], "filters": [...]}`` as JSON on stdin; prints, for each
store, one answer per filter: the sorted keys found, or ``{"error": "<Type>:
<message>"}``."""

from __future__ import annotations

import json
import sys
from typing import Any

NAMESPACE = ("memories", "u-1")


def answers(store: Any, filters: list[dict[str, Any]]) -> list[Any]:
    out: list[Any] = []
    for flt in filters:
        try:
            found = store.search(NAMESPACE, filter=flt, limit=100)
        except Exception as exc:  # every refusal, as the caller would see it
            out.append({"error": f"{type(exc).__name__}: {exc}"})
        else:
            out.append(sorted(item.key for item in found))
    return out


def main() -> None:
    import psycopg
    from langgraph.store.memory import InMemoryStore
    from langgraph.store.postgres import PostgresStore
    from psycopg.conninfo import make_conninfo

    spec = json.load(sys.stdin)
    items, filters, schema = spec["items"], spec["filters"], spec["schema"]

    memory = InMemoryStore()
    for key, value in items:
        memory.put(NAMESPACE, key, value)
    result = {"memory": answers(memory, filters)}

    with psycopg.connect(spec["conninfo"], autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            conninfo = make_conninfo(spec["conninfo"], options=f"-c search_path={schema}")
            with PostgresStore.from_conn_string(conninfo) as store:
                store.setup()
                for key, value in items:
                    store.put(NAMESPACE, key, value)
                result["postgres"] = answers(store, filters)
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    print(json.dumps(result))


if __name__ == "__main__":
    main()
