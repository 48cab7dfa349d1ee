"""Time-aware ranking (issue 14): the query's time expression, the fit of a
memory's time to it, and the bounded boost after fusion."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from memory import scoring, temporal
from memory.models import Memory
from memory.scoring import ChannelHit, RetrievalParams
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.memories import episode_store
from tests.conftest import make_identity

# A Wednesday.
NOW = datetime(2023, 4, 5, 19, 25, tzinfo=UTC)


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    "query, start, end",
    [
        ("What did I do yesterday?", "2023-04-04", "2023-04-05"),
        ("Which artist did I start listening to last Friday?", "2023-03-31", "2023-04-01"),
        ("What game did I beat last weekend?", "2023-04-01", "2023-04-03"),
        ("What did I buy last week?", "2023-03-27", "2023-04-03"),
        ("What certification did I complete last month?", "2023-03-01", "2023-04-01"),
        ("How many bikes did I service in March?", "2023-03-01", "2023-04-01"),
        ("Where did I travel in May?", "2022-05-01", "2022-06-01"),  # May has not come yet this year
        ("what happened in June 2021", "2021-06-01", "2021-07-01"),
        ("What did we plan in 2022?", "2022-01-01", "2023-01-01"),
        ("Where did we go last summer?", "2022-06-01", "2022-09-01"),
        ("How many weddings did I attend this year?", "2023-01-01", None),
        ("How much jewelry did I buy in the last two months?", None, None),
    ],
)
def test_periods(query, start, end):
    intent = temporal.parse(query, NOW)
    assert intent is not None and intent.prefer is None, query
    assert intent.start == (day(start) if start else NOW - timedelta(days=2 * 30.44))
    assert intent.end == (day(end) if end else NOW)


@pytest.mark.parametrize(
    "query, start",
    [
        ("On March 27th, how long did I run in the park?", "2023-03-27"),
        # Named before the question sentence: still the day asked about.
        ("I mentioned on April 2nd that I went to the museum. Do you remember what I saw?", "2023-04-02"),
        ("What did we talk about on the 3rd of April?", "2023-04-03"),
        ("What did I buy on Apr 4?", "2023-04-04"),
        ("What happened on May 2, 2021?", "2021-05-02"),
        ("Where was I on June 1st?", "2022-06-01"),  # not yet this year: last year's
        ("What did I say on May 4?", "2022-05-04"),  # "on May 4" is a day, not the verb
    ],
)
def test_a_day_named_by_its_date_is_that_day(query, start):
    intent = temporal.parse(query, NOW)
    assert intent is not None, query
    assert (intent.start, intent.end) == (day(start), day(start) + timedelta(days=1))


@pytest.mark.parametrize("query", ["I may 2 times go out, any tips?", "Was April 31st a Monday?", "May 2 be it?"])
def test_no_day_where_the_date_is_not_one(query):
    intent = temporal.parse(query, NOW)
    if intent is not None:
        assert intent.start is not None and intent.end is not None, query
        assert intent.end - intent.start != timedelta(days=1), query


def test_n_units_ago_is_a_loose_period_around_that_day():
    intent = temporal.parse("What gardening did I do two weeks ago?", NOW)
    assert intent is not None and intent.start is not None and intent.end is not None
    assert intent.start < NOW - timedelta(days=14) < intent.end
    assert intent.end < NOW - timedelta(days=7)


@pytest.mark.parametrize(
    "query, prefer",
    [
        ("How many Instagram followers do I currently have?", "recent"),
        ("What is my current highest score?", "recent"),
        ("When did I first started running?", "early"),
        # Both sides: an ordering question, no preference.
        ("What is the order of airlines I flew with from earliest to latest?", None),
    ],
)
def test_orders(query, prefer, monkeypatch):
    monkeypatch.setattr(temporal, "PREFER_ORDERS", frozenset(temporal.ORDERS))
    intent = temporal.parse(query, NOW)
    assert (intent.prefer if intent else None) == prefer
    monkeypatch.setattr(temporal, "PREFER_ORDERS", frozenset())  # the default: orders do not count
    assert temporal.parse(query, NOW) is None


@pytest.mark.parametrize(
    "query",
    [
        "What was my last name before I changed it?",  # "last" without a period
        "How many days ago did I buy a smoker?",  # asks for the period, names none
        "I may go hiking. Any tips?",  # the verb "may"
        # A statement around a question: only the question counts.
        "I painted a picture yesterday using lots of colours. Which colour looks best?",
        # A long context is not a question.
        "Yesterday I went out. " * 30 + "What did I do yesterday?",
        "",
    ],
)
def test_no_time_expression(query):
    assert temporal.parse(query, NOW) is None


def test_fit_is_one_inside_and_falls_off_outside_later_memories_more_slowly():
    intent = temporal.TimeIntent(start=day("2023-03-01"), end=day("2023-04-01"))
    lo, hi = day("2023-01-01"), day("2023-04-05")
    assert intent.fit(day("2023-03-15"), lo, hi) == 1.0
    before = intent.fit(day("2023-03-01") - timedelta(days=10), lo, hi)
    after = intent.fit(day("2023-04-01") + timedelta(days=10), lo, hi)
    assert 0.0 < before < after < 1.0
    recent = temporal.TimeIntent(prefer="recent")
    assert recent.fit(hi, lo, hi) == 1.0 and recent.fit(lo, lo, hi) == 0.0


def test_boost_is_bounded_and_off_without_time_fit():
    hits = {
        "match": ChannelHit(vector_similarity=0.8, vector_rank=1, time_fit=0.0),
        "in_period": ChannelHit(vector_similarity=0.7, vector_rank=2, time_fit=1.0),
        "unrelated": ChannelHit(vector_similarity=0.1, vector_rank=3, time_fit=1.0),
    }
    plain = {k: ChannelHit(vector_similarity=h.vector_similarity, vector_rank=h.vector_rank) for k, h in hits.items()}
    params = RetrievalParams(fusion="conf", alpha=0.65, time_boost=0.2)
    assert scoring.fuse_all(plain, params) == scoring.fuse_all(plain, params.with_(time_boost=0.0))
    boosted = scoring.fuse_all(hits, params)
    assert boosted["in_period"] > boosted["match"]  # a close match of the right period rises
    assert boosted["unrelated"] < boosted["match"]  # an unrelated memory is not pulled to the top
    assert all(0.0 <= v <= 1.0 for v in boosted.values())
    assert scoring.fuse_all(hits, params.with_(time_boost=0.0)) == scoring.fuse_all(plain, params)
    with pytest.raises(ValueError):
        RetrievalParams(time_boost=1.5)


@pytest.mark.django_db
def test_search_prefers_the_period_the_question_names(monkeypatch):
    caller = make_identity("tenant-a", "member").caller
    when = {
        "I went hiking in the Alps with Ann": day("2023-03-31") + timedelta(hours=10),
        "I went hiking in the Alps with Bob": day("2023-01-10") + timedelta(hours=10),
    }
    for text, at in when.items():
        memory = episode_store(caller=caller, content=text, butler="general")
        Memory.objects.filter(pk=memory.pk).update(created_at=at)
    monkeypatch.setattr(timezone, "now", lambda: NOW)

    def top(query: str, boost: float) -> str:
        params = RetrievalParams.resolve({"time_boost": boost})
        found = memory_search(caller=caller, query=SearchQuery(query, mode="keyword", types=["episode"], params=params))
        hybrid = memory_search(caller=caller, query=SearchQuery(query, mode="hybrid", types=["episode"], params=params))
        assert found  # keyword mode ranks by its own channel: no boost there
        return hybrid[0].memory.content

    # The period named decides between two equally good matches, both ways, and only with the boost on.
    assert top("Where did I go hiking in the Alps in January?", 0.2).endswith("Bob")
    assert top("Where did I go hiking in the Alps in March?", 0.2).endswith("Ann")
    assert top("Where did I go hiking in the Alps last Friday?", 0.2).endswith("Ann")
    # Off, the channels alone rank (the test embedder puts Ann first for this query).
    assert top("Where did I go hiking in the Alps in January?", 0.0).endswith("Ann")
