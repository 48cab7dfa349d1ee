"""Bulk-ingest throughput through the worker path, against the raw embedder's."""

from __future__ import annotations

import os
import time
import uuid

from tests.harness.generators import synthetic

INGEST_BULK_BATCH = 250  # episodes per episodes_store_bulk call (an import's transaction)
INGEST_WORKERS = int(os.environ.get("MEMPROJ_WORKER_CONCURRENCY", "2"))


def bench_ingest(n: int, *, bulk: int = 0) -> dict:
    """Bulk ingest through the worker path, with the two phases overlapped as they
    are in production: a writer stores without a vector (the write commits and
    enqueues a job; here the enqueue goes to an in-process queue, the broker is
    not measured) while worker threads take the queued ids in batches of up to
    256 and run the worker's ``memory_embed_batch`` (two, as `make run` starts two
    worker processes: one embeds while the other writes). The writer stores one
    ``episode_store`` call per memory (``bulk=0``: an agent's tool calls) or
    ``episodes_store_bulk`` calls of ``bulk`` memories (an import,
    ``manage.py ingest_episodes``). Wall time from the first store to the last
    vector, against the raw embedder's batch throughput (no guard, no batcher) on
    the same texts in the same process."""
    import queue
    import threading

    from django.conf import settings
    from django.db import connection

    from memory.embeddings import get_embedder
    from memory.models import FollowUpKind
    from memory.services.followups import followup_register, followup_transport
    from memory.services.memories import episode_store, episodes_store_bulk
    from memory.services.vectors import memory_embed_batch
    from policy.services.tokens import token_authenticate, token_issue

    texts = [f"{synthetic.fresh_episode(9_000_000 + i)} (ingest {uuid.uuid4().hex[:6]})" for i in range(n)]
    embedder = get_embedder()
    raw = getattr(embedder, "inner", embedder)
    raw.embed(texts[:64])  # warm
    t0 = time.perf_counter()
    raw.embed(texts)
    raw_s = time.perf_counter() - t0

    issued = token_issue(tenant_slug=f"bench-ingest-{uuid.uuid4().hex[:8]}", principal_name="bench")
    caller = token_authenticate(issued.token)
    assert caller is not None
    queued: queue.SimpleQueue[str | None] = queue.SimpleQueue()
    # The worker path: each stored memory's embed follow-up goes to this
    # process's batching worker thread instead of the broker.
    original_transport = followup_transport(FollowUpKind.EMBED)

    def enqueue(ids: list[str]) -> None:
        for pk in ids:
            queued.put(pk)

    followup_register(FollowUpKind.EMBED, enqueue)
    previous_mode = settings.MEMPROJ["EMBED_MODE"]
    settings.MEMPROJ["EMBED_MODE"] = "async"
    done: list[int] = []  # per batch; list.append is atomic
    stored_at = [0.0]
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            finished = False
            while not finished:
                first = queued.get()
                batch = [] if first is None else [first]
                finished = first is None
                while not finished and len(batch) < 256:
                    try:
                        item = queued.get(timeout=0.05)  # a short wait lets the batch fill while stores run
                    except Exception:  # queue.Empty
                        break
                    if item is None:
                        finished = True
                    else:
                        batch.append(item)
                if batch:
                    done.append(memory_embed_batch(memory_ids=[uuid.UUID(x) for x in batch]))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    try:
        t0 = time.perf_counter()
        # As many embedding workers as `make run` starts (MEMPROJ_WORKER_CONCURRENCY, 2):
        # one embeds a batch while the other writes its vectors.
        threads = [threading.Thread(target=worker, name=f"bench-ingest-worker-{i}") for i in range(INGEST_WORKERS)]
        for thread in threads:
            thread.start()
        if bulk:
            for start in range(0, n, bulk):
                chunk = texts[start : start + bulk]
                episodes_store_bulk(caller=caller, episodes=[{"content": t, "butler": "general"} for t in chunk])
        else:
            for text in texts:
                episode_store(caller=caller, content=text, butler="general")
        stored_at[0] = time.perf_counter() - t0
        for _ in threads:
            queued.put(None)
        for thread in threads:
            thread.join()
        total_s = time.perf_counter() - t0
    finally:
        settings.MEMPROJ["EMBED_MODE"] = previous_mode
        if original_transport is not None:
            followup_register(FollowUpKind.EMBED, original_transport)
    if errors:
        raise errors[0]
    assert sum(done) == n, f"embedded {sum(done)} of {n}"
    return {
        "n": n,
        "path": f"episodes_store_bulk x{bulk}" if bulk else "episode_store per memory",
        "raw_embedder_per_s": n / raw_s,
        "store_async_per_s": n / stored_at[0],
        "ingest_per_s": n / total_s,
        "backend": getattr(embedder, "backend", "?"),
    }
