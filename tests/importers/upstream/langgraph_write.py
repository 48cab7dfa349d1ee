"""Writes a real LangGraph PostgresStore (PyPI langgraph-checkpoint-postgres)
the way a LangMem user's agent does: LangMem's own manage_memory tool (PyPI
langmem) creating, updating and deleting memories under ("memories", "{user_id}")
for two users (the store stamps created_at / updated_at in the database). Prints
what it wrote, with the store's own timestamps, as JSON."""

from __future__ import annotations

import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conninfo", required=True)
    args = parser.parse_args()

    from langgraph.store.postgres import PostgresStore
    from langmem import create_manage_memory_tool

    written = []
    with PostgresStore.from_conn_string(args.conninfo) as store:
        store.setup()
        tool = create_manage_memory_tool(namespace=("memories", "{user_id}"), store=store)
        for n in range(24):
            user = "user-1" if n % 2 else "user-2"
            text = f"Memory {n}: prefers {['tea', 'coffee', 'juice'][n % 3]} in the {['morning', 'evening'][n % 2]}"
            config = {"configurable": {"user_id": user}}
            answer = tool.invoke({"content": text, "action": "create"}, config=config)
            key = answer.rsplit(" ", 1)[-1]
            written.append({"key": key, "user": user, "text": text, "state": "active"})
        for entry in written[:4]:
            entry["text"] += " (updated)"
            tool.invoke(
                {"content": entry["text"], "action": "update", "id": entry["key"]},
                config={"configurable": {"user_id": entry["user"]}},
            )
        for entry in written[4:6]:
            tool.invoke({"action": "delete", "id": entry["key"]}, config={"configurable": {"user_id": entry["user"]}})
            entry["state"] = "deleted"
        for entry in written:
            item = store.get(("memories", entry["user"]), entry["key"])
            if item is not None:
                entry["created_at"] = item.created_at.isoformat()
                entry["updated_at"] = item.updated_at.isoformat()
    print(json.dumps({"written": written}))


if __name__ == "__main__":
    main()
