"""The policy commands say what went wrong in plain words: a tenant that does not
exist and a file that cannot be read were reported as Python's reprs
(``no tenant 'acme'``, ``[Errno 2] No such file or directory: '/x'``)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from policy.models import Tenant

pytestmark = pytest.mark.django_db


def refusal(*args: str) -> str:
    with pytest.raises(CommandError) as info:
        call_command(*args)
    return str(info.value)


@pytest.mark.parametrize("command", [("policy_apply", "--file", "-"), ("policy_signing_key", "set")])
def test_an_unknown_tenant_is_named_plainly(command):
    message = refusal(command[0], "--tenant", "nobody", *command[1:])
    assert message == "[NOT_FOUND] no tenant with the slug nobody"


def test_a_file_that_cannot_be_read_is_named_with_the_reason(owner, tmp_path):
    slug = Tenant.objects.get(pk=owner.caller.tenant_id).slug
    missing = tmp_path / "missing.yaml"
    assert refusal("policy_apply", "--tenant", slug, "--file", str(missing)) == (
        f"cannot read {missing}: no such file or directory"
    )
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"version: '1.0.0'\n# caf\xe9\n")
    assert refusal("policy_apply", "--tenant", slug, "--file", str(latin1)) == (
        f"cannot read {latin1}: not UTF-8 text (at byte 22)"
    )
