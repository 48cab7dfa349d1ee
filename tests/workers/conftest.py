"""Real Celery workers for the pipeline tests: a ``celery -A memproj worker``
subprocess on the real broker (the embedded Redis, or CELERY_BROKER_URL when
set), reading and writing this test run's database. Each test gets its own
queue, so concurrent test runs sharing a broker do not steal each other's
messages."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import kombu.pools
import pytest
import redis
from django.conf import settings
from django.db import connection
from kombu.transport.redis import Channel as RedisChannel

from memproj.celery import app
from tests.workers.fakes import FakeOpenAI

CELERY = Path(sys.executable).with_name("celery")
BASE_DIR = Path(settings.BASE_DIR)


def database_url() -> str:
    db = connection.settings_dict
    host = db.get("HOST") or ""
    user = db.get("USER") or "postgres"
    if host.startswith("/"):
        return f"postgres://{user}@/{db['NAME']}?host={host}"
    port = db.get("PORT") or 5432
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


def _reset_amqp() -> None:
    # Celery caches queues, routes and broker connections on first use; rebuild
    # them from the conf.
    app.__dict__.pop("amqp", None)
    # The broker connection pool is private to Celery (not in its type stubs).
    if app._pool is not None:  # type: ignore[attr-defined]
        app._pool.force_close_all()  # type: ignore[attr-defined]
        app._pool = None  # type: ignore[attr-defined]
    kombu.pools.reset()


@pytest.fixture
def broker_queue(transactional_db: None) -> Iterator[str]:
    """Tasks sent from this process go to a real broker queue of their own, under
    a key prefix of their own: a short visibility timeout in one test's worker
    must not redeliver another test run's messages (the unacked set is per prefix)."""
    queue = f"memproj-test-{uuid.uuid4().hex[:10]}"
    saved = (app.conf.task_always_eager, app.conf.task_default_queue, app.conf.broker_transport_options)
    app.conf.task_always_eager = False
    app.conf.task_default_queue = queue
    app.conf.broker_transport_options = {**saved[2], "global_keyprefix": f"{queue}:"}
    _reset_amqp()
    yield queue
    # Nothing of this test (queue, bindings, leftovers of a failed run) stays in
    # the broker; a queue that was never declared has no keys, hence suppress.
    with app.connection_for_write() as conn, contextlib.suppress(Exception):
        channel = conn.default_channel
        assert isinstance(channel, RedisChannel)
        client = channel.client
        raw = redis.Redis(connection_pool=client.connection_pool)  # unprefixed, to delete whole keys
        for key in raw.scan_iter(match=f"{queue}:*"):
            raw.delete(key)
    app.conf.task_always_eager, app.conf.task_default_queue, app.conf.broker_transport_options = saved
    _reset_amqp()


class Worker:
    def __init__(self, process: subprocess.Popen, log: Path) -> None:
        self.process = process
        self.log = log

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture
def start_worker(broker_queue: str, fake_openai: FakeOpenAI, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start a worker; it embeds through the fake OpenAI-compatible endpoint
    (real MiniLM vectors, and outages on demand) so it need not load torch."""
    workers: list[Worker] = []

    def start(**extra_env: str) -> Worker:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CELERY_TASK_ALWAYS_EAGER")}
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "memproj.settings.base",
                "DATABASE_URL": database_url(),
                "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
                "CELERY_TASK_DEFAULT_QUEUE": broker_queue,
                "CELERY_BROKER_KEY_PREFIX": f"{broker_queue}:",
                "MEMPROJ_EMBEDDER": "openai",
                "MEMPROJ_EMBEDDING_API_BASE": fake_openai.base_url,
                "MEMPROJ_EMBEDDING_MODEL": "all-MiniLM-L6-v2",
                "PYTHONUNBUFFERED": "1",
                "LOG_LEVEL": "INFO",
            }
        )
        env.update(extra_env)
        log = tmp_path / f"worker-{len(workers)}.log"
        handle = open(log, "w")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            [
                str(CELERY),
                "-A",
                "memproj",
                "worker",
                "--pool=solo",
                "--concurrency=1",
                "-Q",
                broker_queue,
                "-n",
                f"{broker_queue}-{len(workers)}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=INFO",
            ],
            cwd=BASE_DIR,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        worker = Worker(process, log)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


def wait_until(
    condition: Callable[[], object], *, what: str, worker: Worker | None = None, timeout: float = 180
) -> None:
    """Poll until the worker has done its part; the deadline only turns a hang
    into a failure with the worker's log, it is not what is being tested."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if worker is not None and worker.process.poll() is not None:
            pytest.fail(f"worker exited ({worker.process.returncode}) before {what}:\n{worker.log_tail()}")
        time.sleep(0.25)
    pytest.fail(f"timed out waiting for {what}:\n{worker.log_tail() if worker else ''}")


def in_flight(queue: str) -> bool:
    """Is a message for this queue waiting, or delivered but not yet acknowledged?
    (kombu's Redis transport keeps unacknowledged messages in the ``unacked`` hash
    as ``[message, exchange, routing_key]`` until the ack.)"""
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        assert isinstance(channel, RedisChannel), channel
        client = channel.client  # prefixes the keys of most commands itself ...
        waiting = client.llen(queue)
        prefix = getattr(client, "global_keyprefix", "")
        unacked = [json.loads(raw) for raw in client.hvals(f"{prefix}unacked")]  # ... but not HVALS
    return waiting > 0 or any(entry[2] == queue for entry in unacked)
