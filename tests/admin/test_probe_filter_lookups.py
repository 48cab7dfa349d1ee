"""A list's query string takes only the lookups its own filters read. Django
took any lookup on a filtered field: ``?scope__regex=(`` reached PostgreSQL as a
regular expression it refuses, ``?kind__unaccent=`` called an extension that is
not installed; both were a server error (500) instead of Django's 400."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.admin import test_hostile_input as hostile

pytestmark = pytest.mark.django_db

# The hostile-input tests' rows and tenant admin login.
stored = hostile.stored
client_a = hostile.client_a


@pytest.mark.parametrize(
    ("url_name", "query"),
    [
        ("admin:memory_memory_changelist", {"scope__regex": "("}),
        ("admin:memory_memory_changelist", {"kind__regex": "["}),
        ("admin:memory_memory_changelist", {"boundary_class__iregex": "(a"}),
        ("admin:memory_memory_changelist", {"embedding_status__regex": "*"}),
        ("admin:memory_memory_changelist", {"validity__unaccent": "active"}),
        ("admin:memory_memory_changelist", {"kind__trigram_similar": "rule"}),
        ("admin:memory_conflictcandidate_changelist", {"kind__regex": "["}),
        ("admin:memory_conflictcandidate_changelist", {"status__regex": "("}),
        ("admin:memory_memoryevent_changelist", {"event_type__regex": "("}),
        ("admin:policy_principal_changelist", {"role__regex": "("}),
        ("admin:policy_policyevent_changelist", {"event_type__regex": "("}),
        ("admin:policy_policyversion_changelist", {"signed__regex": "("}),
    ],
)
def test_a_lookup_the_filter_does_not_read_is_refused(client_a, url_name, query):
    before = hostile.snapshot()
    response = client_a.get(reverse(url_name), query)
    assert response.status_code == 400
    assert hostile.snapshot() == before


def test_the_lookups_the_filters_read_still_filter(client_a):
    url = reverse("admin:memory_memory_changelist")
    page = client_a.get(url, {"kind__exact": "rule"}).content.decode()
    assert "Deploy on Tuesdays" in page and "Acme plans" not in page
    assert client_a.get(url, {"maturity__isnull": "True"}).status_code == 200
    assert client_a.get(url, {"scope": "global"}).status_code == 200
    conflicts = reverse("admin:memory_conflictcandidate_changelist")
    assert client_a.get(conflicts, {"status__exact": "open"}).status_code == 200
    versions = reverse("admin:policy_policyversion_changelist")
    assert client_a.get(versions, {"is_current__exact": "1"}).status_code == 200
