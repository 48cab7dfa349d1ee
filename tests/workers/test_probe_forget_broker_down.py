"""A turn forgotten or replaced while the broker is unreachable. The designed
answer is the usual one (docs/reliability.md: a committed write answers
success, its follow-up waits in the outbox): the turn after it loses its vector
in the forget's own transaction, and once the broker is back a real beat and a
real worker embed that turn again without the forgotten text, with no manual
step (the embedding retry sweep takes a turn whose embed task never reached
the broker). The database going away while the worker writes that vector
delays it and changes nothing else. Measured as a user sees it: semantic
searches through the memory dialect's tools and the selectors, not rows."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connections
from django.db.models import F
from mcp import Client

from mcp_server.server import build_server
from memory.models import FollowUp, Memory, MemoryEvent
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.memories import episode_store, memory_supersede
from tests.conftest import Identity, call, call_error, make_identity
from tests.harness.pgrelay import PostgresRelay, postgres_relay
from tests.workers import fakes
from tests.workers.conftest import BASE_DIR, CELERY, Worker, database_url, wait_until
from tests.workers.test_probe_broker_restart import restartable_broker  # noqa: F401 - the restartable broker fixture

pytestmark = [pytest.mark.worker, pytest.mark.real_embedder]

SECRET = "my passport number is ZX-99, kept in the blue drawer of the hallway desk"
REPLY = "Understood, I will keep that in mind for the travel checklist."
QUESTION = "where is my passport kept? blue drawer"
OLD_CODE = "the garage door code is 4471, the spare key hangs behind the bike rack"
ACK = "Thanks, added to the house notes."
CODE_QUESTION = "what is the garage door code? spare key bike rack"
NEW_CODE = "the garage door code changed, ask me for it"
# Other sessions, so that a ranking has something to rank.
OTHERS = [
    "we booked the train to Lyon for Friday morning",
    "the dentist appointment moved to Tuesday",
    "remember to water the tomatoes twice a week",
    "my sister's birthday party is at the lake house",
    "the car needs new winter tyres before December",
    "our wifi router is in the living room cabinet",
]
# What test_probe_broker.py allows a write's answer with the broker unreachable.
ANSWER_BOUND = 15.0
# The sweeps beat leaves on here: those that pick up what the broker lost.
OTHER_SWEEPS_OFF = {
    var: "off"
    for var in (
        "MEMPROJ_BEAT_CONSOLIDATE",
        "MEMPROJ_BEAT_EXPIRE",
        "MEMPROJ_BEAT_DECAY",
        "MEMPROJ_BEAT_MATURITY",
        "MEMPROJ_BEAT_REEMBED",
        "MEMPROJ_BEAT_LIFECYCLE",
        "MEMPROJ_BEAT_TRANSCRIPTS",
        "MEMPROJ_BEAT_ACTIVE_CONTEXTS",
        "MEMPROJ_BEAT_IDEMPOTENCY_KEYS",
    )
}


def tool(member: Identity, name: str, **arguments: Any) -> dict[str, Any]:
    """One of the memory dialect's tools called as a client calls it; its structured answer."""

    async def run() -> dict[str, Any]:
        async with Client(build_server("memory", static_caller=member.caller)) as client:
            return await call(client, name, **arguments)

    return asyncio.run(run())


def tool_error(member: Identity, name: str, **arguments: Any) -> str:
    """A tool call that must fail; its error text."""

    async def run() -> str:
        async with Client(build_server("memory", static_caller=member.caller)) as client:
            return await call_error(client, name, **arguments)

    return asyncio.run(run())


def semantic(member: Identity, text: str, limit: int = 3) -> list[str]:
    found = tool(member, "memory_search", query=text, mode="semantic", limit=limit)
    return [hit["content"] for hit in found["results"]]


def by_own_words(member: Identity, text: str) -> bool:
    """The turn ranks first on its own words (its vector is back, and made from them)."""
    return semantic(member, text, limit=1) == [text]


def by_keyword(member: Identity, text: str) -> bool:
    return text in [h.memory.content for h in memory_search(caller=member.caller, query=SearchQuery(text))]


def store(member: Identity, content: str, session: str) -> Memory:
    return episode_store(caller=member.caller, content=content, butler="b", session_id=session)


def conversation(member: Identity, *turns: tuple[str, str]) -> list[Memory]:
    """The other sessions and these turns, stored an hour ago (as a forget usually
    meets a conversation): the embedding retry sweep leaves rows younger than
    its grace period to the task sent when they were written."""
    for i, text in enumerate(OTHERS):
        store(member, text, session=f"other-{i}")
    stored = [store(member, content, session) for content, session in turns]
    Memory.objects.filter(tenant_id=member.caller.tenant_id).update(created_at=F("created_at") - timedelta(hours=1))
    return stored


def relayed_database_url(relay: PostgresRelay) -> str:
    """The test database's URL through the relay's socket directory."""
    url = database_url()
    host = connections["default"].settings_dict["HOST"]
    assert url.endswith(f"?host={host}"), url
    return url.removesuffix(host) + str(relay.directory)


def held_embedder(monkeypatch: pytest.MonkeyPatch, marker: str) -> tuple[threading.Event, threading.Event]:
    """The fake embedding endpoint holds a request with ``marker`` in a text
    until released: (it holds one, release it)."""
    holding, release = threading.Event(), threading.Event()
    real = fakes.local_embedder()

    class Held:
        def embed(self, texts: list[str]) -> list[list[float]]:
            if any(marker in text for text in texts) and not release.is_set():
                holding.set()
                release.wait(120)
            return real.embed(texts)

    monkeypatch.setattr(fakes, "local_embedder", Held)
    return holding, release


@pytest.fixture
def start_beat(broker_queue: str, tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """A real ``celery beat`` sending to this test's queue the sweeps that pick
    up what the broker lost (the follow-up drain and the embedding retry, each
    minute as deployed). Returns its log."""
    processes: list[subprocess.Popen] = []

    def start(broker_url: str) -> Path:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CELERY_TASK_ALWAYS_EAGER")}
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "memproj.settings.base",
                "DATABASE_URL": database_url(),
                "CELERY_BROKER_URL": broker_url,
                "CELERY_TASK_DEFAULT_QUEUE": broker_queue,
                "CELERY_BROKER_KEY_PREFIX": f"{broker_queue}:",
                "PYTHONUNBUFFERED": "1",
                **OTHER_SWEEPS_OFF,
            }
        )
        log = tmp_path / f"beat-{len(processes)}.log"
        handle = open(log, "w")  # noqa: SIM115 - closed with the process
        schedule = tmp_path / f"beat-schedule-{len(processes)}"
        processes.append(
            subprocess.Popen(
                [str(CELERY), "-A", "memproj", "beat", "-s", str(schedule), "--loglevel=INFO"],
                cwd=BASE_DIR,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        )
        return log

    yield start
    for process in processes:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def follow_ups_closed(worker: Worker) -> None:
    open_rows = FollowUp.objects.filter(done_at__isnull=True)
    wait_until(lambda: not open_rows.exists(), what="the follow-ups to close", worker=worker)


def test_a_turn_forgotten_and_one_replaced_while_the_broker_is_down_are_embedded_again_once_it_is_back(
    start_worker,
    restartable_broker,  # noqa: F811 - the fixture imported above
    start_beat,
):
    url, kill, start = restartable_broker
    member = make_identity("tenant-a", "member")
    secret, reply, old_code, ack, new_code = conversation(
        member, (SECRET, "s1"), (REPLY, "s1"), (OLD_CODE, "s2"), (ACK, "s2"), (NEW_CODE, "s3")
    )
    # Each reply ranks on the words of the turn before it.
    assert semantic(member, QUESTION)[:2] == [SECRET, REPLY]
    assert semantic(member, CODE_QUESTION)[:2] == [OLD_CODE, ACK]
    worker = start_worker(CELERY_BROKER_URL=url)
    beat_log = start_beat(url)

    kill()
    started = time.monotonic()
    answer = tool(member, "memory_forget", type="episode", id=str(secret.pk))
    took = time.monotonic() - started
    assert answer == {"id": str(secret.pk), "type": "episode", "validity": "retracted"}
    assert took < ANSWER_BOUND, took
    # The admin's supersede, as its review action calls it.
    memory_supersede(caller=member.caller, old_id=old_code.pk, new_id=new_code.pk, reason="admin review")
    # At once: neither the forgotten nor the replaced words find the turn after them ...
    assert REPLY not in semantic(member, QUESTION, limit=10)
    assert ACK not in semantic(member, CODE_QUESTION, limit=10)
    # ... which are still found by their own words (the keyword channel).
    assert by_keyword(member, REPLY) and by_keyword(member, ACK)
    # Down across a tick of beat, whose sends wait for the broker too.
    wait_until(lambda: "beat: Connection error" in beat_log.read_text(), what="a beat tick in the outage")
    assert not by_own_words(member, REPLY) and not by_own_words(member, ACK)

    start()  # back, and empty: nothing is done by hand from here on
    wait_until(
        lambda: by_own_words(member, REPLY) and by_own_words(member, ACK),
        what="the turns after the forgotten and the replaced one to be embedded again",
        worker=worker,
        timeout=200,
    )
    assert REPLY not in semantic(member, QUESTION)
    assert ACK not in semantic(member, CODE_QUESTION)
    assert SECRET not in semantic(member, QUESTION, limit=10)
    assert OLD_CODE not in semantic(member, CODE_QUESTION, limit=10)
    follow_ups_closed(worker)


def test_the_database_going_away_while_the_worker_embeds_the_turn_again(
    start_worker,
    restartable_broker,  # noqa: F811 - the fixture imported above
    start_beat,
    monkeypatch,
    tmp_path,
):
    url, kill, start = restartable_broker
    member = make_identity("tenant-a", "member")
    secret, reply = conversation(member, (SECRET, "s1"), (REPLY, "s1"))
    assert semantic(member, QUESTION)[:2] == [SECRET, REPLY]
    with postgres_relay() as relay:
        # The worker reaches PostgreSQL through the relay alone; this process and beat directly.
        worker = start_worker(CELERY_BROKER_URL=url, DATABASE_URL=relayed_database_url(relay))
        start_beat(url)
        frozen = int(redis.Redis.from_url(url, socket_timeout=1).info("server")["process_id"])

        # The broker frozen (a failover under way, a half-open connection) and this
        # process's database gone too: the forget is the coded storage error and
        # changes nothing ...
        os.kill(frozen, signal.SIGSTOP)
        settings_dict = connections["default"].settings_dict
        saved = settings_dict["HOST"]
        settings_dict["HOST"] = str(tmp_path)  # no server listens there; tools open fresh connections per call
        try:
            text = tool_error(member, "memory_forget", type="episode", id=str(secret.pk))
        finally:
            settings_dict["HOST"] = saved
        assert text.startswith("[STORAGE_ERROR] "), text
        assert semantic(member, QUESTION)[:2] == [SECRET, REPLY]
        assert not MemoryEvent.objects.filter(memory_id=secret.pk, event_type="retracted").exists()
        assert not FollowUp.objects.exists()
        # ... and once the database answers, the same forget answers, the broker still frozen.
        started = time.monotonic()
        answer = tool(member, "memory_forget", type="episode", id=str(secret.pk))
        took = time.monotonic() - started
        assert answer == {"id": str(secret.pk), "type": "episode", "validity": "retracted"}
        assert took < ANSWER_BOUND, took
        assert REPLY not in semantic(member, QUESTION, limit=10)
        kill()  # the frozen broker never answers again: an empty one takes its place
        holding, release = held_embedder(monkeypatch, REPLY)
        start()

        # Beat's retry sweep has the worker read the turn and call the model;
        # the database goes away before the worker writes the vector.
        wait_until(holding.is_set, what="the worker to embed the turn again", worker=worker, timeout=200)
        relay.down()
        release.set()
        wait_until(
            lambda: "OperationalError" in worker.log_tail(400),
            what="the worker to meet the outage",
            worker=worker,
            timeout=60,
        )
        assert REPLY not in semantic(member, QUESTION, limit=10)
        assert by_keyword(member, REPLY) and not by_own_words(member, REPLY)
        relay.up()

        wait_until(
            lambda: by_own_words(member, REPLY),
            what="the turn to be embedded again once the database is back",
            worker=worker,
            timeout=200,
        )
        assert REPLY not in semantic(member, QUESTION)
        assert SECRET not in semantic(member, QUESTION, limit=10)
        follow_ups_closed(worker)

        # The broker that replaced the frozen one takes this process's next
        # forget at once: its follow-up reaches the worker without waiting for beat.
        other = store(member, OLD_CODE, "s2")
        store(member, ACK, "s2")
        sent = worker.log_tail(10_000).count("embed_memories_task")
        assert tool(member, "memory_forget", type="episode", id=str(other.pk))["validity"] == "retracted"
        wait_until(
            lambda: worker.log_tail(10_000).count("embed_memories_task") > sent,
            what="the forget's embed task",
            worker=worker,
            timeout=30,
        )
        wait_until(lambda: by_own_words(member, ACK), what="the re-embed", worker=worker, timeout=60)
        assert ACK not in semantic(member, CODE_QUESTION)
        worker.stop()  # before the relay goes: its connections pass through it
