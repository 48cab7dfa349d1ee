"""Ingest throughput (an agent's stores through the worker path, a bulk import), against the raw embedder's."""

from __future__ import annotations

import os
import time
import uuid

from tests.harness.generators import synthetic

INGEST_BULK_BATCH = 250  # episodes per episodes_store_bulk call (an import's transaction)
INGEST_WORKERS = int(os.environ.get("MEMPROJ_WORKER_CONCURRENCY", "2"))
_TICKS = os.sysconf("SC_CLK_TCK")


def _backend_cpu() -> tuple[int, float]:
    """This thread's PostgreSQL backend and the CPU seconds it has used so far."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = int(cursor.fetchone()[0])
    return pid, _cpu_of(pid)


def _cpu_of(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:  # another host, or no /proc
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def bench_ingest(n: int, *, bulk: int = 0) -> dict:
    """Ingest throughput against the raw embedder's on the same texts in the same
    process (its batch throughput: no guard, no batcher), wall time from the
    first store to the last vector. ``bulk=0``: an agent's tool calls, one
    ``episode_store`` per memory, through the worker path as in production with
    ``MEMPROJ_EMBED_MODE=async``: the write commits without a vector and
    enqueues a job (here to an in-process queue, the broker is not measured)
    while worker threads take the queued ids in batches of up to 256 and run the
    worker's ``memory_embed_batch`` (two, as `make run` starts two worker
    processes: one embeds while the other writes). ``bulk=N``: an import as
    ``manage.py ingest_episodes`` runs it, ``episodes_store_batches`` over
    batches of N: each batch embedded before it is stored (the next one while
    one is written), each row written once with its vector; the worker threads
    run too, for anything left pending."""
    import queue
    import threading

    from django.conf import settings
    from django.db import connection

    from memory.embeddings import get_embedder
    from memory.models import EmbeddingStatus, FollowUpKind, Memory
    from memory.services.followups import followup_register, followup_transport
    from memory.services.memories import episode_store, episodes_store_batches
    from memory.services.vectors import memory_embed_batch
    from policy.services.tokens import token_authenticate, token_issue

    texts = [f"{synthetic.fresh_episode(9_000_000 + i)} (ingest {uuid.uuid4().hex[:6]})" for i in range(n)]
    embedder = get_embedder()
    raw = getattr(embedder, "inner", embedder)
    raw.embed(texts[:64])  # warm
    t0, c0 = time.perf_counter(), time.process_time()
    raw.embed(texts)
    raw_s, raw_cpu = time.perf_counter() - t0, time.process_time() - c0

    issued = token_issue(tenant_slug=f"bench-ingest-{uuid.uuid4().hex[:8]}", principal_name="bench")
    caller = token_authenticate(issued.token)
    assert caller is not None
    queued: queue.SimpleQueue[str | None] = queue.SimpleQueue()
    # The worker path: each stored memory's embed follow-up goes to this
    # process's batching worker thread instead of the broker.
    original_transport = followup_transport(FollowUpKind.EMBED)

    def enqueue(ids: list[str], bulk: bool) -> None:
        for pk in ids:
            queued.put(pk)

    followup_register(FollowUpKind.EMBED, enqueue)
    previous_mode = settings.MEMPROJ["EMBED_MODE"]
    settings.MEMPROJ["EMBED_MODE"] = "async"
    done: list[int] = []  # per batch; list.append is atomic
    backend_cpu: list[float] = []  # per thread's backend; list.append is atomic
    stored_at = [0.0]
    errors: list[BaseException] = []

    def worker() -> None:
        pid, start = _backend_cpu()
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
            backend_cpu.append(_cpu_of(pid) - start)
            connection.close()

    main_pid, main_start = _backend_cpu()
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        # As many embedding workers as `make run` starts (MEMPROJ_WORKER_CONCURRENCY, 2):
        # one embeds a batch while the other writes its vectors.
        threads = [threading.Thread(target=worker, name=f"bench-ingest-worker-{i}") for i in range(INGEST_WORKERS)]
        for thread in threads:
            thread.start()
        if bulk:
            batches = (
                [{"content": t, "butler": "general"} for t in texts[start : start + bulk]]
                for start in range(0, n, bulk)
            )
            for _rows in episodes_store_batches(caller=caller, batches=batches):
                pass
        else:
            for text in texts:
                episode_store(caller=caller, content=text, butler="general")
        stored_at[0] = time.perf_counter() - t0
        for _ in threads:
            queued.put(None)
        for thread in threads:
            thread.join()
        total_s, total_cpu = time.perf_counter() - t0, time.process_time() - c0
        backend_cpu.append(_cpu_of(main_pid) - main_start)
    finally:
        settings.MEMPROJ["EMBED_MODE"] = previous_mode
        if original_transport is not None:
            followup_register(FollowUpKind.EMBED, original_transport)
    if errors:
        raise errors[0]
    ready = Memory.objects.filter(tenant_id=caller.tenant_id, embedding_status=EmbeddingStatus.READY).count()
    assert ready == n, f"embedded {ready} of {n}"
    return {
        "n": n,
        "path": f"episodes_store_bulk x{bulk}" if bulk else "episode_store per memory",
        "raw_embedder_per_s": n / raw_s,
        "store_async_per_s": n / stored_at[0],
        "ingest_per_s": n / total_s,
        "raw_cpu_ms_per_memory": raw_cpu / n * 1000,
        "ingest_cpu_ms_per_memory": (total_cpu + sum(backend_cpu)) / n * 1000,
        "ingest_pg_cpu_ms_per_memory": sum(backend_cpu) / n * 1000,
        "cpu_ratio": raw_cpu / (total_cpu + sum(backend_cpu)),
        "backend": getattr(embedder, "backend", "?"),
    }
