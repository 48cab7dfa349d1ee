"""The embedding retry sweep in a real worker against a previous turn whose
TTL passes while the model runs (the model is an OpenAI-compatible endpoint
on loopback that holds the reply's request until the TTL has passed). The
vector is written only if the previous turn is still within its TTL when it
is written; else the reply waits, and once the expiry sweep and the retry
sweep have run as beat runs them, the reply's vector is its own text alone:
the expired turn's words do not find it."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.utils import timezone

from memory import embedtext
from memory.models import EmbeddingStatus, Memory
from memory.services.memories import episode_store
from tests.conftest import make_identity
from tests.workers.conftest import in_flight, wait_until
from tests.workers.fakes import local_embedder
from workers import tasks

pytestmark = pytest.mark.worker

PREVIOUS = "the gate code for the garden shed is 8812"
REPLY = "got it, thanks"


class HoldingEmbedder:
    """/v1/embeddings answered with the local MiniLM model; a request whose
    input holds ``held`` waits for ``release`` (``started`` set first)."""

    def __init__(self, held: str) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                if any(text.startswith(held) for text in texts):
                    fake.started.set()
                    fake.release.wait(120)
                vectors = local_embedder().embed(texts)
                data = json.dumps(
                    {
                        "object": "list",
                        "model": body.get("model", ""),
                        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                        "usage": {"prompt_tokens": 0, "total_tokens": 0},
                    }
                ).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def close(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def holding_embedder() -> Iterator[HoldingEmbedder]:
    server = HoldingEmbedder(held=REPLY)
    yield server
    server.close()


def made_from(pk: Any, content: str, previous: str | None = None) -> bool:
    stored = Memory.objects.get(pk=pk).embedding
    if stored is None:
        return False
    a = [float(x) for x in stored]
    b = local_embedder().embed([embedtext.embedding_text(content, kind="episode", previous=previous)])[0]
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))) > 0.999


def run(task: Any, queue: str, worker: Any, what: str) -> None:
    task.delay()
    wait_until(lambda: not in_flight(queue), what=what, worker=worker)


def test_a_previous_turn_expiring_while_the_worker_embeds_is_not_left_in_the_reply(
    start_worker, broker_queue, holding_embedder
):
    member = make_identity("tenant-a", "member")
    previous = episode_store(
        caller=member.caller, content=PREVIOUS, butler="b", session_id="s1", ttl=timedelta(hours=1)
    )
    reply = episode_store(caller=member.caller, content=REPLY, butler="b", session_id="s1")
    # Stored while the embedder was down, a few minutes ago: the retry sweep's to embed.
    now = timezone.now()
    Memory.objects.filter(pk=previous.pk).update(created_at=now - timedelta(minutes=10))
    Memory.objects.filter(pk=reply.pk).update(
        created_at=now - timedelta(minutes=5), embedding=None, embedding_status=EmbeddingStatus.PENDING
    )
    worker = start_worker(MEMPROJ_EMBEDDING_API_BASE=holding_embedder.base_url)
    tasks.embeddings_retry_task.delay()
    wait_until(holding_embedder.started.is_set, what="the reply's embedding", worker=worker)

    # While the model runs, the previous turn's TTL passes.
    Memory.objects.filter(pk=previous.pk).update(expires_at=timezone.now())
    holding_embedder.release.set()
    wait_until(lambda: not in_flight(broker_queue), what="the retry sweep", worker=worker)

    run(tasks.memories_expire_task, broker_queue, worker, "the expiry sweep")
    run(tasks.embeddings_retry_task, broker_queue, worker, "the retry sweep again")
    wait_until(
        lambda: Memory.objects.get(pk=reply.pk).embedding_status == EmbeddingStatus.READY,
        what="the reply's vector",
        worker=worker,
    )
    assert not made_from(reply.pk, REPLY, previous=PREVIOUS), "the expired turn's text is in the reply's vector"
    assert made_from(reply.pk, REPLY)
