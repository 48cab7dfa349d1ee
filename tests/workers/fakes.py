"""A local stand-in for an OpenAI-compatible server, speaking the real HTTP
protocol over loopback: POST /v1/embeddings (answered with the real local
MiniLM model, after a configurable number of failures) and
POST /v1/chat/completions (answered from a script: good JSON, malformed
output, slow answers, errors, or a hang until released)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memory.embeddings import LocalEmbedder

_local_embedder: LocalEmbedder | None = None


def local_embedder() -> LocalEmbedder:
    global _local_embedder
    if _local_embedder is None:
        _local_embedder = LocalEmbedder()
    return _local_embedder


@dataclass
class ChatStep:
    """One scripted answer. ``content`` may be a function of the request body."""

    content: str | Callable[[dict[str, Any]], str] = ""
    delay: float = 0.0
    status: int = 200
    hold: threading.Event | None = None  # wait for this before answering


@dataclass
class Recorded:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class FakeOpenAI:
    embed_failures: int = 0
    chat_script: list[ChatStep] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    chat_started: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test, killed worker)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake._lock:
                    fake.requests.append(Recorded(self.path, body, dict(self.headers)))
                if self.path == "/v1/embeddings":
                    self._embeddings(body)
                elif self.path == "/v1/chat/completions":
                    self._chat(body)
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def _embeddings(self, body: dict[str, Any]) -> None:
                with fake._lock:
                    fail = fake.embed_failures > 0
                    if fail:
                        fake.embed_failures -= 1
                if fail:
                    self._send(503, {"error": {"message": "model is loading", "type": "server_error"}})
                    return
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                vectors = local_embedder().embed(texts)
                self._send(
                    200,
                    {
                        "object": "list",
                        "model": body.get("model", ""),
                        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                        "usage": {"prompt_tokens": 0, "total_tokens": 0},
                    },
                )

            def _chat(self, body: dict[str, Any]) -> None:
                with fake._lock:
                    step = fake.chat_script.pop(0) if len(fake.chat_script) > 1 else fake.chat_script[0]
                fake.chat_started.set()
                if step.hold is not None:
                    step.hold.wait(300)
                if step.delay:
                    time.sleep(step.delay)
                if step.status != 200:
                    self._send(step.status, {"error": {"message": "upstream failure", "type": "server_error"}})
                    return
                content = step.content(body) if callable(step.content) else step.content
                self._send(
                    200,
                    {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", ""),
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    },
                )

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def calls(self, path: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def episodes_in(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The episodes a chat-completions request carries (our consolidator's user message)."""
    return json.loads(body["messages"][1]["content"])["episodes"]


def one_fact_from_all_episodes(
    *, content: str, subject: str, predicate: str, permanence: str = "stable", importance: int = 5
) -> Callable[[dict[str, Any]], str]:
    """A scripted chat answer: one fact derived from every episode in the request."""

    def answer(body: dict[str, Any]) -> str:
        fact = {
            "kind": "fact",
            "content": content,
            "subject": subject,
            "predicate": predicate,
            "permanence": permanence,
            "importance": importance,
            "source_ids": [e["id"] for e in episodes_in(body)],
        }
        return json.dumps({"memories": [fact], "duplicates": []})

    return answer
