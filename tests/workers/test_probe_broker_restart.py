"""A broker killed and restarted empty (no persistence) under a running
worker: the writes made while it was down answer success, and once it is back
every follow-up is done exactly once (the drain and the embedding retry sweep
pick up what the broker lost), nothing is stored twice, and every write is
found by its own text. A redis-server of this test's own, never the shared one."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from memory.models import FollowUp, FollowUpKind, Memory, MemoryEvent
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.memories import fact_store
from memproj.celery import app
from tests.conftest import make_identity
from tests.workers.conftest import _reset_amqp, wait_until
from tests.workers.test_probe_broker import _free_port
from workers import tasks

pytestmark = pytest.mark.worker

REDIS = shutil.which("redis-server")


@pytest.fixture
def restartable_broker(
    start_worker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Callable[[], None], Callable[[], None]]]:
    if REDIS is None:
        pytest.skip("redis-server is not installed")
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    processes: list[subprocess.Popen] = []

    def start() -> None:
        processes.append(
            subprocess.Popen(
                [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        client = redis.Redis(port=port, socket_timeout=1)
        for _ in range(200):
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    return
            time.sleep(0.05)
        pytest.fail("redis-server did not start")

    def kill() -> None:
        processes[-1].kill()
        processes[-1].wait(10)

    start()
    saved = app.conf.broker_url
    app.conf.broker_url = url  # type: ignore[misc]
    # Celery takes CELERY_BROKER_URL from the environment over its configuration
    # (CI's second pass sets it): without this the writes would go to that broker.
    monkeypatch.setenv("CELERY_BROKER_URL", url)
    _reset_amqp()
    try:
        yield url, kill, start
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        app.conf.broker_url = saved  # type: ignore[misc]
        _reset_amqp()


def test_broker_killed_and_restarted_empty_every_follow_up_once(start_worker, restartable_broker, settings):
    url, kill, start = restartable_broker
    settings.MEMPROJ = {**settings.MEMPROJ, "EMBED_MODE": "async"}  # the worker embeds: embed tasks, then checks
    member = make_identity("tenant-a", "member")
    worker = start_worker(
        CELERY_BROKER_URL=url,
        MEMPROJ_FOLLOWUP_GRACE_SECONDS="1",
        MEMPROJ_EMBED_RETRY_GRACE_SECONDS="1",
    )
    texts = [f"Rack r{i % 6} in row B holds the build agents." for i in range(12)]  # restatements merge
    written = [fact_store(caller=member.caller, subject=None, predicate=None, content=t).memory for t in texts[:6]]
    kill()
    written += [fact_store(caller=member.caller, subject=None, predicate=None, content=t).memory for t in texts[6:]]
    assert Memory.objects.filter(pk__in=[m.pk for m in written]).count() == 12  # all committed, all answered
    start()  # empty: whatever was queued is gone

    def settled() -> bool:
        if FollowUp.objects.filter(done_at__isnull=True).exists():
            tasks.embeddings_retry_task.delay()
            tasks.followups_drain_task.delay()
            return False
        return True

    wait_until(settled, what="every follow-up after the restart", worker=worker, timeout=150)
    time.sleep(2)  # sweeps still queued find nothing to do
    assert not FollowUp.objects.filter(done_at__isnull=True).exists()
    checks = Counter(FollowUp.objects.filter(kind=FollowUpKind.CONFLICT_CHECK).values_list("memory_id", flat=True))
    assert set(checks) == {m.pk for m in written} and set(checks.values()) == {1}, checks
    assert Memory.objects.filter(tenant_id=member.caller.tenant_id).count() == 12  # nothing stored twice
    assert all(m.embedding_status == "ready" for m in Memory.objects.filter(pk__in=[m.pk for m in written]))
    merges = Counter(MemoryEvent.objects.filter(event_type="superseded").values_list("memory_id", flat=True))
    assert set(merges.values()) <= {1}, merges
    assert len(merges) == 6  # each older restatement merged into its newer copy once
    for text in set(texts):
        hits = memory_search(caller=member.caller, query=SearchQuery(text, mode="keyword"))
        assert any(h.memory.content == text for h in hits), text
