"""policy_apply: what applies, what is refused (and that a refusal changes nothing)."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from django.core.management import CommandError, call_command

from policy.document import DEFAULT_POLICY, SEED_EXAMPLE_YAML
from policy.errors import PolicyConflict, PolicyInvalid, PolicyUnauthorized
from policy.models import PolicyEvent, PolicyVersion, Tenant
from policy.selectors.policies import policy_current
from policy.services.policies import policy_apply
from policy.services.signing import policy_sign, signing_key_set
from policy.services.tenants import tenant_get_or_create
from tests.policy.test_document import UPSTREAM_YAML

pytestmark = pytest.mark.django_db(transaction=True)


def snapshot(tenant_id):
    return (
        sorted(PolicyVersion.objects.filter(tenant_id=tenant_id).values_list("version", "is_current")),
        policy_current(tenant_id=tenant_id).to_dict(),
    )


def test_a_new_tenant_starts_with_the_default_policy():
    tenant, created = tenant_get_or_create(slug="fresh")
    assert created
    row = PolicyVersion.objects.get(tenant=tenant)
    assert row.is_current and row.version == "0.0.0"
    assert policy_current(tenant_id=tenant.id).to_dict() == DEFAULT_POLICY.to_dict()
    # Asking again creates nothing more.
    assert tenant_get_or_create(slug="fresh")[1] is False
    assert PolicyVersion.objects.filter(tenant=tenant).count() == 1


def test_the_seed_example_applies_and_is_audited_with_its_approver(owner):
    result = policy_apply(caller=owner.caller, yaml=SEED_EXAMPLE_YAML, approver="alice (security)")
    assert result.applied and result.version == "0.1.0" and result.previous_version == "0.0.0"
    assert result.changes == []  # same values as the default
    current = PolicyVersion.objects.get(tenant_id=owner.caller.tenant_id, is_current=True)
    assert current.version == "0.1.0" and current.source_yaml == SEED_EXAMPLE_YAML
    assert current.approver == "alice (security)" and current.applied_by == owner.caller.principal_id
    # All versions are kept, one is current.
    assert snapshot(owner.caller.tenant_id)[0] == [("0.0.0", False), ("0.1.0", True)]
    event = PolicyEvent.objects.get(tenant_id=owner.caller.tenant_id, event_type="applied")
    assert (event.version, event.previous_version, event.approver) == ("0.1.0", "0.0.0", "alice (security)")
    assert event.actor_principal_id == owner.caller.principal_id


def test_the_upstream_shape_applies_and_changes_are_reported(owner):
    text = UPSTREAM_YAML.replace("alpha: 0.65", "alpha: 0.5")
    result = policy_apply(caller=owner.caller, yaml=text)
    assert result.applied and result.version == "0.3.0" and result.source_shape == "upstream"
    assert result.changes == [{"path": "retrieval.hybrid.alpha", "before": 0.65, "after": 0.5}]
    assert policy_current(tenant_id=owner.caller.tenant_id).retrieval.alpha == 0.5


def test_a_policy_without_version_gets_the_next_patch(owner):
    policy_apply(caller=owner.caller, yaml=SEED_EXAMPLE_YAML)
    result = policy_apply(caller=owner.caller, yaml="retrieval: { hybrid: { k_final: 20 } }\n")
    assert result.version == "0.1.1"


@pytest.mark.parametrize(
    ("yaml_text", "error", "fragment"),
    [
        ("version: [1\n", PolicyInvalid, "does not parse"),
        ("version: 1\nsurprise: true\n", PolicyInvalid, "surprise: unknown key"),
        ("version: 1\nretrieval: { hybrid: { alpha: 3 } }\n", PolicyInvalid, "retrieval.hybrid.alpha"),
        ("version: '0.0.0'\n", PolicyConflict, "not newer"),
    ],
)
def test_bad_policies_are_refused_and_change_nothing(owner, yaml_text, error, fragment):
    before = snapshot(owner.caller.tenant_id)
    with pytest.raises(error, match=fragment.replace("[", r"\[")):
        policy_apply(caller=owner.caller, yaml=yaml_text)
    assert snapshot(owner.caller.tenant_id) == before


def test_a_stale_expected_version_is_refused(owner):
    policy_apply(caller=owner.caller, yaml=SEED_EXAMPLE_YAML, expected_version="0.0.0")
    before = snapshot(owner.caller.tenant_id)
    with pytest.raises(PolicyConflict, match="stale: the current policy is 0.1.0"):
        policy_apply(caller=owner.caller, yaml="version: '0.2.0'\n", expected_version="0.0.0")
    assert snapshot(owner.caller.tenant_id) == before
    # With the right expectation (any spelling of it) it applies.
    assert policy_apply(caller=owner.caller, yaml="version: '0.2.0'\n", expected_version="0.1").applied


def test_a_version_is_never_reused(owner):
    policy_apply(caller=owner.caller, yaml=SEED_EXAMPLE_YAML)
    with pytest.raises(PolicyConflict, match="not newer"):
        policy_apply(caller=owner.caller, yaml=SEED_EXAMPLE_YAML)


def test_a_member_may_not_apply(member, owner):
    before = snapshot(member.caller.tenant_id)
    with pytest.raises(PolicyUnauthorized, match="only a tenant admin"):
        policy_apply(caller=member.caller, yaml=SEED_EXAMPLE_YAML)
    assert snapshot(member.caller.tenant_id) == before
    refused = PolicyEvent.objects.get(tenant_id=member.caller.tenant_id, event_type="refused")
    assert refused.payload["code"] == "UNAUTHORIZED" and refused.actor_principal_id == member.caller.principal_id


def test_an_admin_of_another_tenant_cannot_reach_this_one(owner, outsider):
    policy_apply(caller=owner.caller, yaml=SEED_EXAMPLE_YAML)
    assert policy_current(tenant_id=outsider.caller.tenant_id).version == "0.0.0"


def test_signed_policies_when_a_key_is_configured(owner):
    key = signing_key_set(caller=owner.caller)
    before = snapshot(owner.caller.tenant_id)
    with pytest.raises(PolicyUnauthorized, match="requires signed policies"):
        policy_apply(caller=owner.caller, yaml=SEED_EXAMPLE_YAML)
    with pytest.raises(PolicyUnauthorized, match="does not match"):
        policy_apply(caller=owner.caller, yaml=SEED_EXAMPLE_YAML, signature=policy_sign(key="x" * 64, yaml_text="y"))
    with pytest.raises(PolicyUnauthorized, match="does not match"):
        # A valid signature of other content does not carry over.
        policy_apply(
            caller=owner.caller,
            yaml=SEED_EXAMPLE_YAML + "\n",
            signature=policy_sign(key=key, yaml_text=SEED_EXAMPLE_YAML),
        )
    # validate_only checks the signature too.
    with pytest.raises(PolicyUnauthorized):
        policy_apply(caller=owner.caller, yaml=SEED_EXAMPLE_YAML, validate_only=True)
    assert snapshot(owner.caller.tenant_id) == before
    signature = "sha256=" + policy_sign(key=key, yaml_text=SEED_EXAMPLE_YAML)
    result = policy_apply(caller=owner.caller, yaml=SEED_EXAMPLE_YAML, signature=signature)
    assert result.applied and result.signed
    assert PolicyVersion.objects.get(tenant_id=owner.caller.tenant_id, is_current=True).signed


def test_validate_only_and_dry_run_store_no_policy_and_are_audited(owner):
    tenant_id = owner.caller.tenant_id
    before = snapshot(tenant_id)
    checked = policy_apply(caller=owner.caller, yaml=SEED_EXAMPLE_YAML, validate_only=True, actor_name="ci")
    assert checked.version == "0.1.0" and not checked.applied and checked.visibility is None
    dry_yaml = UPSTREAM_YAML.replace("alpha: 0.65", "alpha: 0.2")
    dry = policy_apply(caller=owner.caller, yaml=dry_yaml, dry_run=True)
    assert not dry.applied and dry.changes and dry.visibility is not None
    assert snapshot(tenant_id) == before
    # No policy changed, but who checked what is on record (the source's hash, not the source).
    events = list(PolicyEvent.objects.filter(tenant_id=tenant_id).order_by("id"))
    assert [e.event_type for e in events] == ["validated", "dry_run"]
    validated, dry_event = events
    assert validated.actor_principal_id == owner.caller.principal_id and validated.actor_name == "ci"
    assert (validated.version, validated.previous_version) == ("0.1.0", "0.0.0")
    assert dry_event.payload["changes"] == dry.changes
    assert dry_event.payload["memories_changing_visibility"] == dry.visibility["memories_changing_visibility"]
    assert dry_event.payload["source_sha256"] == hashlib.sha256(dry_yaml.encode()).hexdigest()
    assert "alpha: 0.2" not in json.dumps(dry_event.payload)


def test_a_refused_dry_run_is_audited_without_its_input(owner):
    bomb = "a: &a ['lol', 'lol']\nb: &b [*a, *a]\nretrieval: {hybrid: {alpha: *b}}\n"
    with pytest.raises(PolicyInvalid, match="anchors"):
        policy_apply(caller=owner.caller, yaml=bomb, dry_run=True)
    refused = PolicyEvent.objects.get(tenant_id=owner.caller.tenant_id, event_type="refused")
    assert refused.payload["code"] == "INVALID_POLICY" and refused.payload["mode"] == "dry_run"
    assert "lol" not in json.dumps(refused.payload)


def test_dry_run_counts_memories_that_change_visibility(owner):
    from memory.models import Memory

    tenant_id = owner.caller.tenant_id
    for boundary_class, n in (("internal", 3), ("pii", 2), ("secret", 1), ("public", 4)):
        for i in range(n):
            Memory.objects.create(
                tenant_id=tenant_id,
                kind="rule",
                content=f"{boundary_class} {i}",
                content_hash=f"h{boundary_class}{i}",
                boundary_class=boundary_class,
            )
    # Make internal memories private to tools only: answer:task reads lose them.
    tighter = "version: '0.2.0'\nboundary_classes: { internal: { allow: ['tool:*'] } }\n"
    dry = policy_apply(caller=owner.caller, yaml=tighter, dry_run=True)
    assert dry.visibility is not None
    assert dry.visibility["memories_changing_visibility"] == 3
    assert dry.visibility["memories_by_class"] == {"public": 4, "internal": 3, "pii": 2, "secret": 1}
    assert {(c["use_tag"], c["boundary_class"], c["before"], c["after"]) for c in dry.visibility["changes"]} == {
        ("answer:task", "internal", "visible", "denied")
    }
    # Opening pii to answer:task, redacted: pii changes too.
    looser = "version: '0.2.0'\nboundary_classes: { pii: { allow: ['answer:task'], redact: ['email'] } }\n"
    dry = policy_apply(caller=owner.caller, yaml=looser, dry_run=True)
    assert dry.visibility is not None
    assert dry.visibility["memories_changing_visibility"] == 2


def test_policy_events_are_append_only(owner):
    from django.db import DatabaseError, transaction

    policy_apply(caller=owner.caller, yaml=SEED_EXAMPLE_YAML)
    event = PolicyEvent.objects.get(event_type="applied")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        PolicyEvent.objects.filter(pk=event.pk).update(approver="someone else")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        PolicyEvent.objects.filter(pk=event.pk).delete()


def test_the_command_applies_dry_runs_and_refuses(tmp_path, owner):
    slug = Tenant.objects.get(pk=owner.caller.tenant_id).slug
    path = tmp_path / "policy.yaml"
    path.write_text(SEED_EXAMPLE_YAML, encoding="utf-8")
    out = io.StringIO()
    call_command("policy_apply", "--tenant", slug, "--file", str(path), "--dry-run", stdout=out)
    assert json.loads(out.getvalue())["applied"] is False
    assert policy_current(tenant_id=owner.caller.tenant_id).version == "0.0.0"
    out = io.StringIO()
    call_command("policy_apply", "--tenant", slug, "--file", str(path), "--approver", "bob", stdout=out)
    assert json.loads(out.getvalue())["version"] == "0.1.0"
    row = PolicyVersion.objects.get(tenant_id=owner.caller.tenant_id, is_current=True)
    assert row.approver == "bob" and row.applied_by_name == "manage.py policy_apply"
    with pytest.raises(CommandError, match=r"\[CONFLICT\].*stale"):
        call_command("policy_apply", "--tenant", slug, "--file", str(path), "--expected-version", "0.0.0")
    path.write_text("version: 2\nbogus: 1\n", encoding="utf-8")
    with pytest.raises(CommandError, match=r"\[INVALID_POLICY\] bogus: unknown key"):
        call_command("policy_apply", "--tenant", slug, "--file", str(path), "--validate-only")
    with pytest.raises(CommandError, match="no tenant"):
        call_command("policy_apply", "--tenant", "nobody", "--file", str(path))


def test_the_command_signs_exactly_the_file_bytes(tmp_path, owner):
    slug = Tenant.objects.get(pk=owner.caller.tenant_id).slug
    out = io.StringIO()
    call_command("policy_signing_key", "--tenant", slug, "set", stdout=out)
    key = out.getvalue().strip()
    path = tmp_path / "policy.yaml"
    path.write_bytes(SEED_EXAMPLE_YAML.replace("\n", "\r\n").encode("utf-8"))  # a Windows checkout
    signature = policy_sign(key=key, yaml_text=path.read_bytes().decode("utf-8"))
    with pytest.raises(CommandError, match=r"\[UNAUTHORIZED\] this tenant requires signed policies"):
        call_command("policy_apply", "--tenant", slug, "--file", str(path))
    call_command("policy_apply", "--tenant", slug, "--file", str(path), "--signature", signature, stdout=io.StringIO())
    assert PolicyVersion.objects.get(tenant_id=owner.caller.tenant_id, is_current=True).signed
