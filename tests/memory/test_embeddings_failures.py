"""Issue 15, item 4: writes survive ANY embedder failure (stored pending), reads
degrade to keyword with a bounded wait and a circuit breaker (an endpoint that
accepts and never answers is not asked again on every call), and memories
marked failed during an outage are retried once the embedder answers again."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import time_machine
from django.utils import timezone

from memory.context import build_context
from memory.embeddings import CircuitBreaker, OpenAICompatibleEmbedder, ResilientEmbedder, get_embedder, set_embedder
from memory.models import EmbeddingStatus, Memory
from memory.selectors.memories import SearchQuery, memory_search
from memory.services import reembedding
from memory.services.memories import episode_store, fact_store
from memory.services.referencing import memory_recall
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db


class RaisingEmbedder:
    model_name = "all-MiniLM-L6-v2"
    dimensions = 384

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise self.exc


class HangingServer:
    """Accepts TCP connections on loopback, reads the request and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.connections = 0
        self.stop = threading.Event()
        self._held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            self._held.append(conn)  # keep it open, say nothing

    def close(self) -> None:
        self.stop.set()
        for conn in self._held:
            conn.close()
        self.sock.close()


class MalformedHandler(BaseHTTPRequestHandler):
    body = b"{this is not json"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def member():
    return make_identity("tenant-a", "member")


@pytest.fixture
def swap_embedder() -> Iterator:
    real = get_embedder()
    yield set_embedder
    set_embedder(real)


@pytest.fixture
def short_waits(settings):
    settings.MEMPROJ_EMBEDDER = {
        **settings.MEMPROJ_EMBEDDER,
        "QUERY_TIMEOUT_SECONDS": 0.3,
        "STORE_TIMEOUT_SECONDS": 0.3,
        "HTTP_TIMEOUT_SECONDS": 30.0,  # longer than the waits: the waits, not httpx, must bound the call
        "BREAKER_FAILURES": 2,
        "BREAKER_COOLDOWN_SECONDS": 600.0,
    }


@pytest.mark.parametrize(
    "exc",
    [RuntimeError("expected scalar type Float"), OSError("model.safetensors is truncated"), MemoryError()],
    ids=["runtime-error", "model-load-error", "memory-error"],
)
def test_write_survives_any_embedder_exception(member, swap_embedder, exc):
    swap_embedder(RaisingEmbedder(exc))
    stored = fact_store(caller=member.caller, subject="user", predicate="os", content="User runs Debian Linux").memory
    row = Memory.objects.get(pk=stored.id)
    assert row.embedding_status == EmbeddingStatus.PENDING and row.embedding is None
    assert type(exc).__name__ in row.embedding_error
    # Reads keep working: hybrid, recall and context fall back to the keyword channel.
    assert [
        h.memory.id for h in memory_search(caller=member.caller, query=SearchQuery("Debian Linux", mode="hybrid"))
    ] == [row.id]
    assert [h.memory.id for h in memory_recall(caller=member.caller, topic="Debian Linux")] == [row.id]
    assert "Debian" in build_context(caller=member.caller, trigger_prompt="Debian Linux", butler="general").text


def test_malformed_json_from_an_openai_compatible_endpoint(member, swap_embedder):
    server = ThreadingHTTPServer(("127.0.0.1", 0), MalformedHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        swap_embedder(OpenAICompatibleEmbedder(url, "", "all-MiniLM-L6-v2", 384, timeout=10))
        stored = episode_store(caller=member.caller, content="Met Priya at the climbing gym", butler="general")
        row = Memory.objects.get(pk=stored.id)
        assert row.embedding_status == EmbeddingStatus.PENDING and "endpoint failed" in row.embedding_error
        hits = memory_search(caller=member.caller, query=SearchQuery("climbing gym", mode="hybrid"))
        assert [h.memory.id for h in hits] == [row.id]
    finally:
        server.shutdown()
        server.server_close()


def test_hanging_endpoint_costs_a_bounded_wait_then_the_breaker_stops_asking(member, swap_embedder, short_waits):
    server = HangingServer()
    try:
        swap_embedder(OpenAICompatibleEmbedder(server.url, "", "all-MiniLM-L6-v2", 384, timeout=30))
        first = episode_store(caller=member.caller, content="Tom repaired the kitchen sink", butler="general")
        assert Memory.objects.get(pk=first.id).embedding_status == EmbeddingStatus.PENDING
        hits = memory_search(caller=member.caller, query=SearchQuery("kitchen sink", mode="hybrid"))
        assert [h.memory.id for h in hits] == [first.id]  # degraded to keyword, not an error
        assert get_embedder().breaker.state == "open"
        asked = server.connections
        assert asked == 1  # the second call queued behind the hung request and timed out

        # The breaker is open: 20 more writes and reads never reach the endpoint.
        for i in range(10):
            episode_store(caller=member.caller, content=f"note {i} about the kitchen sink", butler="general")
            assert memory_search(caller=member.caller, query=SearchQuery("kitchen sink", mode="hybrid"))
        assert server.connections == asked
        assert Memory.objects.filter(embedding_status=EmbeddingStatus.PENDING).count() == 11
    finally:
        server.close()


def test_failed_embeddings_are_retried_once_the_embedder_recovers(member, swap_embedder, settings):
    settings.MEMPROJ_PIPELINE = {**settings.MEMPROJ_PIPELINE, "EMBED_MAX_ATTEMPTS": 2}
    real = get_embedder()
    start = timezone.now()
    swap_embedder(ResilientEmbedder(RaisingEmbedder(RuntimeError("down")), breaker=CircuitBreaker(failures=99)))
    ids = [
        fact_store(caller=member.caller, subject="user", predicate=p, content=f"User prefers {p} mode").memory.id
        for p in ("dark", "light")
    ]
    with time_machine.travel(start + timedelta(minutes=5)):
        assert reembedding.embeddings_retry().failed == 2  # attempt 2 of 2: marked failed
        assert set(Memory.objects.filter(pk__in=ids).values_list("embedding_status", flat=True)) == {"failed"}
        assert reembedding.embeddings_retry().processed == 0  # still down: nothing is requeued

        swap_embedder(real)  # the embedder is back: the next sweep requeues, the one after embeds
        requeue = reembedding.embeddings_retry()
        assert requeue.more
        assert set(Memory.objects.filter(pk__in=ids).values_list("embedding_status", flat=True)) == {"pending"}
        assert sorted(reembedding.embeddings_retry().ids) == sorted(ids)
    rows = Memory.objects.filter(pk__in=ids)
    assert all(r.embedding_status == EmbeddingStatus.READY and r.embedding is not None for r in rows)
