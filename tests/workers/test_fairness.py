"""One tenant's bulk write must not hold up another tenant's next store: with
the real worker and broker, a single write's follow-up queued behind an
import's thousands is still taken first."""

from __future__ import annotations

import random

import pytest
from django.db import transaction

from memory import validation
from memory.models import EMBEDDING_DIM, EmbeddingStatus, FollowUp, FollowUpKind, Kind, Memory
from memory.services.memories import memories_insert, memories_new
from tests.conftest import make_identity
from tests.workers.conftest import wait_until

pytestmark = pytest.mark.worker
IMPORTED = 40


def facts_with_vectors(caller, texts: list[str]) -> list[Memory]:
    """Facts as an import writes them: with their own vectors, so each needs only its conflict check."""
    rows = []
    for text in texts:
        vector = [random.gauss(0, 1) for _ in range(EMBEDDING_DIM)]
        norm = sum(v * v for v in vector) ** 0.5
        rows.append(
            Memory(
                tenant_id=caller.tenant_id,
                principal_id=caller.principal_id,
                kind=Kind.FACT,
                content=text,
                content_hash=validation.content_hash(text),
                butler="general",
                embedding=[v / norm for v in vector],
                embedding_model="all-MiniLM-L6-v2",
                embedding_status=EmbeddingStatus.READY,
            )
        )
    with transaction.atomic():
        memories_insert(caller=caller, new=memories_new(caller=caller, rows=rows))
    return rows


def test_a_single_write_is_checked_before_another_tenants_import_backlog(start_worker):
    importer = make_identity("tenant-bulk", "importer").caller
    writer = make_identity("tenant-live", "writer").caller
    # Queued first: the import's checks; then one store of another tenant.
    imported = facts_with_vectors(importer, [f"Imported fact number {n} about the archive" for n in range(IMPORTED)])
    [single] = facts_with_vectors(writer, ["The live agent prefers tabs over spaces"])
    checks = FollowUp.objects.filter(kind=FollowUpKind.CONFLICT_CHECK)
    assert checks.filter(done_at__isnull=True).count() == IMPORTED + 1

    worker = start_worker()
    wait_until(
        lambda: not checks.filter(done_at__isnull=True).exists(), what="every conflict check done", worker=worker
    )
    done = {pk: at for pk, at in checks.values_list("memory_id", "done_at") if at is not None}
    single_done = done[single.pk]
    imported_done = sorted(done[row.pk] for row in imported)
    # The worker took the single write's check first, not after the 40 queued before it.
    assert single_done < imported_done[0], (single_done, imported_done[:3])
