"""The approver of a policy apply is stored as text with the version and its
events: one holding a NUL character (PostgreSQL refuses it) or a lone surrogate
(UTF-8 cannot encode it, e.g. from a command line of bytes that are not UTF-8)
failed the event's insert after the policy was checked, a DataError or a
UnicodeEncodeError instead of INVALID_POLICY naming the approver."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from policy.errors import PolicyInvalid
from policy.models import PolicyEvent, PolicyVersion, Tenant
from policy.services.policies import policy_apply

YAML = "version: '9.0.0'\nrate_limit: {limit: 5}\n"


@pytest.mark.django_db
@pytest.mark.parametrize("approver", ["alice\x00", "alice \udcff (security)"])
@pytest.mark.parametrize("mode", ["validate_only", "dry_run", "apply"])
def test_an_approver_the_store_cannot_hold_is_refused_by_name(owner, approver, mode):
    with pytest.raises(PolicyInvalid) as info:
        policy_apply(
            caller=owner.caller,
            yaml=YAML,
            dry_run=mode == "dry_run",
            validate_only=mode == "validate_only",
            approver=approver,
        )
    assert info.value.code == "INVALID_POLICY"
    assert info.value.problems[0][0] == "approver"
    assert not PolicyVersion.objects.filter(tenant_id=owner.caller.tenant_id, version="9.0.0").exists()
    assert not PolicyEvent.objects.filter(tenant_id=owner.caller.tenant_id, event_type="applied").exists()


@pytest.mark.django_db
def test_the_command_answers_invalid_policy_naming_the_approver(owner, tmp_path):
    # A command line is bytes: one that is not UTF-8 reaches Python as lone surrogates.
    path = tmp_path / "policy.yaml"
    path.write_text(YAML, encoding="utf-8")
    slug = Tenant.objects.get(pk=owner.caller.tenant_id).slug
    with pytest.raises(CommandError, match=r"^\[INVALID_POLICY\] approver: "):
        call_command("policy_apply", "--tenant", slug, "--file", str(path), "--approver", "alice \udcff")
    assert not PolicyVersion.objects.filter(tenant_id=owner.caller.tenant_id, version="9.0.0").exists()
