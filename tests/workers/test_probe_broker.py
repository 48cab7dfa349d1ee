"""A broker that stops answering (frozen, or a half-open connection after a
failover or a NAT timeout) rather than refusing connections: a write still
answers promptly (it committed; the drain sweep runs its follow-up). A Redis
server of this test's own on its own port, never the shared one."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings

from memory.models import FollowUp
from memory.services.memories import fact_store
from memproj.celery import app
from tests.conftest import make_identity
from tests.workers.conftest import _reset_amqp

pytestmark = pytest.mark.worker

REDIS = shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def own_broker(transactional_db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[subprocess.Popen]:
    """A private redis-server, and this process's Celery pointed at it."""
    if REDIS is None:
        pytest.skip("redis-server is not installed")
    port = _free_port()
    process = subprocess.Popen(
        [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, socket_timeout=1)
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(redis.ConnectionError):
            if client.ping():
                break
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("redis-server did not start")
        time.sleep(0.05)
    saved = (app.conf.task_always_eager, app.conf.broker_url, app.conf.task_default_queue)
    app.conf.task_always_eager = False
    app.conf.broker_url = f"redis://127.0.0.1:{port}/0"  # type: ignore[misc]
    # Celery takes CELERY_BROKER_URL from the environment over its configuration
    # (CI's second pass sets it): without this the writes would go to that broker.
    monkeypatch.setenv("CELERY_BROKER_URL", app.conf.broker_url)
    app.conf.task_default_queue = f"probe-broker-{port}"
    _reset_amqp()
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)
        process.kill()
        process.wait(10)
        app.conf.task_always_eager, app.conf.task_default_queue = saved[0], saved[2]
        app.conf.broker_url = saved[1]  # type: ignore[misc]
        _reset_amqp()


def _timed_write(member, content: str, limit: float) -> tuple[bool, float]:  # type: ignore[no-untyped-def]
    """Store a fact in a thread: whether it answered within ``limit`` seconds."""
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        from django.db import connection

        try:
            fact_store(caller=member.caller, subject=None, predicate=None, content=content)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)
        finally:
            done.set()
            connection.close()

    started = time.monotonic()
    threading.Thread(target=write, daemon=True).start()
    answered = done.wait(limit)
    assert not errors, errors
    return answered, time.monotonic() - started


def test_a_write_answers_promptly_while_the_broker_is_frozen(own_broker):
    member = make_identity("tenant-a", "member")
    # A first write while the broker answers: the publishing connection is pooled.
    answered, _ = _timed_write(member, "The build cache lives on volume vol-0a1", 30)
    assert answered
    os.kill(own_broker.pid, signal.SIGSTOP)  # frozen: connections stay open, nothing answers
    answered, took = _timed_write(member, "The build cache moved to volume vol-0b2", 20)
    os.kill(own_broker.pid, signal.SIGCONT)
    assert answered, "the write hung on the frozen broker's enqueue"
    assert took < 15, took
    # Committed, with its follow-up recorded for the drain sweep.
    assert FollowUp.objects.filter(done_at__isnull=True).exists()
    assert settings.CELERY_BROKER_URL  # the shared broker was never touched
