"""Consolidation through both consolidators. The LLM one talks HTTP to a local
fake chat-completions server (tests/workers/fakes.py): good answers, malformed
ones, slow ones and server errors."""

import json
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from memory.consolidators import ConsolidatorUnavailable, get_consolidator
from memory.consolidators.llm import LLMConsolidator
from memory.models import Memory, MemoryEvent, MemoryLink
from memory.services.consolidation import consolidation_sweep, episodes_consolidate
from memory.services.memories import episode_store, fact_store
from tests.conftest import make_identity
from tests.workers.fakes import ChatStep, FakeOpenAI, episodes_in, one_fact_from_all_episodes

# Similarity thresholds and clustering are tuned to the real model's vectors.
pytestmark = [pytest.mark.django_db, pytest.mark.real_embedder]

DARK_MODE = [
    "User prefers dark mode in the editor",
    "The user likes dark mode for the editor",
    "User said they prefer dark mode in editors",
]
TESTS_RULE = [
    "Always run the tests before committing",
    "Run tests before every commit, always",
    "Remember to always run the test suite before you commit",
]


@pytest.fixture
def fake():
    server = FakeOpenAI()
    yield server
    server.close()


def store(identity, texts, **kw):
    return [episode_store(caller=identity.caller, content=t, butler="assistant", **kw) for t in texts]


def snapshot():
    return (
        sorted(
            Memory.objects.values_list("id", "validity", "consolidated_at", "superseded_by_id", "last_confirmed_at")
        ),
        MemoryEvent.objects.count(),
        MemoryLink.objects.count(),
    )


def test_offline_turns_recurring_episodes_into_a_fact_and_a_rule(member, outsider):
    dark = store(member, DARK_MODE)
    rule_sources = store(member, TESTS_RULE)
    lonely = store(member, ["The deploy of the billing service failed"])[0]
    foreign = store(outsider, DARK_MODE[:2])

    result = consolidation_sweep(consolidator=get_consolidator("offline"))
    assert result.tenants == 2 and len(result.created) == 2

    fact = Memory.objects.get(kind="fact", tenant_id=member.caller.tenant_id)
    rule = Memory.objects.get(kind="rule", tenant_id=member.caller.tenant_id)
    assert fact.content in DARK_MODE and fact.subject == "assistant" and "dark" in fact.predicate
    assert fact.source == "consolidation" and fact.metadata["consolidator"] == "offline"
    assert rule.content in TESTS_RULE and rule.maturity == "candidate"
    assert set(
        MemoryLink.objects.filter(from_memory=fact, kind="derived_from").values_list("to_memory_id", flat=True)
    ) == {e.id for e in dark}
    assert set(MemoryLink.objects.filter(from_memory=rule).values_list("to_memory_id", flat=True)) == {
        e.id for e in rule_sources
    }
    consolidated = set(Memory.objects.filter(consolidated_at__isnull=False).values_list("id", flat=True))
    assert consolidated == {e.id for e in dark + rule_sources}  # the lonely one waits for company
    assert MemoryEvent.objects.filter(event_type="consolidated", memory_id=dark[0].id).get().payload["into"] == str(
        fact.id
    )
    # Tenant B's two episodes are not enough, and nothing crossed the tenant boundary.
    assert not Memory.objects.filter(tenant_id=outsider.caller.tenant_id).exclude(kind="episode").exists()
    assert all(m.consolidated_at is None for m in Memory.objects.filter(pk__in=[f.id for f in foreign]))

    before = snapshot()
    consolidation_sweep(consolidator=get_consolidator("offline"))
    assert snapshot() == before  # running it again changes nothing

    # Once it has settled, a lonely episode is marked considered (and produces nothing).
    with time_machine.travel(timezone.now() + timedelta(hours=25)):
        consolidation_sweep(consolidator=get_consolidator("offline"))
    assert Memory.objects.get(pk=lonely.id).consolidated_at is not None
    assert Memory.objects.exclude(kind="episode").count() == 2


def test_offline_merges_duplicate_episodes_inside_a_recurring_cluster(member):
    first, second, third = store(member, [DARK_MODE[0], DARK_MODE[0], DARK_MODE[1]])
    episodes_consolidate(tenant_id=member.caller.tenant_id, consolidator=get_consolidator("offline"))
    # The older of the two identical episodes is superseded by the newer one.
    first_row = Memory.objects.get(pk=first.id)
    assert (first_row.validity, first_row.superseded_by_id) == ("superseded", second.id)
    assert Memory.objects.get(pk=second.id).validity == "active"
    assert Memory.objects.get(pk=third.id).validity == "active"  # similar, not the same statement


def test_consolidated_fact_supersedes_through_fact_store(member, fake):
    old = fact_store(
        caller=member.caller, subject="user", predicate="editor theme", content="User likes light mode"
    ).memory
    episodes = store(member, DARK_MODE)

    answer = one_fact_from_all_episodes(
        content="User prefers dark mode in the editor", subject="user", predicate="editor theme", importance=6
    )

    fake.chat_script = [ChatStep(content=answer)]
    llm = LLMConsolidator(base_url=fake.base_url, model="test-model", api_key="sk-test", timeout=10)
    result = episodes_consolidate(tenant_id=member.caller.tenant_id, consolidator=llm)

    [created] = result.created
    new = Memory.objects.get(pk=created)
    assert (new.subject, new.predicate, new.permanence, new.importance) == ("user", "editor theme", "stable", 6)
    old.refresh_from_db()
    assert (old.validity, old.superseded_by_id) == ("superseded", new.id)  # the usual supersession
    assert MemoryLink.objects.filter(from_memory=new).count() == 3
    assert all(Memory.objects.get(pk=e.id).consolidated_at for e in episodes)

    [call] = fake.calls("/v1/chat/completions")
    assert call.headers["Authorization"] == "Bearer sk-test"
    assert call.body["model"] == "test-model"
    assert call.body["response_format"]["type"] == "json_schema"
    assert call.body["response_format"]["json_schema"]["schema"]["required"] == ["memories", "duplicates"]
    assert "maxLength" not in json.dumps(call.body["response_format"])  # bounds are checked locally
    assert {e["content"] for e in episodes_in(call.body)} == set(DARK_MODE)


SEATTLE = [
    "The user lives in Seattle now",
    "The user lives in Seattle these days",
    "User lives in Seattle, Washington now",
]


def test_a_fact_stored_after_the_episodes_stays_active_over_what_they_said(member, fake):
    """The episodes say Seattle; the user then moved, and a fact says Austin.
    Consolidating the older episodes later must not retire the newer fact: the
    derived fact is dated at its newest episode and kept as the Austin fact's
    past version. A fact older than the episodes is still superseded by them."""
    episodes = store(member, SEATTLE)
    newer = fact_store(
        caller=member.caller, subject="user", predicate="city", content="The user moved to Austin"
    ).memory
    fake.chat_script = [
        ChatStep(
            content=one_fact_from_all_episodes(content="The user lives in Seattle", subject="user", predicate="city")
        )
    ]
    llm = LLMConsolidator(base_url=fake.base_url, model="test-model", api_key="sk-test", timeout=10)
    [created] = episodes_consolidate(tenant_id=member.caller.tenant_id, consolidator=llm).created

    derived = Memory.objects.get(pk=created)
    newer.refresh_from_db()
    assert newer.validity == "active" and newer.superseded_by_id is None
    assert (derived.validity, derived.superseded_by_id) == ("superseded", newer.id)
    assert derived.created_at == max(e.created_at for e in episodes)
    assert MemoryLink.objects.filter(from_memory=derived).count() == 3
    assert all(Memory.objects.get(pk=e.id).consolidated_at for e in episodes)
    stored = MemoryEvent.objects.get(memory_id=derived.id, event_type="stored").payload
    assert stored == {"supersedes": [], "superseded_by": str(newer.id)}
    active = Memory.objects.filter(tenant_id=member.caller.tenant_id, kind="fact", validity="active")
    assert [m.content for m in active] == ["The user moved to Austin"]


@pytest.mark.parametrize("stored_first", ["older", "newer"])
def test_two_statements_of_one_key_leave_the_newer_active_whichever_is_stored_first(member, stored_first):
    """Two derived facts of one key, from episodes a day apart, stored in
    either order (a consolidator's proposals come in any order)."""
    now = timezone.now()
    said = {"older": ("The user lives in Seattle", now - timedelta(days=1)), "newer": ("The user lives in Austin", now)}
    order = [stored_first, "newer" if stored_first == "older" else "older"]
    stored = {
        which: fact_store(
            caller=member.caller, subject="user", predicate="city", content=said[which][0], stated_at=said[which][1]
        ).memory
        for which in order
    }
    rows = {which: Memory.objects.get(pk=m.pk) for which, m in stored.items()}
    assert rows["newer"].validity == "active"
    assert (rows["older"].validity, rows["older"].superseded_by_id) == ("superseded", rows["newer"].pk)
    assert rows["older"].created_at == said["older"][1]


def test_llm_malformed_output_is_retried_with_the_error(member, fake):
    episodes = store(member, TESTS_RULE)
    good = json.dumps(
        {
            "memories": [
                {
                    "kind": "rule",
                    "content": "Run the tests before committing",
                    "subject": "",
                    "predicate": "",
                    "permanence": "standard",
                    "importance": 7,
                    "source_ids": [str(e.id) for e in episodes],
                }
            ],
            "duplicates": [[str(episodes[0].id), str(episodes[1].id)]],
        }
    )
    fake.chat_script = [
        ChatStep(content="Sure! Here are the memories: {not json"),
        ChatStep(content=json.dumps({"memories": [{"kind": "fact"}], "duplicates": []})),
        ChatStep(content="```json\n" + good + "\n```"),  # fenced, as some local models answer
    ]
    llm = LLMConsolidator(base_url=fake.base_url, model="m", timeout=10, max_attempts=3)
    result = episodes_consolidate(tenant_id=member.caller.tenant_id, consolidator=llm)

    # The model grouped two differently worded episodes as duplicates: only the
    # same statement merges, so both stay.
    assert len(result.created) == 1 and result.merged == 0
    calls = fake.calls("/v1/chat/completions")
    assert len(calls) == 3
    assert "not valid JSON" in calls[1].body["messages"][-1]["content"]
    assert "does not match the schema" in calls[2].body["messages"][-1]["content"]
    assert Memory.objects.get(pk=episodes[1].id).superseded_by_id is None


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param([ChatStep(content="{}")], id="always-malformed"),
        pytest.param([ChatStep(status=500)], id="server-error"),
        pytest.param(
            [ChatStep(content=json.dumps({"memories": [], "duplicates": [["not-an-episode", "x"]]}))],
            id="invented-ids",
        ),
        pytest.param(
            [
                ChatStep(
                    content=lambda body: json.dumps(
                        {
                            "memories": [
                                {
                                    "kind": "rule",
                                    "content": "Prefer dark mode",
                                    "subject": "",
                                    "predicate": "",
                                    "permanence": "standard",
                                    "importance": 42,
                                    "source_ids": [episodes_in(body)[0]["id"]],
                                }
                            ],
                            "duplicates": [],
                        }
                    )
                )
            ],
            id="out-of-bounds",
        ),
    ],
)
def test_llm_failures_leave_episodes_for_a_later_run(member, fake, steps):
    store(member, DARK_MODE)
    fake.chat_script = steps
    llm = LLMConsolidator(base_url=fake.base_url, model="m", timeout=10, max_attempts=2)
    before = snapshot()
    with pytest.raises(ConsolidatorUnavailable):
        episodes_consolidate(tenant_id=member.caller.tenant_id, consolidator=llm)
    assert snapshot() == before


def test_llm_slow_answer_times_out(member, fake):
    store(member, DARK_MODE)
    fake.chat_script = [ChatStep(content=json.dumps({"memories": [], "duplicates": []}), delay=3)]
    llm = LLMConsolidator(base_url=fake.base_url, model="m", timeout=0.5)
    with pytest.raises(ConsolidatorUnavailable, match="in time"):
        episodes_consolidate(tenant_id=member.caller.tenant_id, consolidator=llm)
    assert not Memory.objects.filter(consolidated_at__isnull=False).exists()


def test_llm_is_chosen_by_settings(settings, fake):
    settings.MEMPROJ_CONSOLIDATOR = "llm"
    settings.MEMPROJ_LLM_BASE_URL = fake.base_url
    assert get_consolidator().name == "llm"
    settings.MEMPROJ_CONSOLIDATOR = "offline"
    assert get_consolidator().name == "offline"


def test_sweep_serves_tenants_in_turn():
    tenants = [make_identity(f"tenant-{i}", "member") for i in range(3)]
    for identity in tenants:
        store(identity, DARK_MODE)
    first = consolidation_sweep(consolidator=get_consolidator("offline"), max_tenants=2)
    assert first.tenants == 2 and first.more  # the third tenant is left for the re-enqueued run
    second = consolidation_sweep(consolidator=get_consolidator("offline"), max_tenants=2)
    assert second.tenants == 1 and not second.more
    assert sorted(Memory.objects.filter(kind="fact").values_list("tenant_id", flat=True)) == sorted(
        i.caller.tenant_id for i in tenants
    )


def test_llm_server_down_is_transient(member):
    store(member, DARK_MODE)
    llm = LLMConsolidator(base_url="http://127.0.0.1:9/v1", model="m", timeout=2)  # nothing listens on port 9
    with pytest.raises(ConsolidatorUnavailable, match="unreachable"):
        episodes_consolidate(tenant_id=member.caller.tenant_id, consolidator=llm)


@pytest.mark.django_db(transaction=True)
def test_one_run_at_a_time_consolidates_a_tenant(member, fake):
    """A run that overlaps another (a redelivered task, a slow beat tick) skips
    the tenant instead of sending the same episodes to the LLM again."""
    import threading

    from django.db import connection

    from memory.services.sweeps import sweep_claim

    store(member, DARK_MODE)
    release = threading.Event()
    answer = one_fact_from_all_episodes(
        content="User prefers dark mode in the editor", subject="user", predicate="editor theme"
    )
    fake.chat_script = [ChatStep(content=answer, hold=release), ChatStep(content=answer)]
    llm = LLMConsolidator(base_url=fake.base_url, model="test-model", api_key="sk-test", timeout=60)
    first: list[object] = []

    def run_first() -> None:
        try:
            first.append(episodes_consolidate(tenant_id=member.caller.tenant_id, consolidator=llm))
        except BaseException as exc:  # asserted below
            first.append(exc)
        finally:
            connection.close()

    runner = threading.Thread(target=run_first)
    runner.start()
    try:
        assert fake.chat_started.wait(60), "the first run never asked the LLM"
        overlapping = episodes_consolidate(tenant_id=member.caller.tenant_id, consolidator=llm)
    finally:
        release.set()
        runner.join(timeout=120)
    assert (overlapping.consumed, overlapping.created) == (0, [])
    [result] = first
    assert not isinstance(result, BaseException), result
    assert result.consumed == 3 and len(result.created) == 1  # type: ignore[attr-defined]
    assert len(fake.calls("/v1/chat/completions")) == 1
    # The first run let go of the tenant when it finished.
    with sweep_claim(f"consolidate.{member.caller.tenant_id}") as claimed:
        assert claimed
