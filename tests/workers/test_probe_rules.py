"""The worker's duplicate merge and rules' maturity: a rule proven harmful
(anti-pattern: the context renders it "AVOID (proven harmful)") that an agent
restates must not be merged into the fresh candidate copy, which would turn
the warning into a recommendation and drop its outcome record."""

from __future__ import annotations

import pytest

from memory.models import ConflictCandidate, Kind, Maturity, Memory, Validity
from memory.services.feedback import memory_feedback
from memory.services.memories import rule_store
from tests.conftest import make_identity
from tests.workers.conftest import in_flight, wait_until

pytestmark = pytest.mark.worker

RULE = "Always run database migrations during business hours"


def test_a_restated_anti_pattern_is_not_merged_into_the_fresh_copy(start_worker, broker_queue):
    member = make_identity("tenant-a", "member")
    harmful = rule_store(caller=member.caller, content=RULE)
    for _ in range(3):
        memory_feedback(caller=member.caller, memory_id=harmful.pk, signal="harmful", kinds=[Kind.RULE])
    assert Memory.objects.get(pk=harmful.pk).maturity == Maturity.ANTI_PATTERN

    worker = start_worker()
    restated = rule_store(caller=member.caller, content=RULE + ".")  # the same statement, a final full stop aside
    wait_until(lambda: not in_flight(broker_queue), what="the conflict checks", worker=worker)
    wait_until(
        lambda: (
            ConflictCandidate.objects.filter(memory=restated).exists()
            or Memory.objects.get(pk=harmful.pk).validity != Validity.ACTIVE
        ),
        what="the restatement's check",
        worker=worker,
    )
    row = Memory.objects.get(pk=harmful.pk)
    assert (row.validity, row.maturity) == (Validity.ACTIVE, Maturity.ANTI_PATTERN)
    # Left for review instead, as anything short of the same statement found alike is.
    assert ConflictCandidate.objects.filter(memory=restated, other=harmful, status="open").exists()
