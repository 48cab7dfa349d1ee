"""A search for an acknowledged write's own text finds it among hundreds of
writes that differ only in a marker: the fault runs' workload (rules, facts and
episodes of several runs in one tenant), with the real model."""

from __future__ import annotations

import pytest

from memory import retrieval
from memory.models import Memory
from memory.scoring import RetrievalParams
from memory.selectors.memories import SearchQuery, memory_search, memory_search_ranking, retrieval_params
from memory.services.memories import episode_store, fact_store, rule_store
from policy.caller import Caller
from tests.conftest import make_identity

pytestmark = [pytest.mark.django_db, pytest.mark.real_embedder]

# Run ids of fault runs and probes in which a rule was missed before coverage
# was the share of the query's IDF a hit holds.
RUNS = ("rel84e51468", "rel99be5a27", "rel347b763a", "relfc427a55", "rel31f213f0")
WRITES_PER_RUN = 120


def _write(caller, marker: str, n: int) -> str:
    if n % 3 == 0:
        return fact_store(
            caller=caller, subject=marker, predicate="status", content=f"{marker} is tracked"
        ).memory.content
    if n % 3 == 1:
        return rule_store(caller=caller, content=f"Always mention {marker} before sending").content
    return episode_store(caller=caller, content=f"Worked on {marker} today", butler="ops").content


def _why(caller: Caller, text: str, params: RetrievalParams) -> str:
    """The vector channel's question and the ranking's first hits, for the failure message."""
    ranking = memory_search_ranking(caller=caller, query=SearchQuery(text, limit=10, params=params))
    content = dict(Memory.objects.filter(pk__in=[r.id for r, _, _ in ranking.items]).values_list("id", "content"))
    shown = [
        f"  {position} {content[row.id]!r} {relevance:.3f} {hit}"
        for position, (row, relevance, hit) in enumerate(ranking.items)
        if position < 3 or content[row.id] == text
    ]
    vector_query = retrieval.vector_query_text(caller, text, params)
    return "\n".join([f"{params.fusion}: {text!r}, vector query {vector_query!r}", *shown])


def test_every_write_of_several_marker_runs_is_found_by_its_own_text():
    """The words every rule shares are each in a third of the tenant's
    memories, so the vector channel's question is the marker and "before":
    its nearest memories are episodes whose markers look alike, none a keyword
    match. The rule holding every word of the query, first in the keyword
    channel, must still come before them, under the default fusion and the
    fitted one (the tenant policy's alpha)."""
    caller = make_identity("tenant-own-text", "member").caller
    texts = [_write(caller, f"{run}x{n}", n) for run in RUNS for n in range(WRITES_PER_RUN)]
    why: list[str] = []
    for fusion in ("conf", "adaptive"):
        params = retrieval_params(caller).with_(fusion=fusion)
        for text in texts:
            found = memory_search(caller=caller, query=SearchQuery(text, limit=10, params=params))
            if text not in [h.memory.content for h in found] and len(why) < 3:
                why.append(_why(caller, text, params))
    assert why == [], "\n".join(why)
