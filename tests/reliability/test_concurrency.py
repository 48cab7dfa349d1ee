"""Contention in one tenant, on a real `make run`-style stack (uvicorn, a
Celery worker and beat, embedded PostgreSQL and Redis of its own): 32 writers
over MCP HTTP, restating facts (the worker merges them), writing near-identical
facts that differ in a date, keyed facts sharing a subject+predicate, rules and
episodes, with four readers whose reads write access bookkeeping, while every
beat sweep runs each minute and the drain sweep races the worker. No write
may be answered with an error, PostgreSQL may abort no transaction as a
deadlock victim, and every acknowledged write must be found by a search for
its own text (or be a keyed fact its newer write replaced)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.load.contention import CONTENTION_ENV, contention_scenario
from tests.harness.stack import Stack, private_stack
from tests.harness.tenants import FAULT_RATE_LIMIT

pytestmark = pytest.mark.slow

# Long enough for the beat's minute tick to fall inside the run.
WRITERS, SECONDS, DRAIN = 32, 65.0, 240.0


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with private_stack("mp-ct-", env_overrides=CONTENTION_ENV) as running:
        yield running


def test_32_writers_with_worker_and_beat_no_deadlock_no_error_nothing_hidden(stack):
    token = stack.issue_token("contention", "agent", rate_limit=FAULT_RATE_LIMIT)
    report = contention_scenario(stack, token, writers=WRITERS, seconds=SECONDS, drain=DRAIN)
    print(report)
    assert report.accepted >= WRITERS * 4, report
    assert report.error_answers == 0 and report.read_errors == 0, (f"deadlocks: {report.deadlocks}", report.samples)
    assert report.reads > 0, report
    assert report.deadlocks == 0, report
    assert report.follow_ups_pending == 0, report
    assert (report.lost, report.unsearchable) == (0, 0), report.samples
    # The run did exercise what it is about: merges, left-open near-duplicates, keyed supersession.
    assert report.merged > 0 and report.open_candidates > 0 and report.replaced_by_key > 0, report
    assert stack.child("beat") is not None
