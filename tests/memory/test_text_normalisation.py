"""The keyword channel folds Unicode variants of a word into one term (migration
0043): full-width Latin and half-width katakana, decomposed accents, ligatures,
invisible characters inside a word and the Greek final sigma are found by their
usual forms, and ideographs outside the Basic Multilingual Plane are split into
bigrams like other kanji. Memories stored before the migration are refolded, and
their tenant's term statistics follow."""

from __future__ import annotations

import importlib
import uuid

import pytest
from django.core.management import call_command
from django.db import connection

from memory.selectors.memories import SearchQuery, memory_search
from memory.services.memories import episode_store, fact_store
from memproj.dbroles import as_owner
from tests.conftest import Identity, call
from tests.memory.test_retrieval import term_stats

NORMALISATION = "memory.migrations.0043_text_normalisation"

# (what is stored, how a reader asks for it); each pair analysed alike only when folded.
OTHER_FORMS = {
    "full-width Latin": ("ＡＰＩキーは金庫にある", "API"),
    "half-width katakana": ("ｶﾀｶﾅで書いた申請書", "カタカナ"),
    "final sigma": ("Ο ΣΊΣΥΦΟΣ ανεβάζει την πέτρα", "σίσυφος"),
    "decomposed accent": ("We met at the cafe\u0301 on Main Street", "café"),
    "ligature": ("The ﬁle server is down", "file"),
    "zero-width space": ("Moved to Aus\u200btin last spring", "Austin"),
    "soft hyphen": ("The quarterly re\u00adport is late", "report"),
    "variation selector": ("葛\U000e0100飾区の倉庫", "葛飾"),
}


def keyword(caller, query: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [h.memory.content for h in memory_search(caller=caller, query=SearchQuery(query, mode="keyword"))]


def query_terms(text: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT memproj_query_terms(%s)", [text])
        return sorted(cursor.fetchone()[0])


@pytest.mark.django_db
@pytest.mark.parametrize("form", OTHER_FORMS)
def test_a_memory_is_found_by_its_words_in_their_usual_form(member, form):
    stored, asked = OTHER_FORMS[form]
    episode_store(caller=member.caller, content=stored, butler="general")
    episode_store(caller=member.caller, content="An unrelated note about the garden", butler="general")
    assert keyword(member.caller, asked) == [stored]


@pytest.mark.django_db
def test_the_folding_works_both_ways(member):
    """The query side folds as the stored side does: the unusual form finds the usual one."""
    episode_store(caller=member.caller, content="The API key is in the vault", butler="general")
    episode_store(caller=member.caller, content="ΣΊΣΥΦΟΣ", butler="general")
    assert keyword(member.caller, "ＡＰＩ") == ["The API key is in the vault"]
    assert keyword(member.caller, "Σίσυφος") == ["ΣΊΣΥΦΟΣ"]


@pytest.mark.django_db
def test_ideographs_outside_the_basic_plane_are_split_into_bigrams(member):
    """𠮷 (U+20BB7) is a kanji like 吉: in a run it makes bigrams, so 𠮷野 is a
    term of 𠮷野家 and not of 𠮷田, which shares only the character."""
    episode_store(caller=member.caller, content="𠮷野家で昼食", butler="general")
    episode_store(caller=member.caller, content="𠮷田さんの家", butler="general")
    assert query_terms("𠮷野家") == sorted(["𠮷野", "野家"])
    assert keyword(member.caller, "𠮷野") == ["𠮷野家で昼食"]


@pytest.mark.django_db(transaction=True)
async def test_the_memory_tools_find_a_full_width_word_by_its_ascii_form(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        await call(client, "memory_store_fact", subject="vault", predicate="api_key", content="ＡＰＩキーは金庫にある")
        found = await call(client, "memory_search", query="API", mode="keyword")
    assert [r["content"] for r in found["results"]] == ["ＡＰＩキーは金庫にある"]


# --- the migration path -----------------------------------------------------------------------


def recomputed_statistics(tenant_id: uuid.UUID) -> tuple[dict[str, int], tuple[int, int] | None]:
    """The statistics as migration 0011 computes them from the rows."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT u.term, count(*) FROM memory_memory m, unnest(tsvector_to_array(m.search_vector)) AS u(term)"
            " WHERE m.tenant_id = %s GROUP BY 1",
            [tenant_id],
        )
        dfs = dict(cursor.fetchall())
        cursor.execute(
            "SELECT count(*), sum(length(search_vector)) FROM memory_memory WHERE tenant_id = %s GROUP BY tenant_id",
            [tenant_id],
        )
        totals = cursor.fetchone()
    return dfs, totals


def stale_rows() -> int:
    """Rows whose stored search vector is not what the current analysis makes of their content."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM memory_memory WHERE search_vector IS DISTINCT FROM memproj_search_vector(content)"
        )
        return cursor.fetchone()[0]


def store_each_form(identity: Identity, suffix: str) -> None:
    for stored, _ in OTHER_FORMS.values():
        episode_store(caller=identity.caller, content=f"{stored} {suffix}", butler="general")
    fact_store(caller=identity.caller, subject="vault", predicate=f"pin_{suffix}", content=f"金庫のＰＩＮ {suffix}")
    episode_store(caller=identity.caller, content=f"Plain English notes about meetings {suffix}", butler="general")


@pytest.mark.django_db(transaction=True)
def test_the_migration_refolds_stored_memories_and_their_term_statistics(member, outsider, monkeypatch):
    """Memories stored under the old analysis (and under the new, then taken
    back) are refolded by the migration in batches smaller than the table: each
    is found by the usual form of its words, and every tenant's term statistics
    are what a recomputation from its rows gives, zero counts left out."""
    monkeypatch.setattr(importlib.import_module(NORMALISATION), "BATCH_SIZE", 3)
    store_each_form(member, "first")
    with as_owner():
        call_command("migrate", "memory", "0042", verbosity=0)
    try:
        assert stale_rows() == 0
        for tenant in (member, outsider):
            assert term_stats(tenant.caller.tenant_id) == recomputed_statistics(tenant.caller.tenant_id)
        store_each_form(member, "second")
        store_each_form(outsider, "second")
    finally:
        with as_owner():
            call_command("migrate", "memory", verbosity=0)

    assert stale_rows() == 0
    for tenant in (member, outsider):
        dfs, totals = term_stats(tenant.caller.tenant_id)
        assert (dfs, totals) == recomputed_statistics(tenant.caller.tenant_id)
        assert "ａｐｉ" not in dfs and "ｐｉｎ" not in dfs
        assert dfs["pin"] == (2 if tenant is member else 1)
    for stored, asked in OTHER_FORMS.values():
        assert sorted(keyword(member.caller, asked)) == sorted([f"{stored} first", f"{stored} second"]), asked
        assert keyword(outsider.caller, asked) == [f"{stored} second"], asked
