"""The sentence splitter behind ``bench/quality.py --model minilm-sentences``:
what it measures is only as good as the pieces it embeds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "_models.py"


@pytest.fixture(scope="module")
def split():
    # As ``python bench/quality.py`` runs it: bench/ first on the module path.
    sys.path.insert(0, str(_PATH.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_models_under_test", _PATH)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(_PATH.parent))
    return module.split_sentences


def test_a_turn_of_one_sentence_gets_no_extra_vectors(split):
    assert split("I planted tomatoes in the back garden last spring.") == []
    assert split("") == []


def test_sentences_end_at_punctuation_before_a_capital_and_at_line_breaks(split):
    text = 'We moved to Lisbon in May. The flat has a balcony! "Is it far?" My sister asked.\nThe rent is 900 euros.'
    assert split(text) == [
        "We moved to Lisbon in May.",
        "The flat has a balcony!",
        '"Is it far?" My sister asked.',
        "The rent is 900 euros.",
    ]


def test_a_fragment_joins_its_neighbour_instead_of_standing_alone(split):
    assert split("Sure! I can help you plan the trip to Kyoto. We should book the ryokan early.") == [
        "Sure! I can help you plan the trip to Kyoto.",
        "We should book the ryokan early.",
    ]
    # The last fragment joins the sentence before it.
    assert split("The museum opens at nine every morning. Thanks!") == []
    assert split("The museum opens at nine every morning. It closes at six. Thanks!") == [
        "The museum opens at nine every morning.",
        "It closes at six. Thanks!",
    ]
