"""Embedders for tests, swapped in through ``memory.embeddings.set_embedder``
(the seam the service itself uses to change embedders at run time).

- ``HashingEmbedder``: deterministic and model-free, so most tests never load
  torch. Words and character trigrams are hashed into 384 signed buckets and
  the vector is L2-normalised: texts that share words or spellings are close
  by cosine, unrelated texts are nearly orthogonal. It knows no synonyms, so
  tests that rely on real semantic similarity are marked ``real_embedder``
  (tests/conftest.py) and get all-MiniLM-L6-v2.
- ``BrokenEmbedder``: an embedder outage."""

from __future__ import annotations

import hashlib
import math
import re

from memory.errors import EmbeddingUnavailable
from memory.models import EMBEDDING_DIM

_WORD = re.compile(r"[a-z0-9]+")
# Function words carry no topic; without this, any two English sentences look alike.
_FUNCTION_WORDS = (
    "a an and are as at be by did do does for from has have he her his i in is it its of on or our she "
    "that the their them they this to was we were what when where which who will with you your"
)
_STOPWORDS = frozenset(_FUNCTION_WORDS.split())
WORD_WEIGHT = 1.0
TRIGRAM_WEIGHT = 0.35  # spelling variants ("colour" / "color") share most trigrams


def _bucket(feature: str) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % EMBEDDING_DIM, (1.0 if (value >> 63) & 1 else -1.0)


class HashingEmbedder:
    model_name = "test-hashing-384"
    dimensions = EMBEDDING_DIM

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * EMBEDDING_DIM
        for word in _WORD.findall(text.lower()):
            if word in _STOPWORDS:
                continue
            index, sign = _bucket("w:" + word)
            vector[index] += sign * WORD_WEIGHT
            padded = f" {word} "
            for i in range(len(padded) - 2):
                index, sign = _bucket("t:" + padded[i : i + 3])
                vector[index] += sign * TRIGRAM_WEIGHT
        norm = math.sqrt(sum(x * x for x in vector))
        if norm == 0.0:  # no content words: a fixed unit vector (a zero vector has no cosine)
            vector[0] = 1.0
            return vector
        return [x / norm for x in vector]


class BrokenEmbedder:
    """Stands in for the embedder it replaces (same model name), but is down."""

    dimensions = EMBEDDING_DIM

    def __init__(self, model_name: str = "all-MiniLM-L6-v2") -> None:
        self.model_name = model_name

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise EmbeddingUnavailable("embedding service is down")
