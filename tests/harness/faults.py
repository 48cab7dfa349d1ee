"""Faults under a write load on a running stack: the worker or the web process
killed, the broker or PostgreSQL stopped and restarted, the embedder answering
errors, malformed JSON or nothing (through a fake endpoint the suite controls);
then what a client would call lost, duplicated or wrongly answered."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.harness.generators.workloads import WRITE_KINDS, write_arguments
from tests.harness.load.writes import Read, pending_follow_ups, read_load, texts_not_found, write_load
from tests.harness.stack import Stack
from tests.harness.surfaces.answers import Answer, answer_text
from tests.harness.surfaces.mcp_http import mcp_call


class FakeEmbeddingEndpoint:
    """A loopback OpenAI-compatible ``POST /v1/embeddings`` endpoint that the
    suite controls, so embedder faults are injected for real into a running
    stack (MEMPROJ_EMBEDDER=openai pointed here). In mode ``ok`` it computes
    real vectors with the packaged MiniLM (in this process); ``error`` answers
    HTTP 500 with an exception's text; ``malformed`` answers 200 with broken
    JSON or vectors of the wrong size (alternately); ``hang`` accepts the
    request and never answers (until the mode changes)."""

    MODES = ("ok", "error", "malformed", "hang")

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from memory.embeddings import LocalEmbedder

        self.mode = "ok"
        self.requests: Counter[str] = Counter()  # mode -> requests answered (or held) in it
        self._model = LocalEmbedder()
        self._lock = threading.Lock()
        self._model_lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet: thousands of requests
                return

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                endpoint.answer(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, name="fake-embedder", daemon=True)

    def start(self) -> FakeEmbeddingEndpoint:
        self._model.embed(["warm up"])  # load before the stack's first (bounded) request
        self._thread.start()
        return self

    def stop(self) -> None:
        self.mode = "ok"  # releases held requests
        self.server.shutdown()
        self.server.server_close()

    def answer(self, handler: Any, body: bytes) -> None:
        mode = self.mode
        with self._lock:
            self.requests[mode] += 1
            n = self.requests[mode]
        if mode == "hang":
            # Hold the connection without a byte of answer, as a stuck server does.
            while self.mode == "hang":
                time.sleep(0.1)
            mode = "error"  # the client gave up long ago; anything goes
        try:
            if mode == "ok":
                request = json.loads(body)
                texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
                with self._model_lock:  # one forward pass at a time
                    vectors = self._model.embed([str(t) for t in texts])
                data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
                payload = json.dumps({"object": "list", "data": data, "model": request.get("model", "")}).encode()
                status = 200
            elif mode == "error":
                payload = b'{"error": {"message": "RuntimeError: CUDA error: device-side assert triggered"}}'
                status = 500
            elif n % 2:
                payload, status = b'{"object": "list", "data": [{"index": 0, "embedding": [0.1, 0.2,', 200
            else:
                payload, status = b'{"object": "list", "data": [{"index": 0, "embedding": [0.5, 0.5]}]}', 200
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
        except OSError:  # the client hung up (it timed out on a held request)
            return


@dataclass
class FaultReport:
    fault: str
    writes: int = 0  # distinct writes (markers)
    attempts: int = 0
    accepted: int = 0  # writes answered ok (on some attempt)
    error_answers: int = 0
    bare_http_errors: int = 0  # an HTTP error status without a code
    uncoded_errors: int = 0  # an error answer without the dialect's code
    no_answer: int = 0  # no answer: the client's 30 s passed or the connection was lost
    lost: int = 0  # accepted, but a search for its own text does not find it
    unsearchable: int = 0  # accepted, but the search for its own text failed on every attempt
    committed_but_error: int = 0  # a write stored although every attempt was answered with an error
    # Writes with more than one row: each write's attempts carry one idempotency key,
    # so a retry after a lost answer must replay the first answer, not store again.
    duplicates: int = 0
    # Writes stored although no attempt got an answer (every one timed out or lost
    # its connection): reported, not a failure, the service never said "error".
    committed_unanswered: int = 0
    follow_ups_pending: int = 0
    recovered_in: float = 0.0
    worker_back: bool = True  # a worker is running after recovery (the supervisor restarted it)
    samples: list[str] = field(default_factory=list)
    # Embedder faults: writes stored without a vector (embedded later by the worker), and
    # the searches made while the fault was on (they must degrade to keyword, promptly).
    embedded_later: int = 0
    fault_reads: int = 0
    fault_read_errors: int = 0
    fault_reads_found: int = 0  # searches for an accepted marker that found it (by keyword)
    fault_read_p95_ms: float = 0.0
    fault_read_max_ms: float = 0.0

    @property
    def passed(self) -> bool:
        return not (
            self.lost or self.unsearchable or self.committed_but_error or self.duplicates or self.follow_ups_pending
        )

    @property
    def answers_true(self) -> bool:
        """Every error answer coded and none for a committed write."""
        return not (self.committed_but_error or self.bare_http_errors or self.uncoded_errors)


# The embedder faults need the stack to embed through the fake endpoint
# (Stack(embedder=FakeEmbeddingEndpoint())); each lists the endpoint's modes,
# spread evenly over the fault window.
EMBEDDER_FAULTS: dict[str, tuple[str, ...]] = {
    "embedder errors": ("error",),
    "embedder malformed JSON": ("malformed",),
    "embedder hang": ("hang",),
    # The CI size: the three in turn within one window.
    "embedder errors/malformed/hang": ("error", "malformed", "hang"),
}
FAULTS = ("worker SIGKILL", "web SIGKILL", "broker stop/restart", "PostgreSQL stop/restart")


async def miss_diagnosis(stack: Stack, token: str, marker: str, text: str) -> str:
    """What a search miss of an acknowledged write's own text came from: the
    write's rows as the database holds them (a superseded, retracted or
    pending row is another defect than a ranking miss), the keyword statistics
    of its terms, and whether each channel alone finds it."""
    import httpx

    rows = stack.sql(
        "SELECT kind, validity, embedding_status, superseded_by_id IS NOT NULL, scope, namespace, "
        "boundary_class, expires_at, embedding IS NULL FROM memory_memory WHERE content LIKE %s",
        [f"%{marker}%"],
    )
    terms = stack.sql(
        "SELECT t.term, coalesce(sum(s.df), 0) FROM unnest(memproj_query_terms(%s)) AS t(term) "
        "LEFT JOIN memory_termstat s ON s.term = t.term GROUP BY t.term",
        [text],
    )
    found = {}
    async with httpx.AsyncClient(timeout=httpx.Timeout(60, connect=5)) as http:
        for mode, limit in (("keyword", 10), ("semantic", 10), ("semantic", 100), ("hybrid", 100)):
            answer = await mcp_call(
                http, f"{stack.url}/mcp/memory", token, "memory_search", {"query": text, "mode": mode, "limit": limit}
            )
            found[f"{mode}@{limit}"] = answer.outcome if answer.outcome != "ok" else text in answer_text(answer)
    return f"miss of {marker}: rows {rows}; terms (term, df) {terms}; found alone {found}"


def fault_scenario(stack: Stack, token: str, fault: str, *, seconds: float, clients: int, drain: float) -> FaultReport:
    """Writes under load; the fault starts at a quarter of the run and is
    repaired at the half (the worker is restarted by the supervisor itself).
    During an embedder fault a reader searches for accepted writes too. Then
    wait for the follow-ups to drain and count."""
    run_id = f"rel{uuid.uuid4().hex[:8]}"
    report = FaultReport(fault)
    steps: list[Callable[[], None]]
    end_fault: Callable[[], None] | None
    if fault in EMBEDDER_FAULTS:
        endpoint = stack.embedder
        if endpoint is None:
            raise ValueError(f"{fault!r} needs a stack that embeds through the fake endpoint")

        def set_mode(mode: str) -> Callable[[], None]:
            return lambda: setattr(endpoint, "mode", mode)

        steps, end_fault = [set_mode(m) for m in EMBEDDER_FAULTS[fault]], set_mode("ok")
        step_modes: list[str] = list(EMBEDDER_FAULTS[fault])
    else:
        inject: dict[str, tuple[Callable[[], None], Callable[[], None] | None]] = {
            "worker SIGKILL": (stack.kill_worker, None),
            # Writes in flight lose their answer; their retries (same key) must not store twice.
            "web SIGKILL": (stack.kill_web, stack.wait_for_web),
            "broker stop/restart": (stack.stop_broker, stack.start_broker),
            "PostgreSQL stop/restart": (stack.stop_postgres, stack.start_postgres),
        }
        first, end_fault = inject[fault]
        steps = [first]
        step_modes = []
    window: list[float] = []  # when the fault was in place, and when it was repaired

    async def timeline(stop_at: float) -> None:
        begin = stop_at - seconds
        await asyncio.sleep(max(0.0, begin + seconds * 0.25 - time.monotonic()))
        # Down for a quarter of the run at least, counted from when the fault is
        # in place (stopping a server takes a while), so writes do meet it.
        for i, step in enumerate(steps):
            await asyncio.to_thread(step)
            if i == 0:
                window.append(time.monotonic())
                fault_over = max(window[0] + max(seconds * 0.25, 2.0), begin + seconds * 0.5)
            step_over = window[0] + (fault_over - window[0]) * (i + 1) / len(steps)
            await asyncio.sleep(max(0.0, step_over - time.monotonic()))
            if step_modes and stack.embedder is not None:
                # A mode counts only once the endpoint has met a request in it: on a
                # busy machine the circuit breaker's cooldown can outlast a short step.
                while stack.embedder.requests[step_modes[i]] == 0 and time.monotonic() < stop_at - 1.0:
                    await asyncio.sleep(0.1)
        if end_fault is not None:
            await asyncio.to_thread(end_fault)
        window.append(time.monotonic())

    answers: dict[str, list[Answer]] = {}
    reads: list[Read] = []

    def accepted() -> list[str]:
        # Every kind: writes that differ by their marker are never merged.
        return [m for m, attempts in list(answers.items()) if attempts and attempts[-1].outcome == "ok"]

    async def reader(stop_at: float) -> None:
        reads.extend(await read_load(stack, token, accepted, stop_at))

    async def both(stop_at: float) -> None:
        await asyncio.gather(timeline(stop_at), reader(stop_at))

    asyncio.run(
        write_load(
            stack,
            token,
            run_id=run_id,
            clients=clients,
            seconds=seconds,
            retries=3,
            timeline=both if fault in EMBEDDER_FAULTS else timeline,
            answers=answers,
        )
    )
    if fault in EMBEDDER_FAULTS and len(window) == 2:
        during = sorted(r.answer.seconds for r in reads if window[0] <= r.started <= window[1])
        faulty = [r for r in reads if window[0] <= r.started <= window[1]]
        report.fault_reads = len(faulty)
        report.fault_read_errors = sum(r.answer.outcome != "ok" for r in faulty)
        report.fault_reads_found = sum(r.found for r in faulty)
        if during:
            report.fault_read_p95_ms = during[min(len(during) - 1, int(len(during) * 0.95))] * 1000
            report.fault_read_max_ms = during[-1] * 1000
        for r in faulty:
            if r.answer.outcome != "ok" and len(report.samples) < 4:
                report.samples.append(f"search {r.marker}: {r.answer.outcome} {r.answer.text[:200]}")
    recovery_started = time.monotonic()
    deadline = recovery_started + drain
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if pending_follow_ups(stack, run_id) == 0 and stack.child("worker") is not None:
                break
        time.sleep(1)
    report.recovered_in = time.monotonic() - recovery_started
    report.worker_back = stack.child("worker") is not None
    report.follow_ups_pending = pending_follow_ups(stack, run_id)
    report.embedded_later = stack.sql(
        "SELECT count(DISTINCT m.id) FROM memory_memory m JOIN memory_followup f ON f.memory_id = m.id "
        "WHERE f.kind = 'embed' AND m.content LIKE %s",
        [f"%{run_id}x%"],
    )[0][0]
    # Rows the writes made: not the facts and rules consolidation derives from a
    # cluster of episodes (beat, every 30 min), which quote an episode's content.
    found = stack.sql(
        "SELECT content, kind, validity, embedding_status, created_at, id FROM memory_memory m "
        "WHERE content LIKE %s AND NOT EXISTS "
        "(SELECT 1 FROM memory_memorylink l WHERE l.from_memory_id = m.id AND l.kind = 'derived_from')",
        [f"%{run_id}x%"],
    )
    by_marker: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in found:
        by_marker[re.search(rf"({run_id}x\d+)", row[0]).group(1)].append(row)  # type: ignore[union-attr]
    rows = Counter({marker: len(same) for marker, same in by_marker.items()})
    # Lost is what a user would call lost: an acknowledged write a search for its own text does not find.
    texts = {
        marker: write_arguments(WRITE_KINDS[int(marker.rsplit("x", 1)[1]) % 3], marker)[1]["content"]
        for marker, attempts in answers.items()
        if any(a.outcome == "ok" for a in attempts)
    }
    not_found = asyncio.run(texts_not_found(stack, token, list(texts.values())))
    for marker, attempts in answers.items():
        ok = sum(a.outcome == "ok" for a in attempts)
        report.writes += 1
        report.attempts += len(attempts)
        report.accepted += ok > 0
        for answer in attempts:
            if answer.outcome != "ok":
                report.error_answers += 1
                if answer.outcome in ("hang", "exception"):
                    report.no_answer += 1
                elif answer.code is None and answer.text.startswith("HTTP 5"):
                    report.bare_http_errors += 1
                elif answer.code is None:
                    report.uncoded_errors += 1
                if len(report.samples) < 4:
                    report.samples.append(f"{marker}: {answer.outcome} {answer.text[:200]}")
        present = rows.get(marker, 0)
        search = not_found.get(texts[marker]) if ok else None
        report.lost += search is not None and search.outcome == "ok"
        report.unsearchable += search is not None and search.outcome != "ok"
        if search is not None and len(report.samples) < 6:
            report.samples.append(f"not found: {texts[marker]}; search: {search.outcome} {search.text[:200]}")
            report.samples.append(asyncio.run(miss_diagnosis(stack, token, marker, texts[marker])))
        report.duplicates += present > 1
        if ok == 0 and present:
            if any(a.outcome in ("hang", "exception") for a in attempts):
                report.committed_unanswered += 1
            else:
                report.committed_but_error += 1
        if present > max(ok, 1) and len(report.samples) < 4:
            # What the extra rows are (kind, validity, when) tells a retry from a second writer.
            report.samples.append(f"{marker}: {len(attempts)} attempts, rows {[r[1:] for r in by_marker[marker]]}")
    return report
