"""The scaled benchmark dataset (1M memories from 100k embedded texts): what
reuses a vector reuses its text too, stays close to it, and keeps its own key."""

from __future__ import annotations

import numpy as np

from tests.harness.generators import synthetic
from tests.harness.generators.dataset import chunk_vectors


def test_rows_inside_the_embedded_set_are_the_embedded_texts() -> None:
    assert synthetic.scaled_spec(7, 100) == synthetic.memory_spec(7)


def test_a_reused_row_carries_its_source_text_and_a_key_of_its_own() -> None:
    base = 100
    sources = {synthetic.memory_spec(i)["content"]: i for i in range(base)}
    keys = set()
    for i in range(base, base * 6):
        spec = synthetic.scaled_spec(i, base)
        source = synthetic.memory_spec(i % base)
        assert spec["kind"] == source["kind"]
        assert spec["content"].startswith(source["content"])
        if spec["kind"] == "fact":
            keys.add((spec["subject"], spec["predicate"]))
    assert len(keys) == sum(1 for i in range(base, base * 6) if synthetic.memory_spec(i % base)["kind"] == "fact")
    assert len(sources) > 90  # the base texts themselves vary


def test_reused_vectors_are_unit_length_perturbations_of_their_source() -> None:
    rng = np.random.default_rng(3)
    base = rng.normal(size=(50, 384)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    rows = np.arange(40, 140)
    out = chunk_vectors(base, rows)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    cosine = (out * base[rows % 50]).sum(axis=1)
    inside = rows < 50
    assert np.allclose(cosine[inside], 1.0, atol=1e-6)  # rows of the embedded set: unchanged
    assert (cosine[~inside] < 0.999).all() and (cosine[~inside] > 0.95).all()
    assert np.array_equal(out, chunk_vectors(base, rows))  # the same rows get the same vectors
