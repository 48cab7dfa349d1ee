"""20 concurrent writers in one tenant (facts keyed and keyless, restatements
the worker merges, rules, episodes, forgets of their own earlier writes) while
real workers run every sweep over and over (drain, embedding retry, expiry of
back-dated rows, decay, consolidation, maturity, lifecycle, re-embed): no
write fails (a deadlock victim is an error answer), every acknowledged write
that was not forgotten is found by a keyword search for its own text, and no
forgotten one is retrievable again."""

from __future__ import annotations

import random
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from memory.models import FollowUp, Kind, Memory, Validity
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.memories import episode_store, fact_store, memory_forget, rule_store
from memory.statements import same_statement
from tests.conftest import make_identity
from tests.workers.conftest import in_flight, wait_until
from workers import tasks

pytestmark = pytest.mark.worker

WRITERS = 20
SECONDS = 12.0
SWEEPS = [
    tasks.followups_drain_task,
    tasks.embeddings_retry_task,
    tasks.memories_expire_task,
    tasks.facts_decay_task,
    tasks.episodes_consolidate_task,
    tasks.rules_maturity_task,
    tasks.collections_lifecycle_task,
    tasks.memories_reembed_task,
]
FAST = {
    "MEMPROJ_FOLLOWUP_GRACE_SECONDS": "0",
    "MEMPROJ_EMBED_RETRY_GRACE_SECONDS": "0",
    "MEMPROJ_CONSOLIDATE_SETTLE_HOURS": "0",
}


@dataclass
class Written:
    id: uuid.UUID
    kind: str
    text: str
    key: str = ""
    forgotten: bool = False


def test_20_writers_forgetting_while_every_sweep_runs(start_worker, broker_queue, settings):
    member = make_identity("tenant-s", "member")
    with time_machine.travel(timezone.now() - timedelta(days=45)):
        for i in range(20):
            episode_store(caller=member.caller, content=f"old deploy log line {i}", butler="ops", ttl=timedelta(days=1))
            fact_store(
                caller=member.caller, subject="host", predicate=f"load {i}", content=f"load {i}", permanence="volatile"
            )
    workers = [start_worker(**FAST) for _ in range(2)]

    written: list[Written] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + SECONDS

    def writer(w: int) -> None:
        rng = random.Random(w)
        mine: list[Written] = []
        n = 0
        try:
            while time.monotonic() < stop_at:
                n += 1
                op = rng.choice(["restate", "unique", "keyed", "rule", "episode", "forget"])
                if op == "restate":  # the same few statements from every writer: the worker merges them
                    text = f"The staging database is db{rng.randrange(4)}.internal"
                    m = fact_store(caller=member.caller, subject=None, predicate=None, content=text).memory
                    mine.append(Written(m.pk, Kind.FACT, text))
                elif op == "unique":
                    text = f"Writer w{w}n{n} noted the invoice INV-{w:02d}{n:04d} was paid"
                    m = fact_store(caller=member.caller, subject=None, predicate=None, content=text).memory
                    mine.append(Written(m.pk, Kind.FACT, text))
                elif op == "keyed":
                    text = f"Writer w{w} is on call shift s{n}"
                    m = fact_store(caller=member.caller, subject=f"w{w}", predicate="shift", content=text).memory
                    mine.append(Written(m.pk, Kind.FACT, text, key=f"w{w}"))
                elif op == "rule":
                    text = f"Always tag release r{w}x{n} before deploying"
                    m = rule_store(caller=member.caller, content=text)
                    mine.append(Written(m.pk, Kind.RULE, text))
                elif op == "episode":
                    text = f"Writer w{w} deployed build b{n} to staging"
                    m = episode_store(caller=member.caller, content=text, butler="ops")
                    mine.append(Written(m.pk, Kind.EPISODE, text))
                elif mine:
                    victim = rng.choice(mine)
                    memory_forget(caller=member.caller, kind=victim.kind, memory_id=victim.id)
                    victim.forgotten = True
        except Exception:
            errors.append(f"writer {w} op {n}: {traceback.format_exc()}")
        finally:
            with lock:
                written.extend(mine)
            connection.close()

    def sweeper() -> None:
        try:
            while time.monotonic() < stop_at:
                for sweep in SWEEPS:
                    sweep.delay()
                time.sleep(1.0)
        except Exception:
            errors.append(f"sweeper: {traceback.format_exc()}")

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    threads.append(threading.Thread(target=sweeper))
    for t in threads:
        t.start()
    for t in threads:
        t.join(SECONDS + 120)
    assert not errors, errors[:3]
    assert len(written) > WRITERS * 5

    wait_until(
        lambda: not FollowUp.objects.filter(done_at__isnull=True).exists() and not in_flight(broker_queue),
        what="the follow-ups and sweeps",
        worker=workers[0],
        timeout=120,
    )
    for worker in workers:
        log = worker.log.read_text(errors="replace")
        assert "deadlock detected" not in log, worker.log_tail(80)
        assert worker.process.poll() is None, worker.log_tail(80)

    now = timezone.now()
    print(f"{len(written)} writes, {sum(i.forgotten for i in written)} forgotten")
    kept_keys: dict[str, uuid.UUID] = {}
    for item in written:
        if item.key:
            kept_keys[item.key] = item.id  # the last write per key (each writer writes its own key in order)
    rows = {m.pk: m for m in Memory.objects.filter(pk__in=[i.id for i in written]).without_vectors()}
    lost, back = [], []
    for item in written:
        row = rows.get(item.id)
        if item.forgotten:
            if row is not None and row.validity != Validity.RETRACTED:
                back.append((item, row.validity))
            continue
        if item.key and kept_keys.get(item.key) != item.id:
            continue  # replaced by a newer write of its key
        hits = memory_search(caller=member.caller, query=SearchQuery(item.text, mode="keyword", limit=50))
        if not any(h.memory.pk == item.id or same_statement(h.memory.content, item.text) for h in hits):
            lost.append((item, row.validity if row else "gone", row.superseded_by_id if row else None))
    assert not back, back[:5]
    assert not lost, lost[:5]
    assert all(r.validity == Validity.ACTIVE or r.expires_at is None or r.expires_at > now for r in rows.values())
    # The run did exercise what it is about: merges, forgets, expiry of the back-dated rows, decay.
    assert any(r.validity == Validity.SUPERSEDED and r.kind == Kind.FACT and not r.subject for r in rows.values())
    assert any(item.forgotten for item in written)
    assert not Memory.objects.filter(content__startswith="old deploy log line").exists()
    assert not Memory.objects.filter(subject="host", fact_state="").exists()
