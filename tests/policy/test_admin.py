"""Policy admin: tenant admins see and apply only their tenant's policies; the
diff, the apply history with approvers, the redaction preview, and the boundary
class on memory pages."""

from __future__ import annotations

import pytest
from django.test import Client

from memory.models import Memory
from policy.document import SEED_EXAMPLE_YAML
from policy.models import PolicyEvent, PolicyVersion
from policy.services.policies import policy_apply, policy_ensure_default
from tests.admin.conftest import PASSWORD, make_staff

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_a():
    staff = make_staff("alice", "tenant-a", "admin")
    assert staff.tenant is not None
    policy_ensure_default(tenant_id=staff.tenant.id)
    return staff


@pytest.fixture
def admin_b():
    staff = make_staff("bob", "tenant-b", "admin")
    assert staff.tenant is not None
    policy_ensure_default(tenant_id=staff.tenant.id)
    return staff


@pytest.fixture
def member_a(admin_a):
    staff = make_staff("mark", "tenant-a", "member")
    assert staff.tenant is not None
    staff.tenant.members_can_review = True
    staff.tenant.save()
    return staff


def login(staff) -> Client:
    client = Client()
    assert client.login(username=staff.user.username, password=PASSWORD)
    return client


def test_tenant_admins_see_only_their_tenants_policies(admin_a, admin_b):
    b_version = PolicyVersion.objects.get(tenant=admin_b.tenant)
    client = login(admin_a)
    listing = client.get("/admin/policy/policyversion/")
    assert listing.status_code == 200
    assert "tenant-a" in listing.content.decode() and "tenant-b" not in listing.content.decode()
    assert client.get(f"/admin/policy/policyversion/{b_version.pk}/change/").status_code == 404
    # The apply form offers only the admin's own tenant.
    form = client.get("/admin/policy/policyversion/apply/").content.decode()
    assert "tenant-a" in form and "tenant-b" not in form


def test_apply_from_the_admin_dry_run_then_apply_with_approver(admin_a):
    Memory.objects.create(tenant=admin_a.tenant, kind="rule", content="x", content_hash="h", boundary_class="internal")
    client = login(admin_a)
    data = {
        "tenant": str(admin_a.tenant.id),
        "yaml": "version: '0.2.0'\nboundary_classes: { internal: { allow: ['tool:*'] } }\n",
        "approver": "carol",
        "mode": "dry_run",
    }
    page = client.post("/admin/policy/policyversion/apply/", data)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="visibility-count">1<' in html and "boundary_classes.internal.allow" in html
    assert PolicyVersion.objects.get(tenant=admin_a.tenant, is_current=True).version == "0.0.0"

    done = client.post("/admin/policy/policyversion/apply/", {**data, "mode": "apply", "expected_version": "0.0.0"})
    assert done.status_code == 302
    current = PolicyVersion.objects.get(tenant=admin_a.tenant, is_current=True)
    assert current.version == "0.2.0" and current.approver == "carol" and current.applied_by_name == "admin:alice"
    event = PolicyEvent.objects.get(tenant=admin_a.tenant, event_type="applied")
    assert event.approver == "carol" and event.actor_principal_id == admin_a.principal.id

    stale = client.post("/admin/policy/policyversion/apply/", {**data, "mode": "apply", "expected_version": "0.0.0"})
    assert stale.status_code == 200 and "[CONFLICT]" in stale.content.decode()


def test_the_version_page_diffs_against_the_previous_or_a_chosen_version(admin_a):
    policy_apply(caller=admin_a.caller, yaml=SEED_EXAMPLE_YAML)
    policy_apply(
        caller=admin_a.caller, yaml="version: '0.2.0'\nretrieval: { hybrid: { alpha: 0.3 } }\n", approver="dan"
    )
    newest = PolicyVersion.objects.get(tenant=admin_a.tenant, version="0.2.0")
    first = PolicyVersion.objects.get(tenant=admin_a.tenant, version="0.0.0")
    client = login(admin_a)
    html = client.get(f"/admin/policy/policyversion/{newest.pk}/change/").content.decode()
    assert "from version 0.1.0 to 0.2.0" in html and "retrieval.hybrid.alpha" in html and "dan" in html
    html = client.get(f"/admin/policy/policyversion/{newest.pk}/change/?against={first.pk}").content.decode()
    assert "from version 0.0.0 to 0.2.0" in html


def test_members_cannot_apply(member_a):
    client = login(member_a)
    assert client.get("/admin/policy/policyversion/apply/").status_code == 403
    assert client.get("/admin/policy/policyversion/").status_code == 403


def test_redaction_preview(admin_a):
    client = login(admin_a)
    page = client.post(
        "/admin/policy/policyversion/redaction-preview/", {"text": "連絡先はtaro@example.jp、電話090-1234-5678"}
    )
    html = page.content.decode()
    assert "taro@example.jp" not in html.split('id="redacted-text"')[1]
    assert "[REDACTED:email]" in html and "[REDACTED:phone]" in html


def test_boundary_class_on_memory_pages_and_as_a_list_filter(admin_a):
    pii = Memory.objects.create(
        tenant=admin_a.tenant, kind="rule", content="call 090-1234-5678", content_hash="h1", boundary_class="pii"
    )
    Memory.objects.create(tenant=admin_a.tenant, kind="rule", content="plain note", content_hash="h2")
    client = login(admin_a)
    listing = client.get("/admin/memory/memory/?boundary_class__exact=pii").content.decode()
    assert "call 090" in listing and "plain note" not in listing
    detail = client.get(f"/admin/memory/memory/{pii.pk}/change/").content.decode()
    assert "Boundary class" in detail and "pii" in detail
