"""Faults under a running load of writes against a real `make run`-style stack
(memproj.serve: uvicorn + Celery worker + beat, embedded PostgreSQL and Redis
of its own under a temporary directory, HTTP on loopback): every accepted write
is present after recovery, no committed write is answered with an error, no
retry duplicates a write, every follow-up is done. The stack embeds through a
fake OpenAI-compatible endpoint on loopback (real MiniLM vectors until told to
fail), so embedder errors, malformed JSON and hangs are injected for real.
Plus a short load run.

CI size: a few seconds of load per fault; `make reliability` runs a minute each."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.harness.faults import FakeEmbeddingEndpoint, fault_scenario
from tests.harness.load.mixed import load
from tests.harness.stack import Stack, private_stack
from tests.harness.tenants import FAULT_RATE_LIMIT

pytestmark = pytest.mark.slow

SECONDS, CLIENTS, DRAIN = 6.0, 3, 180.0


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    embedder = FakeEmbeddingEndpoint().start()
    try:
        # A breaker cooldown of 1 s instead of 30: the CI window puts three embedder
        # modes in a few seconds, and an open breaker would keep the later ones away.
        overrides = {"MEMPROJ_EMBED_BREAKER_COOLDOWN": "1"}
        with private_stack("mp-rel-", embedder=embedder, env_overrides=overrides) as running:
            yield running
    finally:
        embedder.stop()


@pytest.fixture(scope="module")
def token(stack: Stack) -> str:
    return stack.issue_token("faults", "agent", rate_limit=FAULT_RATE_LIMIT)


# Reports are given to the assertions as str(report): pytest cuts a repr, and the
# samples at its end name the write a search missed.


def test_supervisor_brings_a_killed_worker_back_and_web_keeps_serving(stack):
    web, worker = stack.child("web"), stack.child("worker")
    ready = stack.workers_ready()
    stack.kill_worker()
    deadline = time.monotonic() + 120
    while (back := stack.child("worker")) is None or back.pid == worker.pid:
        assert time.monotonic() < deadline, stack.log_tail()
        assert httpx.get(f"{stack.url}/healthz", timeout=10).status_code == 200
        time.sleep(0.5)
    assert stack.child("web").pid == web.pid
    stack.wait_for_worker(120, ready_before=ready)


def test_worker_sigkill_under_writes_loses_nothing(stack, token):
    report = fault_scenario(stack, token, "worker SIGKILL", seconds=SECONDS, clients=CLIENTS, drain=DRAIN)
    assert report.accepted > 0
    assert report.worker_back
    assert (report.lost, report.unsearchable, report.committed_but_error, report.duplicates) == (0, 0, 0, 0), str(
        report
    )
    assert report.follow_ups_pending == 0, str(report)


def test_web_sigkill_under_writes_stores_nothing_twice_and_loses_nothing(stack, token):
    """Writes in flight when the web process dies lose their answer; the client
    retries each with the same idempotency key once the supervisor's new web
    process answers: a write that had committed is replayed, not stored again."""
    report = fault_scenario(stack, token, "web SIGKILL", seconds=SECONDS, clients=CLIENTS, drain=DRAIN)
    print(report)
    assert report.accepted > 0
    assert report.error_answers > 0, report  # the fault was met: attempts lost their connection
    assert (report.lost, report.unsearchable, report.committed_but_error, report.duplicates) == (0, 0, 0, 0), str(
        report
    )
    assert report.follow_ups_pending == 0, str(report)
    assert stack.child("web") is not None


def test_broker_outage_under_writes_answers_truly_and_loses_nothing(stack, token):
    report = fault_scenario(stack, token, "broker stop/restart", seconds=SECONDS, clients=CLIENTS, drain=DRAIN)
    assert report.accepted > 0 and report.lost == 0
    assert report.committed_but_error == 0 and report.duplicates == 0, report.samples
    assert report.follow_ups_pending == 0


def test_postgres_restart_under_writes_answers_coded_errors_and_loses_nothing(stack, token):
    report = fault_scenario(stack, token, "PostgreSQL stop/restart", seconds=SECONDS, clients=CLIENTS, drain=DRAIN)
    assert report.accepted > 0 and report.lost == 0
    assert report.committed_but_error == 0 and report.duplicates == 0
    assert report.bare_http_errors == 0 and report.uncoded_errors == 0, report.samples
    assert report.follow_ups_pending == 0


def test_embedder_errors_malformed_json_and_hangs_under_writes_lose_nothing_and_reads_degrade(stack, token):
    # One fault window with the endpoint answering HTTP 500, then broken JSON /
    # wrong-sized vectors, then nothing at all (`make reliability` runs each alone).
    report = fault_scenario(stack, token, "embedder errors/malformed/hang", seconds=14, clients=CLIENTS, drain=DRAIN)
    assert report.accepted > 0
    assert report.embedded_later > 0, report  # the fault was met: writes stored without their vector
    assert report.error_answers == 0, report.samples  # an embedder failure never fails a write
    assert (report.lost, report.unsearchable, report.committed_but_error, report.duplicates) == (0, 0, 0, 0), str(
        report
    )
    assert report.fault_reads > 0 and report.fault_read_errors == 0, report.samples  # searches fall back to keyword
    assert report.follow_ups_pending == 0, report  # every pending embedding done once the endpoint answers
    # Each mode was met by real requests.
    assert stack.embedder is not None and all(stack.embedder.requests[m] > 0 for m in ("error", "malformed", "hang"))


def test_a_short_mixed_load_has_no_errors(stack, token):
    report = load(stack, [token], clients=4, seconds=4)
    assert report.calls > 0
    assert report.errors == 0, report.samples
