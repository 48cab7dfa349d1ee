"""Re-embedding in a real worker after a model change: a memory gets a new
vector, nothing else. In particular it is not conflict-checked a second time:
a duplicate merge the admin undid (*Restore*) stays undone."""

from __future__ import annotations

import pytest

from memory.models import FollowUp, FollowUpKind, Memory, Validity
from memory.services.memories import fact_store, memory_restore
from memory.services.reembedding import memories_mark_stale
from tests.conftest import make_identity
from tests.workers.conftest import in_flight, wait_until
from workers import tasks

pytestmark = pytest.mark.worker


def fresh(memory: Memory) -> Memory:
    return Memory.objects.get(pk=memory.pk)


def test_a_restored_duplicate_stays_restored_when_the_embedder_was_down_during_a_reembed(
    start_worker, fake_openai, broker_queue
):
    member = make_identity("tenant-a", "member")
    admin = make_identity("tenant-a", "owner", role="admin")
    older = fact_store(caller=member.caller, subject=None, predicate=None, content="Backups run at 02:00 UTC").memory
    newer = fact_store(caller=member.caller, subject=None, predicate=None, content="Backups run at 02:00 UTC.").memory
    worker = start_worker(MEMPROJ_EMBED_RETRY_GRACE_SECONDS="0")
    wait_until(lambda: fresh(older).validity == Validity.SUPERSEDED, what="the duplicate merge", worker=worker)
    wait_until(lambda: not in_flight(broker_queue), what="the conflict checks", worker=worker)

    # The admin decides both stay (e.g. each is referenced by its own id elsewhere).
    memory_restore(caller=admin.caller, memory_id=older.pk)
    assert fresh(older).validity == Validity.ACTIVE
    checks = FollowUp.objects.filter(kind=FollowUpKind.CONFLICT_CHECK).count()

    # The operator has every vector made again (``memories_mark_stale``, as after a
    # fixed preprocessing step or a model change). The re-embed drops them and
    # meets an embedder outage ...
    memories_mark_stale(tenant_id=member.caller.tenant_id)
    fake_openai.embed_failures = 1
    tasks.memories_reembed_task.delay()
    wait_until(lambda: not in_flight(broker_queue), what="the re-embed run", worker=worker)
    assert fresh(older).embedding_status == fresh(newer).embedding_status == "pending"
    # ... and the embedding retry sweep gives them their new vectors.
    tasks.embeddings_retry_task.delay()
    wait_until(
        lambda: fresh(older).embedding_status == "ready" and fresh(newer).embedding_status == "ready",
        what="the retry sweep",
        worker=worker,
    )
    wait_until(
        lambda: not in_flight(broker_queue) and not FollowUp.objects.filter(done_at__isnull=True).exists(),
        what="whatever followed",
        worker=worker,
    )
    assert fresh(older).embedding_model == fresh(newer).embedding_model == "all-MiniLM-L6-v2"
    assert (fresh(older).validity, fresh(newer).validity) == (Validity.ACTIVE, Validity.ACTIVE)
    assert FollowUp.objects.filter(kind=FollowUpKind.CONFLICT_CHECK).count() == checks  # no second check


def test_a_reembed_meeting_an_embedder_outage_stops_instead_of_dropping_every_vector(
    start_worker, fake_openai, broker_queue
):
    member = make_identity("tenant-a", "member")
    facts = [
        fact_store(
            caller=member.caller, subject="host", predicate=f"role {i}", content=f"Host h{i} runs the queue"
        ).memory
        for i in range(8)
    ]
    memories_mark_stale(tenant_id=member.caller.tenant_id)
    fake_openai.embed_failures = 10_000  # down for the whole run
    worker = start_worker(MEMPROJ_SWEEP_BATCH="2", MEMPROJ_SWEEP_PER_TENANT="2")
    tasks.memories_reembed_task.delay()
    wait_until(lambda: len(fake_openai.calls("/v1/embeddings")) >= 1, what="the re-embed", worker=worker)
    wait_until(lambda: not in_flight(broker_queue), what="the re-embed run", worker=worker)
    # One batch lost its (stale) vector and waits for the retry sweep; the sweep did not
    # go on dropping the vectors of every other memory while the embedder was down.
    dropped = Memory.objects.filter(pk__in=[f.pk for f in facts], embedding__isnull=True).count()
    assert dropped == 2, dropped
    assert len(fake_openai.calls("/v1/embeddings")) == 1
