"""Hostile input to the admin: a query string, an action's selection, an
autocomplete term or a review form that the database cannot take (a NUL
character, a year outside 1-9999, a page past any table, an id that is not an
id) answers cleanly (400, a redirect, an empty result or a message, never a
server error) and changes nothing; what agents stored, HTML and scripts
included, reaches every page as text (Django test client, real database)."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from memory.models import ConflictCandidate, Memory, MemoryEvent
from memory.services.memories import fact_store, rule_store
from policy.models import ApiToken

pytestmark = pytest.mark.django_db

# Every list a tenant admin reaches.
LISTS = [
    "admin:memory_memory_changelist",
    "admin:memory_memoryevent_changelist",
    "admin:memory_conflictcandidate_changelist",
    "admin:policy_apitoken_changelist",
    "admin:policy_principal_changelist",
    "admin:policy_tenant_changelist",
    "admin:policy_policyversion_changelist",
    "admin:policy_policyevent_changelist",
]
# The lists that read one page past the requested one instead of counting (NoCountPaginator).
UNCOUNTED_LISTS = LISTS[:3]


def snapshot() -> tuple[Any, ...]:
    """What a request that changes nothing leaves as it was."""
    return (
        sorted(
            Memory.objects.values_list(
                "id", "validity", "superseded_by_id", "maturity", "last_confirmed_at", "embedding_status"
            )
        ),
        MemoryEvent.objects.count(),
        sorted(ApiToken.objects.values_list("id", "revoked_at")),
        sorted(ConflictCandidate.objects.values_list("id", "status")),
    )


@pytest.fixture
def stored(admin_a, admin_b) -> dict[str, Memory]:
    newer = fact_store(caller=admin_a.caller, subject="acme", predicate="plan", content="Acme plans a launch").memory
    older = rule_store(caller=admin_a.caller, content="Deploy on Tuesdays")
    ConflictCandidate.objects.create(tenant=admin_a.tenant, memory=newer, other=older, kind="duplicate", similarity=0.9)
    other = fact_store(caller=admin_b.caller, subject="bravo", predicate="plan", content="Bravo plans a merger").memory
    return {"fact": newer, "rule": older, "other": other}


@pytest.fixture
def client_a(client, admin_a, stored):
    client.force_login(admin_a.user)
    return client


@pytest.mark.parametrize("url_name", LISTS)
@pytest.mark.parametrize("query", ["created_at__year=0", "created_at__year=10000", "created_at__year__gte=10000"])
def test_a_filter_the_list_does_not_offer_is_refused(client_a, url_name, query):
    """Django lets the query string filter by any lookup on a model's own
    fields; a year outside 1-9999 then failed while the SQL was built (500).
    The lists take only the filters they offer."""
    before = snapshot()
    response = client_a.get(f"{reverse(url_name)}?{query}")
    assert response.status_code == 400
    assert snapshot() == before


def test_a_memory_list_is_not_filtered_by_what_it_does_not_offer(client_a, stored):
    url = reverse("admin:memory_memory_changelist")
    assert client_a.get(url, {"content__contains": "Acme"}).status_code == 400
    assert client_a.get(url, {"content__regex": "(a+)+$"}).status_code == 400
    # What it offers still filters.
    page = client_a.get(url, {"kind__exact": "rule"}).content.decode()
    assert "Deploy on Tuesdays" in page and "Acme plans" not in page


@pytest.mark.parametrize(
    ("url_name", "parameter"),
    [
        ("admin:memory_memory_changelist", "scope"),
        ("admin:memory_memory_changelist", "embedding_status__exact"),
        ("admin:memory_memory_changelist", "kind__exact"),
        ("admin:memory_memoryevent_changelist", "event_type"),
        ("admin:memory_conflictcandidate_changelist", "status__exact"),
        ("admin:policy_principal_changelist", "role__exact"),
        ("admin:policy_policyevent_changelist", "event_type__exact"),
    ],
)
def test_a_nul_character_in_a_filter_is_refused(client_a, url_name, parameter):
    """PostgreSQL's text cannot hold NUL: the query failed (500)."""
    before = snapshot()
    response = client_a.get(reverse(url_name), {parameter: "open\x00"})
    assert response.status_code == 400
    assert snapshot() == before


@pytest.mark.parametrize("url_name", UNCOUNTED_LISTS)
@pytest.mark.parametrize("page", [str(10**20), str(2**63), "-1", "0", "99999999", "abc"])
def test_a_page_past_any_table_is_a_clean_answer(client_a, url_name, page):
    """A page number whose offset overflows PostgreSQL's bigint failed the query (500)."""
    before = snapshot()
    response = client_a.get(reverse(url_name), {"p": page})
    assert response.status_code in (200, 302)
    if response.status_code == 302:
        assert response["Location"].endswith("?e=1")  # Django's answer to a page the list does not have
    assert snapshot() == before


@pytest.mark.parametrize(
    ("model_name", "field_name"),
    [("principal", "tenant"), ("apitoken", "principal"), ("memory", "superseded_by")],
)
def test_an_autocomplete_term_with_a_nul_character_finds_nothing(client_a, model_name, field_name):
    app_label = "memory" if model_name == "memory" else "policy"
    response = client_a.get(
        reverse("admin:autocomplete"),
        {"app_label": app_label, "model_name": model_name, "field_name": field_name, "term": "tenant\x00"},
    )
    assert response.status_code == 200
    assert response.json()["results"] == []


@pytest.mark.parametrize("action", ["action_retract", "export_csv"])
@pytest.mark.parametrize("bad_id", ["not-a-uuid", "\x00", ""])
def test_an_action_on_something_that_is_not_an_id_changes_nothing(client_a, stored, action, bad_id):
    """A malformed id beside a good one: the whole action is refused with a
    message (it failed with a server error), the good row untouched."""
    before = snapshot()
    response = client_a.post(
        reverse("admin:memory_memory_changelist"),
        {"action": action, "index": "0", "_selected_action": [str(stored["fact"].pk), bad_id]},
        follow=True,
    )
    assert response.status_code == 200 and response.redirect_chain
    assert not response.get("Content-Type", "").startswith("text/csv")
    messages = [str(m) for m in response.context["messages"]]
    assert any("not an id" in m for m in messages), messages
    assert snapshot() == before


def test_an_event_export_on_something_that_is_not_an_id_exports_nothing(client_a, admin_a):
    event = MemoryEvent.objects.filter(tenant_id=admin_a.tenant.pk).first()
    assert event is not None
    response = client_a.post(
        reverse("admin:memory_memoryevent_changelist"),
        {"action": "export_csv", "_selected_action": [str(event.pk), "abc"]},
        follow=True,
    )
    assert response.status_code == 200 and response.redirect_chain
    assert not response.get("Content-Type", "").startswith("text/csv")


@pytest.mark.parametrize(
    "data",
    [
        {"action": "supersede", "replacement": "\x00"},
        {"action": "supersede", "replacement": "acme\x00plan"},
        {"action": "set_maturity", "maturity": "proven\x00"},
        {"action": "retract\x00"},
    ],
)
def test_a_review_carrying_a_nul_character_changes_nothing(client_a, stored, data):
    """A NUL reached the alias lookup of memory_pk and failed the query (500)."""
    before = snapshot()
    target = stored["rule"] if data["action"] == "set_maturity" else stored["fact"]
    response = client_a.post(reverse("admin:memory_memory_review", args=[target.pk]), data, follow=True)
    assert response.status_code == 200
    messages = [str(m) for m in response.context["messages"]]
    assert any("NUL" in m for m in messages), messages
    assert snapshot() == before


HOSTILE = '<script>alert("mp")</script><img src=x onerror="alert(1)">'


def test_stored_html_and_scripts_are_shown_as_text_everywhere(client_a, admin_a):
    """What an agent stored is text on every page a reviewer opens: the list,
    search results, the detail page (the content, the supersession chain, the
    conflicts), the conflict list and the dashboard; right-to-left and
    zero-width characters included."""
    rtl = "\u202etxet\u200b\u200d\ufeff שלום"
    older = fact_store(caller=admin_a.caller, subject=HOSTILE, predicate="p", content=f"{HOSTILE} tea {rtl}").memory
    newer = fact_store(caller=admin_a.caller, subject=HOSTILE, predicate="p", content=f"{HOSTILE} coffee").memory
    ConflictCandidate.objects.create(
        tenant=admin_a.tenant, memory=newer, other=older, kind="contradiction", similarity=0.8, reason=HOSTILE
    )
    pages = {
        "list": client_a.get(reverse("admin:memory_memory_changelist")),
        "search": client_a.get(reverse("admin:memory_memory_changelist"), {"q": "coffee"}),
        "detail of the newer": client_a.get(reverse("admin:memory_memory_change", args=[newer.pk])),
        "detail of the older": client_a.get(reverse("admin:memory_memory_change", args=[older.pk])),
        "conflicts": client_a.get(reverse("admin:memory_conflictcandidate_changelist")),
        "dashboard": client_a.get(reverse("memproj_dashboard", args=["tenant-a"])),
    }
    for name, response in pages.items():
        page = response.content.decode()
        assert response.status_code == 200, name
        assert "&lt;script&gt;alert(" in page, name  # shown, as text
        assert "<script>alert(" not in page and "<img src=x" not in page, name
    assert rtl in pages["detail of the older"].content.decode()
